// troupe-bench: load generator for a deployment, started in-process from a
// config file or running at --endpoint. Two modes:
//   open loop (--trace FILE or --synthetic N): requests sent at their
//     arrival times from an Azure or ShareGPT trace or S-LoRA's generator,
//     at one rate or a sweep (--rates), each rate on a fresh deployment;
//     reports TTFT, TBT and end-to-end latency (P50/P90/P99), throughput,
//     SLO attainment, effective throughput, PCIe bytes and the adapter hit
//     rate; JSON and CSV out (tools/workload/report.hpp).
//   closed loop (neither): N requests from C clients as fast as the server
//     answers, for the control plane's requests/s, over ZeroMQ or (--http)
//     the OpenAI-compatible HTTP front.
#include "messages/version.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/config.hpp"
#include "runtime/deployment.hpp"
#include "runtime/logging.hpp"
#include "tools/bench_driver.hpp"
#include "tools/client_connection.hpp"
#include "tools/http_client.hpp"
#include "tools/workload/report.hpp"
#include "tools/workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: troupe-bench [--config FILE | --endpoint URL] OPEN-LOOP | CLOSED-LOOP   (or --version)\n"
               "open loop (requests at their arrival times):\n"
               "  --trace FILE | --synthetic N   Azure 2023 or ShareGPT-lengths CSV, or N generated requests\n"
               "  --conversations FILE          multi-turn: ShareGPT conversations (rounds and lengths); --rate is\n"
               "                                conversations/s, --requests N the first N conversations;\n"
               "                                --think S between a reply and the next turn (default 2),\n"
               "                                --max-rounds K, --turn-tokens P:O (caps per turn), --advise\n"
               "                                (an advisory for each next turn when the reply ends)\n"
               "  --rate R | --rates R1,R2,...   requests/s (a sweep starts a fresh deployment per rate)\n"
               "  --cv C                        Gamma CV of gaps for generated arrivals (default 1)\n"
               "  --from S --seconds S          the part of an Azure trace to replay\n"
               "  --time-factor F               multiply every arrival time by F (2: half the rate)\n"
               "  --requests N                  at most N requests (the first N)\n"
               "  --prompt-range A:B --output-range A:B   generated lengths, uniform (default 8:512, 8:128)\n"
               "  --max-context N               prompt + output limit; longer prompts are cut (default 4096)\n"
               "  --adapters N --popularity P --base-fraction F   adapters lora-0..N-1 by uniform |\n"
               "                                power:A | zipf:S (default 0: base model only)\n"
               "  --priorities MIX              priority classes P:S[,P:S...]: share S of requests sent with\n"
               "                                priority P (e.g. 0:0.7,-1:0.3), each class reported apart\n"
               "  --time-scale X                wall s per model s (default: the config's sim time_scale, else 1)\n"
               "  --slo-ttft S --slo-tbt S      SLOs for attainment (default 0: not checked)\n"
               "  --slo-tbt-stat mean|p99       --slo-tbt on each request's mean time between tokens or its P99\n"
               "  --label L --seed N --json FILE --csv FILE --records FILE --no-progress\n"
               "  --stop-at-eos                 let the end-of-sequence token end a reply (default: every reply\n"
               "                                runs to its output length, as in the trace; ignore_eos)\n"
               "  --shared-prefix N[:G]         every single-turn prompt begins with the first N tokens of one of\n"
               "                                G system prompts (request i: i mod G; default G 1), as troupe-sim's\n"
               "closed loop (control plane):\n"
               "  --clients C --requests N --max-tokens K --prompt-bytes B --adapters A --stream\n"
               "  --window W                    requests in flight per ZeroMQ client (default 256)\n"
               "  --http                        POST /v1/completions to the OpenAI-compatible front instead, one\n"
               "                                request at a time per client's connection (in-process: [http] on;\n"
               "                                with --endpoint, the front's HOST:PORT); in the open loop too,\n"
               "                                streamed, a connection per request (not with --conversations)\n"
               "  --api-key KEY                 sent as a bearer key over HTTP (default: the config's first\n"
               "                                [http] api_keys entry)\n"
               "Defaults: config tests/e2e/configs/sim-instant.toml, 8 clients,\n"
               "20000 requests, 8 tokens, 32 prompt bytes, 0 adapters, no streaming.\n");
}

std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream in{s};
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty())
      out.push_back(item);
  return out;
}

bool parse_range(const std::string& v, std::uint32_t& lo, std::uint32_t& hi) {
  const auto parts = split(v, ':');
  if (parts.size() != 2)
    return false;
  char* e1 = nullptr;
  char* e2 = nullptr;
  const long a = std::strtol(parts[0].c_str(), &e1, 10), b = std::strtol(parts[1].c_str(), &e2, 10);
  if (*e1 != '\0' || *e2 != '\0' || a < 1 || b < a)
    return false;
  lo = static_cast<std::uint32_t>(a);
  hi = static_cast<std::uint32_t>(b);
  return true;
}

struct open_loop_args {
  std::string trace;
  long synthetic = 0;
  std::string conversations;
  double think_s = 2;
  std::uint32_t max_rounds = 0, turn_prompt = 0, turn_output = 0;
  bool advise = false;
  std::vector<double> rates;
  double cv = 1, from_s = 0, seconds = -1, time_factor = 1;
  long max_requests = 0;
  std::uint32_t prompt_lo = 8, prompt_hi = 512, output_lo = 8, output_hi = 128;
  std::uint32_t max_context = 4096;
  std::uint32_t adapters = 0;
  std::string popularity = "uniform";
  double base_fraction = 0;
  std::vector<troupe::workload::priority_share> priorities;
  double time_scale = -1;
  troupe::workload::slo target;
  std::string label = "run";
  std::uint64_t seed = 1;
  std::string json, csv, records;
  bool progress = true;
  bool http = false; ///< over the OpenAI-compatible front
  bool stop_at_eos = false; ///< replies may end at the end-of-sequence token (not ignore_eos)
  std::uint32_t shared_prefix = 0, prefix_groups = 1;
  std::string api_key;
};

/// The base model's name at the HTTP front `endpoint`: the first of GET
/// /v1/models; why not otherwise.
std::variant<std::string, std::string> base_model_at(const std::string& endpoint, const std::string& api_key) {
  using troupe::http_client;
  auto c = http_client::connect(endpoint);
  auto* client = std::get_if<std::unique_ptr<http_client>>(&c);
  if (client == nullptr)
    return std::variant<std::string, std::string>(std::in_place_index<1>, std::get<std::string>(c));
  if (!api_key.empty())
    (*client)->set_api_key(api_key);
  auto r = (*client)->request("GET", "/v1/models");
  const auto* got = std::get_if<http_client::response>(&r);
  const auto models = got && got->status == 200 ? nlohmann::json::parse(got->body, nullptr, false) : nlohmann::json();
  if (!models.is_object() || !models.contains("data") || models["data"].empty() || !models["data"][0].contains("id"))
    return std::variant<std::string, std::string>(std::in_place_index<1>,
                                                  "GET /v1/models at " + endpoint + ": "
                                                    + (got ? got->body : std::get<std::string>(r)));
  return std::variant<std::string, std::string>(std::in_place_index<0>, models["data"][0]["id"].get<std::string>());
}

/// The workload at `rate` (0: the trace's own times).
std::variant<std::vector<troupe::workload::request>, std::string> make_workload(const open_loop_args& a, double rate) {
  using namespace troupe::workload;
  std::vector<request> reqs;
  if (!a.conversations.empty()) {
    auto loaded = load_conversations(a.conversations);
    if (auto* e = std::get_if<std::string>(&loaded))
      return *e;
    auto convs = std::get<std::vector<conversation>>(std::move(loaded));
    if (a.max_requests > 0 && convs.size() > static_cast<std::size_t>(a.max_requests))
      convs.resize(static_cast<std::size_t>(a.max_requests));
    if (rate <= 0)
      return std::string{"--conversations needs --rate (conversations per second)"};
    cap_rounds(convs, a.max_rounds);
    reqs = multi_turn(convs, rate, a.think_s, a.seed);
    cap_lengths(reqs, a.turn_prompt, a.turn_output);
    return reqs;
  }
  if (!a.trace.empty()) {
    auto loaded = load_trace(a.trace);
    if (auto* e = std::get_if<std::string>(&loaded))
      return *e;
    reqs = std::get<std::vector<request>>(std::move(loaded));
    const bool timed = std::any_of(reqs.begin(), reqs.end(), [](const request& r) { return r.arrival_s > 0; });
    if (timed && (a.seconds >= 0 || a.from_s > 0))
      reqs = window(reqs, a.from_s, a.seconds >= 0 ? a.seconds : 1e18);
    if (a.max_requests > 0 && reqs.size() > static_cast<std::size_t>(a.max_requests))
      reqs.resize(static_cast<std::size_t>(a.max_requests));
    if (!timed) { // lengths only: arrivals from the generator
      if (rate <= 0)
        return std::string{"--trace "} + a.trace + " has no arrival times: give --rate";
      const auto t = gamma_arrivals(reqs.size(), rate, a.cv, a.seed + 7);
      for (std::size_t i = 0; i < reqs.size(); ++i)
        reqs[i].arrival_s = t[i];
    } else if (rate > 0) {
      set_rate(reqs, rate);
    }
  } else {
    if (rate <= 0)
      return std::string{"--synthetic needs --rate"};
    reqs = synthetic(static_cast<std::size_t>(a.synthetic), rate, a.cv, a.prompt_lo, a.prompt_hi, a.output_lo,
                     a.output_hi, a.seed);
  }
  clamp_context(reqs, a.max_context);
  if (a.time_factor != 1)
    scale_time(reqs, a.time_factor);
  if (a.adapters > 0) {
    auto set = make_adapter_set(a.adapters, {8}, a.popularity);
    if (auto* e = std::get_if<std::string>(&set))
      return "--popularity: " + *e;
    assign_adapters(reqs, std::get<adapter_set>(set), a.base_fraction, a.seed);
  }
  assign_priorities(reqs, a.priorities, a.seed);
  return reqs;
}

} // namespace

int run_open_loop_mode(const std::string& config, std::string endpoint, open_loop_args a) {
  using namespace troupe;
  std::vector<workload::run_summary> runs;
  std::ofstream records;
  if (!a.records.empty()) {
    records.open(a.records);
    if (!records) {
      std::fprintf(stderr, "troupe-bench: cannot write %s\n", a.records.c_str());
      return 1;
    }
  }
  if (a.rates.empty())
    a.rates.push_back(0);
  std::optional<deployment_options> opts;
  if (endpoint.empty()) {
    auto loaded = load_config_file(config, default_catalog());
    if (auto* err = std::get_if<config_error>(&loaded)) {
      std::fprintf(stderr, "troupe-bench: %s\n", err->message.c_str());
      return 1;
    }
    opts = std::get<deployment_options>(std::move(loaded));
    configure_logging(opts->logging);
    if (a.time_scale < 0)
      a.time_scale = opts->backend.kind == "sim" ? opts->backend.time_scale : 1.0;
  }
  if (a.time_scale <= 0) {
    std::fprintf(stderr, "troupe-bench: open loop needs a time scale > 0 (a sim server with time_scale 0 "
                         "answers instantly: latencies would mean nothing)\n");
    return 2;
  }
  bool lost = false;
  for (std::size_t k = 0; k < a.rates.size(); ++k) {
    const double rate = a.rates[k];
    auto w = make_workload(a, rate);
    if (auto* e = std::get_if<std::string>(&w)) {
      std::fprintf(stderr, "troupe-bench: %s\n", e->c_str());
      return 2;
    }
    const auto& reqs = std::get<std::vector<workload::request>>(w);
    const auto sum = workload::summarize(reqs);
    std::fprintf(stderr, "troupe-bench: %zu requests over %.0f s (%.2f req/s), prompt mean %.0f, output mean %.0f\n",
                 sum.requests, sum.duration_s, sum.mean_rate, sum.prompt_mean, sum.output_mean);
    std::unique_ptr<deployment> dep;
    std::string target = endpoint;
    if (opts) {
      auto o = *opts;
      o.server.max_pending = std::max<std::uint32_t>(o.server.max_pending, static_cast<std::uint32_t>(reqs.size()));
      o.scheduler.max_waiting = std::max<std::uint32_t>(o.scheduler.max_waiting, static_cast<std::uint32_t>(reqs.size()));
      if (a.http) {
        o.http.listen = "127.0.0.1:0";
        o.http.max_connections = std::max<std::uint32_t>(o.http.max_connections, static_cast<std::uint32_t>(reqs.size()));
        if (a.api_key.empty() && !o.http.api_keys.empty())
          a.api_key = o.http.api_keys.front();
      }
      auto started = deployment::start(o);
      if (auto* err = std::get_if<std::string>(&started)) {
        std::fprintf(stderr, "troupe-bench: %s\n", err->c_str());
        return 1;
      }
      dep = std::get<std::unique_ptr<deployment>>(std::move(started));
      target = a.http ? dep->http_endpoint() : dep->endpoint();
    }
    std::vector<workload::request_record> recs;
    if (a.http) {
      http_open_loop_options hl;
      hl.endpoint = target;
      hl.api_key = a.api_key;
      auto m = base_model_at(target, a.api_key);
      if (m.index() == 1) {
        std::fprintf(stderr, "troupe-bench: %s\n", std::get<1>(m).c_str());
        return 1;
      }
      hl.model = std::get<0>(m);
      hl.time_scale = a.time_scale;
      hl.progress = a.progress && ::isatty(2);
      hl.ignore_eos = !a.stop_at_eos;
      hl.shared_prefix = a.shared_prefix;
      hl.prefix_groups = a.prefix_groups;
      recs = run_open_loop_http(reqs, hl);
    } else {
      open_loop_options ol;
      ol.endpoint = target;
      ol.time_scale = a.time_scale;
      ol.progress = a.progress && ::isatty(2);
      ol.advise = a.advise;
      ol.ignore_eos = !a.stop_at_eos;
      ol.shared_prefix = a.shared_prefix;
      ol.prefix_groups = a.prefix_groups;
      recs = run_open_loop(reqs, ol);
    }
    auto s = workload::summarize_run(recs, a.target, sum.mean_rate, a.label);
    // The server's own figures come over ZeroMQ: known in-process only
    // when the load went over HTTP.
    const auto [pcie, hit] = !a.http ? pull_server_figures(target)
                             : dep   ? pull_server_figures(dep->endpoint())
                                     : std::pair<double, double>{-1, -1};
    s.pcie_bytes = pcie;
    s.adapter_hit_rate = hit;
    if (dep)
      dep->stop();
    for (const auto& r : recs)
      lost = lost || r.outcome == "lost";
    if (records)
      workload::write_records_csv(records, a.label, s.offered_rate, recs, k == 0);
    std::printf("%-10s rate %.2f: %zu/%zu ok, %.2f req/s, %.0f tok/s, TTFT p50 %.3f p90 %.3f p99 %.3f s, "
                "TBT p50 %.4f p99 %.4f s, E2E p50 %.2f p99 %.2f s, attainment %.3f, PCIe %.2f GB, hit %.3f\n",
                s.label.c_str(), s.offered_rate, s.finished, s.requests, s.requests_per_s, s.tokens_per_s,
                s.ttft.p50, s.ttft.p90, s.ttft.p99, s.tbt.p50, s.tbt.p99, s.e2e.p50, s.e2e.p99, s.attainment,
                s.pcie_bytes >= 0 ? s.pcie_bytes / 1e9 : 0.0, s.adapter_hit_rate);
    for (const auto& c : s.classes)
      std::printf("  priority %d: %zu/%zu ok, TTFT p50 %.3f p90 %.3f p99 %.3f s, E2E p50 %.2f p99 %.2f s, "
                  "attainment %.3f\n",
                  c.priority, c.finished, c.requests, c.ttft.p50, c.ttft.p90, c.ttft.p99, c.e2e.p50, c.e2e.p99,
                  c.attainment);
    runs.push_back(s);
  }
  if (runs.size() > 1)
    std::printf("%s", workload::effective_throughput_lines(runs).c_str());
  workload::write_outputs(runs, a.json, a.csv);
  if (lost) {
    std::fprintf(stderr, "troupe-bench: some requests got no terminal reply\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  using namespace troupe;
  std::string config = "tests/e2e/configs/sim-instant.toml";
  std::string endpoint;
  int clients = 8;
  long requests = 20000;
  std::uint32_t max_tokens = 8;
  std::size_t prompt_bytes = 32;
  int adapters = 0;
  bool stream = false;
  bool over_http = false;
  std::string api_key;
  long window = 256;
  open_loop_args ol;
  bool open_loop = false;
  auto number = [](const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0') {
      std::fprintf(stderr, "troupe-bench: %s: \"%s\" is not a number\n", flag.c_str(), v.c_str());
      std::exit(2);
    }
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "troupe-bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--config") config = value();
    else if (arg == "--endpoint") endpoint = value();
    else if (arg == "--clients") clients = std::atoi(value().c_str());
    else if (arg == "--requests") requests = std::atol(value().c_str());
    else if (arg == "--max-tokens") max_tokens = static_cast<std::uint32_t>(std::atol(value().c_str()));
    else if (arg == "--prompt-bytes") prompt_bytes = static_cast<std::size_t>(std::atol(value().c_str()));
    else if (arg == "--adapters") adapters = std::atoi(value().c_str());
    else if (arg == "--stream") stream = true;
    else if (arg == "--http") over_http = true;
    else if (arg == "--api-key") api_key = value();
    else if (arg == "--window") window = std::atol(value().c_str());
    else if (arg == "--trace") { ol.trace = value(); open_loop = true; }
    else if (arg == "--conversations") { ol.conversations = value(); open_loop = true; }
    else if (arg == "--think") ol.think_s = number(arg, value());
    else if (arg == "--max-rounds") ol.max_rounds = static_cast<std::uint32_t>(number(arg, value()));
    else if (arg == "--advise") ol.advise = true;
    else if (arg == "--turn-tokens") {
      const auto v = value();
      const auto parts = split(v, ':');
      if (parts.size() != 2) {
        std::fprintf(stderr, "troupe-bench: --turn-tokens: \"%s\" is not P:O\n", v.c_str());
        return 2;
      }
      ol.turn_prompt = static_cast<std::uint32_t>(number(arg, parts[0]));
      ol.turn_output = static_cast<std::uint32_t>(number(arg, parts[1]));
    }
    else if (arg == "--synthetic") { ol.synthetic = static_cast<long>(number(arg, value())); open_loop = true; }
    else if (arg == "--rate") ol.rates = {number(arg, value())};
    else if (arg == "--rates") { ol.rates.clear(); for (const auto& r : split(value())) ol.rates.push_back(number(arg, r)); }
    else if (arg == "--cv") ol.cv = number(arg, value());
    else if (arg == "--from") ol.from_s = number(arg, value());
    else if (arg == "--time-factor") {
      ol.time_factor = number(arg, value());
      if (ol.time_factor <= 0) { std::fprintf(stderr, "troupe-bench: --time-factor must be > 0\n"); return 2; }
    }
    else if (arg == "--seconds") ol.seconds = number(arg, value());
    else if (arg == "--prompt-range" || arg == "--output-range") {
      const auto v = value();
      if (!parse_range(v, arg == "--prompt-range" ? ol.prompt_lo : ol.output_lo, arg == "--prompt-range" ? ol.prompt_hi : ol.output_hi)) {
        std::fprintf(stderr, "troupe-bench: %s: \"%s\" is not LO:HI with 1 <= LO <= HI\n", arg.c_str(), v.c_str());
        return 2;
      }
    }
    else if (arg == "--max-context") ol.max_context = static_cast<std::uint32_t>(number(arg, value()));
    else if (arg == "--popularity") ol.popularity = value();
    else if (arg == "--base-fraction") ol.base_fraction = number(arg, value());
    else if (arg == "--priorities") {
      auto mix = workload::parse_priority_mix(value());
      if (auto* e = std::get_if<std::string>(&mix)) {
        std::fprintf(stderr, "troupe-bench: --priorities: %s\n", e->c_str());
        return 2;
      }
      ol.priorities = std::get<std::vector<workload::priority_share>>(std::move(mix));
    }
    else if (arg == "--time-scale") ol.time_scale = number(arg, value());
    else if (arg == "--slo-ttft") ol.target.ttft_s = number(arg, value());
    else if (arg == "--slo-tbt") ol.target.tbt_s = number(arg, value());
    else if (arg == "--slo-tbt-stat") {
      const auto v = value();
      if (v != "mean" && v != "p99") {
        std::fprintf(stderr, "troupe-bench: --slo-tbt-stat: mean or p99, got \"%s\"\n", v.c_str());
        return 2;
      }
      ol.target.tbt_p99 = v == "p99";
    }
    else if (arg == "--label") ol.label = value();
    else if (arg == "--seed") ol.seed = static_cast<std::uint64_t>(number(arg, value()));
    else if (arg == "--json") ol.json = value();
    else if (arg == "--csv") ol.csv = value();
    else if (arg == "--records") ol.records = value();
    else if (arg == "--no-progress") ol.progress = false;
    else if (arg == "--stop-at-eos") ol.stop_at_eos = true;
    else if (arg == "--shared-prefix") {
      const auto v = value();
      const auto colon = v.find(':');
      const double n = number(arg, v.substr(0, colon));
      const double g = colon == std::string::npos ? 1 : number(arg, v.substr(colon + 1));
      if (n < 0 || g < 1 || n != std::floor(n) || g != std::floor(g) || n > 1e9 || g > 1e9) {
        std::fprintf(stderr, "troupe-bench: --shared-prefix: N >= 0 and G >= 1, whole numbers; got \"%s\"\n", v.c_str());
        return 2;
      }
      ol.shared_prefix = static_cast<std::uint32_t>(n);
      ol.prefix_groups = static_cast<std::uint32_t>(g);
    }
    else if (arg == "--help" || arg == "-h") { usage(stdout); return 0; }
    else if (arg == "--version") { std::printf("troupe-bench %s\n", std::string(troupe::version()).c_str()); return 0; }
    else { usage(stderr); return 2; }
  }
  if (open_loop) {
    ol.http = over_http;
    ol.api_key = api_key;
    if (ol.http && (!ol.conversations.empty() || ol.advise)) {
      std::fprintf(stderr, "troupe-bench: --http sends single-turn requests: not with --conversations or --advise\n");
      return 2;
    }
    ol.max_requests = requests == 20000 ? 0 : requests;
    ol.adapters = static_cast<std::uint32_t>(std::max(adapters, 0));
    if ((!ol.trace.empty()) + (ol.synthetic > 0) + (!ol.conversations.empty()) > 1) {
      std::fprintf(stderr, "troupe-bench: --trace, --synthetic and --conversations are exclusive\n");
      return 2;
    }
    return run_open_loop_mode(config, endpoint, ol);
  }
  if (clients < 1 || requests < clients || max_tokens < 1 || window < 1) {
    std::fprintf(stderr, "troupe-bench: need clients >= 1, requests >= clients, max-tokens >= 1, window >= 1\n");
    return 2;
  }
  std::unique_ptr<deployment> dep;
  if (endpoint.empty()) {
    auto loaded = load_config_file(config, default_catalog());
    if (auto* err = std::get_if<config_error>(&loaded)) {
      std::fprintf(stderr, "troupe-bench: %s\n", err->message.c_str());
      return 1;
    }
    auto opts = std::get<deployment_options>(std::move(loaded));
    opts.server.max_pending = std::max<std::uint32_t>(opts.server.max_pending, static_cast<std::uint32_t>(requests));
    opts.scheduler.max_waiting = std::max<std::uint32_t>(opts.scheduler.max_waiting, static_cast<std::uint32_t>(requests));
    if (over_http) {
      opts.http.listen = "127.0.0.1:0";
      opts.http.max_connections = std::max<std::uint32_t>(opts.http.max_connections, static_cast<std::uint32_t>(clients));
      if (api_key.empty() && !opts.http.api_keys.empty())
        api_key = opts.http.api_keys.front();
    }
    configure_logging(opts.logging);
    auto started = deployment::start(opts);
    if (auto* err = std::get_if<std::string>(&started)) {
      std::fprintf(stderr, "troupe-bench: %s\n", err->c_str());
      return 1;
    }
    dep = std::get<std::unique_ptr<deployment>>(std::move(started));
    endpoint = over_http ? dep->http_endpoint() : dep->endpoint();
  }
  std::atomic<long> done{0}, errors{0}, tokens{0};
  const long per_client = requests / clients;
  std::string base_model;
  if (over_http) {
    auto m = base_model_at(endpoint, api_key);
    if (m.index() == 1) {
      std::fprintf(stderr, "troupe-bench: %s\n", std::get<1>(m).c_str());
      return 1;
    }
    base_model = std::get<0>(m);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k) {
    if (over_http) {
      threads.emplace_back([&, k] {
        auto c = http_client::connect(endpoint);
        if (auto* why = std::get_if<std::string>(&c)) {
          std::fprintf(stderr, "troupe-bench: client %d: %s\n", k, why->c_str());
          errors += per_client;
          return;
        }
        auto& client = *std::get<std::unique_ptr<http_client>>(c);
        if (!api_key.empty())
          client.set_api_key(api_key);
        nlohmann::json body = {{"model", base_model},
                               {"prompt", std::string(prompt_bytes, 'x')},
                               {"max_tokens", max_tokens},
                               {"stream", stream}};
        if (stream)
          body["stream_options"] = {{"include_usage", true}};
        for (long n = 0; n < per_client; ++n) {
          if (adapters > 0)
            body["model"] = "lora-" + std::to_string(n % adapters);
          auto r = client.request("POST", "/v1/completions", body.dump());
          auto* got = std::get_if<http_client::response>(&r);
          if (got == nullptr) {
            std::fprintf(stderr, "troupe-bench: client %d: %s\n", k, std::get<std::string>(r).c_str());
            errors += per_client - n;
            return;
          }
          // The usage: the object's, or a stream's event before [DONE].
          std::string_view usage_of = got->body;
          if (stream) {
            const auto end = usage_of.rfind("data: [DONE]");
            const auto start = usage_of.rfind("data: ", end == 0 ? 0 : end - 1);
            usage_of = end == std::string_view::npos || start == std::string_view::npos
                         ? std::string_view()
                         : usage_of.substr(start + 6, end - start - 6);
          }
          const auto j = nlohmann::json::parse(usage_of, nullptr, false);
          if (got->status != 200 || !j.is_object() || !j.contains("usage")) {
            ++errors;
            continue;
          }
          tokens += j["usage"]["completion_tokens"].get<long>();
          ++done;
        }
      });
      continue;
    }
    threads.emplace_back([&, k] {
      client_connection c{endpoint};
      // Keep a window of requests in flight per client so the server, not
      // the client's round trips, sets the pace.
      long sent = 0, finished = 0;
      auto send_one = [&] {
        wire::generate_request g;
        g.id = std::to_string(k) + "-" + std::to_string(sent++);
        g.prompt = std::string(prompt_bytes, 'x');
        g.max_tokens = max_tokens;
        g.stream = stream;
        if (adapters > 0)
          g.adapter = "lora-" + std::to_string(sent % adapters);
        c.send(g);
      };
      while (sent < per_client && sent < window)
        send_one();
      while (finished < per_client) {
        auto got = c.receive(std::chrono::seconds(30));
        if (!got) {
          std::fprintf(stderr, "troupe-bench: client %d timed out\n", k);
          errors += per_client - finished;
          return;
        }
        auto* r = std::get_if<wire::reply>(&*got);
        if (r == nullptr)
          continue;
        if (auto* d = std::get_if<wire::done_reply>(r)) {
          tokens += d->completion_tokens;
          ++done;
        } else if (std::holds_alternative<wire::error_reply>(*r)) {
          ++errors;
        } else {
          continue;
        }
        ++finished;
        if (sent < per_client)
          send_one();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string how = over_http ? "HTTP, one at a time each" : "ZeroMQ, window " + std::to_string(window);
  std::printf("troupe-bench: %ld requests (%d clients, %s, %u tokens each%s): %.3f s, "
              "%.0f requests/s, %ld tokens (%.0f/s), %ld errors\n",
              done.load(), clients, how.c_str(), max_tokens, stream ? ", streamed" : "", secs,
              static_cast<double>(done.load()) / secs, tokens.load(), static_cast<double>(tokens.load()) / secs,
              errors.load());
  if (dep)
    dep->stop();
  return errors.load() == 0 ? 0 : 1;
}
