// troupe-sim: runs a workload through the same cores and policies as a live
// deployment (runtime/sim_engine), on a virtual clock priced by the sim cost
// model, so an hour of trace takes seconds. This version answers the adapter
// cache questions: for each eviction policy, the adapter hit rate, the PCIe
// and disk bytes moved, and the time to first token.
//
//   troupe-sim --trace ../shared/traces/AzureLLMInferenceTrace_conv.csv
//              --adapters 2000 --ranks 8,16,32,64,128 --popularity zipf:1.0
//              --gpu A100-80GB --policies lru,lfu,fairshare,slora,chameleon
#include "gpu/cost_fit.hpp"
#include "messages/version.hpp"
#include "gpu/model_shape.hpp"
#include "gpu/sim_backend.hpp"
#include "policies/classifier_policy.hpp"
#include "policies/output_predictor.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/registry.hpp"
#include "policies/session_eviction.hpp"
#include "runtime/sim_cluster.hpp"
#include "runtime/sim_engine.hpp"
#include "tools/workload/report.hpp"
#include "tools/workload/workload.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace troupe;

constexpr const char* usage =
  "usage: troupe-sim [--trace FILE | --requests N --rate R [--cv C]] [options]   (or --version)\n"
  "  --trace FILE          an Azure LLM inference trace CSV (arrivals and lengths)\n"
  "  --from S --seconds S  the part of the trace to replay (default: all)\n"
  "  --rate R              rescale arrivals to R requests/s (with --trace), or generate at R\n"
  "  --rates R1,R2,...     a sweep: each rate in turn, effective throughput at 90 % attainment\n"
  "  --time-factor F       multiply every arrival time by F (2: half the rate)\n"
  "  --conversations FILE  multi-turn: ShareGPT conversations (turn counts and sizes), --requests N of them\n"
  "                        started at --rate per second, each turn --think S after the last reply (default 10)\n"
  "  --session-fraction F  share of the pool finished turns keep for their sessions (default 0.25; 0: recompute)\n"
  "  --max-rounds K --turn-tokens P:O   at most K turns per conversation (each as long as before), and\n"
  "                        every turn's prompt and reply capped (troupe-bench's)\n"
  "  --trace FILE          (also a ShareGPT length file: arrivals then come from --rate, Poisson)\n"
  "  --requests N --cv C   generated: N requests, Gamma gaps of CV C (--synthetic N is the same)\n"
  "  --prompt N --output N lengths of generated requests (default 512, 128), or uniform in\n"
  "  --prompt-range A:B --output-range A:B   (S-LoRA's generator, as troupe-bench's)\n"
  "  --adapters N          registered adapters (default 2000)\n"
  "  --ranks LIST          ranks dealt to them in equal blocks (default 8,16,32,64,128)\n"
  "  --rank-order blocks|cycle   or in turn (adapter i gets the (i mod n)-th rank), so that rank is\n"
  "                        unrelated to a Zipf or Power popularity order (default blocks)\n"
  "  --popularity P        uniform | power:A | zipf:S | chameleon:A (default zipf:1)\n"
  "  --base-fraction F     share of requests without an adapter (default 0)\n"
  "  --priorities MIX      priority classes P:S[,P:S...] (share S of requests sent with priority P, higher\n"
  "                        more urgent; e.g. 0:0.7,-1:0.3), each class reported apart (compare fcfs and priority)\n"
  "  --model NAME          model shape preset (default llama-2-7b)\n"
  "  --gpu NAME            GPU preset (default A100-80GB)\n"
  "  --cost N=V[,N=V...]   the cost model's constants and the GPU's rates by name, as\n"
  "                        troupe-cost-fit prints them (e.g. hbm_efficiency=0.85)\n"
  "  --max-context N       prompt + output limit; longer prompts are cut (default 4096)\n"
  "  --rope-long-after N|off   LongRoPE's pretrained context: a request growing past it is recomputed\n"
  "                        (the --model preset's: 4096 for phi-3.5-mini and phi-4-mini, else off)\n"
  "  --policies LIST       eviction policies to compare, scheduler fcfs (default lru,lfu,fairshare,slora,chameleon)\n"
  "  --setups LIST         instead: scheduler:eviction pairs to compare, e.g. fcfs:lru,slora:slora,chameleon:chameleon;\n"
  "                        chameleon scheduling brings its classifier and the queue tuner\n"
  "  --arrivals KIND       trace (the trace's times) or poisson (at --rate, trace lengths kept)\n"
  "  --predictor NAME      output-length predictor: max_tokens, history, oracle (default oracle)\n"
  "  --predictor-error E   the oracle's relative error (default 0.2)\n"
  "  --tuner-period S      seconds between queue tunings (default 60)\n"
  "  --quota-size max|mean S in each queue's minimum quota: its largest cost (Chameleon's) or its mean (default max)\n"
  "  --slo S               slora's early-abort first-token target; 0 = off (default 0)\n"
  "  --prefetch on|off     load queued requests' adapters early (default on)\n"
  "  --cache-window S      seconds of history behind an adapter's use frequency (lfu, chameleon, fairshare; default 300)\n"
  "  --adapter-predictor NAME   predictive adapter prefetch: none or histogram (Chameleon's; default none)\n"
  "  --adapter-predictor-interval S   seconds between its rounds (default 1)\n"
  "  --prefetch-free F     prefetch only while this share of the pool stays free (default 0.1)\n"
  "  --host-bytes N        host tier for adapters; 0 = unbounded (default 0)\n"
  "  --max-running N       running batch cap (default 256)\n"
  "  --token-budget N      tokens one step may process, prompts and decodes (the server's\n"
  "                        [scheduler] token_budget; default 8192)\n"
  "  --kv full|on_demand   reserve each request's whole life at admission, or pages as it grows (default full)\n"
  "  --prefix-caching on|off  whole prompt pages stay cached after their prefill and later prompts that\n"
  "                        begin with them read them (the server's [scheduler] prefix_caching; default on)\n"
  "  --prefix-fraction F   share of the pool cached pages no request reads may keep (default 0.25)\n"
  "  --prefix-admission repeated|all  cache a prompt page once a second prompt holds it, or every\n"
  "                        prompt's (the server's [scheduler] prefix_cache_admission; default repeated)\n"
  "  --shared-prefix N[:G] every prompt begins with the first N tokens of one of G system prompts\n"
  "                        (request i: prompt i mod G; G default 1); the rest is the request's own\n"
  "  --layer-streaming on|off  a cache coming back from the host pool streams in layer by layer under\n"
  "                        its step (Symphony), or is copied whole first (default off)\n"
  "  --advise-lead S|off   an advisory S seconds before each later turn of a conversation (default off)\n"
  "  --advise-fetch-lead S an advisory further ahead fetches its cache only S seconds before the turn\n"
  "                        (the server's [scheduler] advise_fetch_lead_s; default 1)\n"
  "  --advise-place-lead S|off  with --nodes, the router chooses an advised turn's node (and starts its\n"
  "                        cache's pull) only S seconds before the turn; off: at the advisory (the\n"
  "                        server's [cluster] advise_place_lead_s; default 1)\n"
  "  --session-eviction lru|largest   which session cache leaves a tier first (default lru)\n"
  "  --nodes N             N nodes, each one GPU as configured, behind the router's placement by load and\n"
  "                        KV locality (default 1); the offered rate is the whole deployment's\n"
  "  --imbalance K         a turn stays on its session's node while it carries at most K more requests\n"
  "                        than the least loaded node (the router's; default 2)\n"
  "  --migrate on|off      a turn moved off its session's node pulls its KV along, or recomputes it (default on)\n"
  "  --network-gbps G      bandwidth between nodes for KV pulls, Gb/s (default 100)\n"
  "  --adapter-affinity on|off   a request with an adapter goes where that adapter's last one went, by\n"
  "                        the same imbalance rule (the router's; default off)\n"
  "  --prefix-affinity N   a prompt of N tokens or more goes where the last one beginning with the same N\n"
  "                        tokens went, by the same rule (the router's prefix_affinity_tokens; default 0: off)\n"
  "  --fail-node I@T[,...] node I (from 0) is lost T seconds into the run: its requests are placed again\n"
  "                        and recomputed elsewhere, its session caches are gone\n"
  "  --host-gib G          host memory for swapped-out KV, GiB (default 0: preemption recomputes)\n"
  "  --pool-pages N --host-pages N   pool sizes in 16-token pages instead (AdaptiveLLM shrinks them on purpose)\n"
  "  --disk-gib G          disk tier for session caches, GiB: a cache pushed out of the host pool is written\n"
  "                        to disk and read back for its next turn (default 0: none; needs a host pool)\n"
  "  --disk-fetch read|cost   a turn whose cache is on disk reads it back always, or only when that is\n"
  "                        predicted no slower than recomputing it (the disk's queue counted; default cost)\n"
  "  --disk-write-back F   copy host caches to disk ahead of need while less than F of the host pool\n"
  "                        is free or already copied (default 0.5, the server's; 0: only on demand)\n"
  "  --max-output N        cap every request's output (AdaptiveLLM's max output length)\n"
  "  --adapter-partition-gib G   adapters in a static region of G GiB carved out of the pool, apart from\n"
  "                        KV (S-LoRA's no-unified-paging ablation; default 0: one unified pool)\n"
  "  --sched-params LIST   policy.key=value pairs for a scheduling policy's configure() (key=value: every policy)\n"
  "  --seed N              adapter draws (default 1)\n"
  "  --json FILE           also write the results as JSON\n"
  "  --slo-ttft S --slo-tbt S   SLOs for attainment (default 0: not checked)\n"
  "  --slo-tbt-stat mean|p99    --slo-tbt on each request's mean time between tokens or its own P99\n"
  "                        (Apt-Serve's; default mean)\n"
  "  --report FILE --csv FILE --records FILE   troupe-bench's JSON, summary CSV and per-request CSV\n";

struct options {
  std::string trace;
  std::map<std::string, double> cost; // --cost
  double from_s = 0, seconds = -1, rate = 0, cv = 1;
  std::size_t requests = 0;
  std::uint32_t prompt = 512, output = 128;
  std::uint32_t prompt_hi = 0, output_hi = 0; // > 0: uniform ranges
  troupe::workload::slo target;
  std::string report, csv, records;
  std::uint32_t adapters = 2000;
  std::vector<std::uint32_t> ranks{8, 16, 32, 64, 128};
  bool cycle_ranks = false;
  std::string popularity = "zipf:1";
  double base_fraction = 0;
  std::vector<troupe::workload::priority_share> priorities; // --priorities
  std::string model = "llama-2-7b", gpu = "A100-80GB";
  std::uint32_t max_context = 4096;
  std::optional<std::uint32_t> rope_long_after; ///< --rope-long-after; unset: the preset's
  std::vector<std::string> policies{"lru", "lfu", "fairshare", "slora", "chameleon"};
  std::vector<std::string> setups;
  bool poisson = false;
  std::string predictor = "oracle";
  double predictor_error = 0.2;
  double tuner_period = 60;
  double cache_window = 300;
  std::string adapter_predictor = "none";
  double adapter_predictor_interval = 1;
  std::string quota_size = "max";
  double slo = 0;
  bool prefetch = true;
  double prefetch_free = 0.1;
  std::uint64_t host_bytes = 0;
  std::uint32_t max_running = 256;
  std::uint32_t token_budget = 8192;
  bool on_demand = false;
  bool layer_streaming = false;
  bool prefix_caching = true;
  double prefix_fraction = 0.25;
  bool prefix_repeated = true;
  std::uint32_t shared_prefix = 0, prefix_groups = 1;
  double advise_lead = -1;
  double advise_fetch_lead = 1.0;
  double advise_place_lead = 1.0;
  std::string session_eviction = "lru";
  std::uint32_t nodes = 1;
  std::uint32_t imbalance = 2;
  bool migrate = true;
  bool adapter_affinity = false;
  std::uint32_t prefix_affinity = 0;
  double network_gbps = 100;
  std::vector<std::pair<std::uint32_t, double>> failures;
  double host_gib = 0;
  double disk_gib = 0;
  double disk_write_back = 0.5;
  bool disk_fetch_by_cost = true;
  std::uint64_t pool_pages_override = 0, host_pages = 0;
  std::uint32_t max_output = 0;
  std::vector<double> rates;
  double time_factor = 1;
  std::string conversations;
  double think_s = 10;
  std::uint32_t max_rounds = 0, turn_prompt = 0, turn_output = 0;
  double session_fraction = 0.25;
  double adapter_partition_gib = 0;
  std::map<std::string, double> sched_params;
  std::uint64_t seed = 1;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in{s};
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// "A<sep>B" as two numbers, each the whole of its half: false otherwise.
bool number_pair(const std::string& v, char sep, double& a, double& b) {
  const auto at = v.find(sep);
  if (at == std::string::npos)
    return false;
  const std::string a_text = v.substr(0, at), b_text = v.substr(at + 1);
  char* e1 = nullptr;
  char* e2 = nullptr;
  a = std::strtod(a_text.c_str(), &e1);
  b = std::strtod(b_text.c_str(), &e2);
  return !a_text.empty() && !b_text.empty() && *e1 == '\0' && *e2 == '\0' && std::isfinite(a) && std::isfinite(b);
}

/// A whole number.
bool whole(double x) { return x == std::floor(x); }

bool parse(int argc, char** argv, options& o, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    if (a == "--version") {
      std::cout << "troupe-sim " << troupe::version() << "\n";
      std::exit(0);
    }
    if (i + 1 >= argc) {
      err = a + " needs a value";
      return false;
    }
    const std::string v = argv[++i];
    char* end = nullptr;
    const double num = std::strtod(v.c_str(), &end);
    const bool is_num = end == v.c_str() + v.size() && !v.empty() && std::isfinite(num) && num >= 0;
    auto need_num = [&] {
      if (!is_num)
        err = a + ": expected a number >= 0, got \"" + v + "\"";
      return is_num;
    };
    if (a == "--trace") o.trace = v;
    else if (a == "--from") { if (!need_num()) return false; o.from_s = num; }
    else if (a == "--seconds") { if (!need_num()) return false; o.seconds = num; }
    else if (a == "--rate") { if (!need_num()) return false; o.rate = num; }
    else if (a == "--conversations") o.conversations = v;
    else if (a == "--think") { if (!need_num()) return false; o.think_s = num; }
    else if (a == "--max-rounds") { if (!need_num() || num < 1) { err = "--max-rounds must be >= 1"; return false; } o.max_rounds = static_cast<std::uint32_t>(num); }
    else if (a == "--turn-tokens") {
      double p = 0, out = 0;
      if (!number_pair(v, ':', p, out) || !whole(p) || !whole(out) || p < 1 || out < 1 || p > 1e9 || out > 1e9) {
        err = "--turn-tokens: \"" + v + "\" is not P:O with both >= 1";
        return false;
      }
      o.turn_prompt = static_cast<std::uint32_t>(p);
      o.turn_output = static_cast<std::uint32_t>(out);
    }
    else if (a == "--session-fraction") { if (!need_num() || num > 1) { err = "--session-fraction must be in [0, 1]"; return false; } o.session_fraction = num; }
    else if (a == "--time-factor") { if (!need_num() || num <= 0) { err = "--time-factor must be > 0"; return false; } o.time_factor = num; }
    else if (a == "--rates") {
      o.rates.clear();
      for (const auto& x : split(v)) {
        char* end = nullptr;
        const double r = std::strtod(x.c_str(), &end);
        if (end == x.c_str() || *end != '\0' || r <= 0) { err = "--rates: \"" + x + "\" is not a rate > 0"; return false; }
        o.rates.push_back(r);
      }
      if (o.rates.empty()) { err = "--rates: give at least one rate"; return false; }
      o.rate = o.rates.front();
    }
    else if (a == "--cv") { if (!need_num() || num == 0) { err = "--cv must be > 0"; return false; } o.cv = num; }
    else if (a == "--requests" || a == "--synthetic") { if (!need_num()) return false; o.requests = static_cast<std::size_t>(num); }
    else if (a == "--prompt") { if (!need_num() || num < 1) { err = "--prompt must be >= 1"; return false; } o.prompt = static_cast<std::uint32_t>(num); }
    else if (a == "--output") { if (!need_num() || num < 1) { err = "--output must be >= 1"; return false; } o.output = static_cast<std::uint32_t>(num); }
    else if (a == "--adapters") { if (!need_num() || num < 1) { err = "--adapters must be >= 1"; return false; } o.adapters = static_cast<std::uint32_t>(num); }
    else if (a == "--ranks") {
      o.ranks.clear();
      for (const auto& r : split(v)) {
        const long x = std::strtol(r.c_str(), nullptr, 10);
        if (x < 1 || x > 4096) { err = "--ranks: \"" + r + "\" is not a rank in [1, 4096]"; return false; }
        o.ranks.push_back(static_cast<std::uint32_t>(x));
      }
    }
    else if (a == "--popularity") o.popularity = v;
    else if (a == "--rank-order") {
      if (v != "blocks" && v != "cycle") { err = "--rank-order: blocks or cycle"; return false; }
      o.cycle_ranks = v == "cycle";
    }
    else if (a == "--base-fraction") { if (!need_num() || num > 1) { err = "--base-fraction must be in [0, 1]"; return false; } o.base_fraction = num; }
    else if (a == "--priorities") {
      auto mix = troupe::workload::parse_priority_mix(v);
      if (auto* e = std::get_if<std::string>(&mix)) { err = "--priorities: " + *e; return false; }
      o.priorities = std::get<std::vector<troupe::workload::priority_share>>(std::move(mix));
    }
    else if (a == "--model") o.model = v;
    else if (a == "--gpu") o.gpu = v;
    else if (a == "--cost") {
      for (const auto& item : split(v)) {
        const auto eq = item.find('=');
        char* end = nullptr;
        const double x = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &end);
        if (eq == std::string::npos || end == item.c_str() + eq + 1 || *end != '\0') {
          err = "--cost: \"" + item + "\" is not NAME=NUMBER";
          return false;
        }
        o.cost[item.substr(0, eq)] = x;
      }
    }
    else if (a == "--rope-long-after") {
      if (v == "off") o.rope_long_after = 0;
      else if (!is_num || !whole(num) || num < 2 || num > 4294967295.0) { err = "--rope-long-after must be a whole number >= 2, or off"; return false; }
      else o.rope_long_after = static_cast<std::uint32_t>(num);
    }
    else if (a == "--max-context") { if (!need_num() || num < 2) { err = "--max-context must be >= 2"; return false; } o.max_context = static_cast<std::uint32_t>(num); }
    else if (a == "--policies") o.policies = split(v);
    else if (a == "--setups") o.setups = split(v);
    else if (a == "--arrivals") {
      if (v != "trace" && v != "poisson") { err = "--arrivals: trace or poisson"; return false; }
      o.poisson = v == "poisson";
    }
    else if (a == "--predictor") o.predictor = v;
    else if (a == "--predictor-error") { if (!need_num() || num > 1) { err = "--predictor-error must be in [0, 1]"; return false; } o.predictor_error = num; }
    else if (a == "--quota-size") {
      if (v != "max" && v != "mean") { err = "--quota-size: max or mean, got \"" + v + "\""; return false; }
      o.quota_size = v;
    }
    else if (a == "--adapter-predictor") o.adapter_predictor = v;
    else if (a == "--adapter-predictor-interval") { if (!need_num() || num <= 0) { err = "--adapter-predictor-interval must be > 0"; return false; } o.adapter_predictor_interval = num; }
    else if (a == "--cache-window") { if (!need_num() || num <= 0) { err = "--cache-window must be > 0"; return false; } o.cache_window = num; }
    else if (a == "--tuner-period") { if (!need_num() || num <= 0) { err = "--tuner-period must be > 0"; return false; } o.tuner_period = num; }
    else if (a == "--slo") { if (!need_num()) return false; o.slo = num; }
    else if (a == "--prefetch") {
      if (v != "on" && v != "off") { err = "--prefetch: on or off"; return false; }
      o.prefetch = v == "on";
    }
    else if (a == "--prefetch-free") { if (!need_num() || num >= 1) { err = "--prefetch-free must be in [0, 1)"; return false; } o.prefetch_free = num; }
    else if (a == "--host-bytes") { if (!need_num()) return false; o.host_bytes = static_cast<std::uint64_t>(num); }
    else if (a == "--max-running") { if (!need_num() || num < 1) { err = "--max-running must be >= 1"; return false; } o.max_running = static_cast<std::uint32_t>(num); }
    else if (a == "--token-budget") {
      if (!need_num() || num < 1 || num > 1e9 || !whole(num)) { err = "--token-budget must be a whole number >= 1"; return false; }
      o.token_budget = static_cast<std::uint32_t>(num);
    }
    else if (a == "--session-eviction") {
      if (!troupe::policies::session_eviction_named(v)) { err = "--session-eviction: lru or largest"; return false; }
      o.session_eviction = v;
    }
    else if (a == "--nodes") { if (!need_num() || num < 1 || num > 1024 || !whole(num)) { err = "--nodes must be a whole number in [1, 1024]"; return false; } o.nodes = static_cast<std::uint32_t>(num); }
    else if (a == "--imbalance") { if (!need_num() || !whole(num)) { err = "--imbalance must be a whole number >= 0"; return false; } o.imbalance = static_cast<std::uint32_t>(std::min(num, 1e9)); }
    else if (a == "--migrate") {
      if (v != "on" && v != "off") { err = "--migrate: on or off"; return false; }
      o.migrate = v == "on";
    }
    else if (a == "--adapter-affinity") {
      if (v != "on" && v != "off") { err = "--adapter-affinity: on or off"; return false; }
      o.adapter_affinity = v == "on";
    }
    else if (a == "--prefix-affinity") { if (!need_num() || !whole(num) || num > 1e9) { err = "--prefix-affinity must be a whole number >= 0"; return false; } o.prefix_affinity = static_cast<std::uint32_t>(num); }
    else if (a == "--fail-node") {
      for (const auto& f : split(v)) {
        double n = 0, t = 0;
        if (!number_pair(f, '@', n, t) || !whole(n) || n < 0 || n > 1e6 || t < 0) {
          err = "--fail-node: \"" + f + "\" is not NODE@SECONDS";
          return false;
        }
        o.failures.emplace_back(static_cast<std::uint32_t>(n), t);
      }
    }
    else if (a == "--network-gbps") { if (!need_num() || num <= 0) { err = "--network-gbps must be > 0"; return false; } o.network_gbps = num; }
    else if (a == "--advise-lead") {
      if (v == "off") o.advise_lead = -1;
      else if (!need_num()) return false;
      else o.advise_lead = num;
    }
    else if (a == "--advise-place-lead") {
      if (v == "off") o.advise_place_lead = -1;
      else if (!need_num() || num < 0) { err = "--advise-place-lead must be >= 0 or off"; return false; }
      else o.advise_place_lead = num;
    }
    else if (a == "--advise-fetch-lead") {
      if (!need_num() || num < 0) { err = "--advise-fetch-lead must be >= 0"; return false; }
      o.advise_fetch_lead = num;
    }
    else if (a == "--prefix-caching") {
      if (v != "on" && v != "off") { err = "--prefix-caching: on or off"; return false; }
      o.prefix_caching = v == "on";
    }
    else if (a == "--prefix-admission") {
      if (v != "repeated" && v != "all") { err = "--prefix-admission: repeated or all"; return false; }
      o.prefix_repeated = v == "repeated";
    }
    else if (a == "--prefix-fraction") { if (!need_num() || num > 1) { err = "--prefix-fraction must be in [0, 1]"; return false; } o.prefix_fraction = num; }
    else if (a == "--shared-prefix") {
      double n = 0, g = 1;
      const bool pair = v.find(':') != std::string::npos;
      if (pair ? !number_pair(v, ':', n, g) : !need_num()) { err = "--shared-prefix: N or N:G"; return false; }
      if (!pair) n = num;
      if (!whole(n) || !whole(g) || g < 1 || n > 1e9 || g > 1e9) { err = "--shared-prefix: N >= 0 and G >= 1, whole numbers"; return false; }
      o.shared_prefix = static_cast<std::uint32_t>(n);
      o.prefix_groups = static_cast<std::uint32_t>(g);
    }
    else if (a == "--layer-streaming") {
      if (v != "on" && v != "off") { err = "--layer-streaming: on or off"; return false; }
      o.layer_streaming = v == "on";
    }
    else if (a == "--kv") {
      if (v != "full" && v != "on_demand") { err = "--kv: full or on_demand"; return false; }
      o.on_demand = v == "on_demand";
    }
    else if (a == "--host-gib") { if (!need_num()) return false; o.host_gib = num; }
    else if (a == "--disk-fetch") {
      if (v != "read" && v != "cost") { err = "--disk-fetch: read or cost, got \"" + v + "\""; return false; }
      o.disk_fetch_by_cost = v == "cost";
    }
    else if (a == "--disk-write-back") { if (!need_num() || num < 0 || num > 1) { err = "--disk-write-back must be in [0, 1]"; return false; } o.disk_write_back = num; }
    else if (a == "--disk-gib") { if (!need_num() || num < 0) { err = "--disk-gib must be >= 0"; return false; } o.disk_gib = num; }
    else if (a == "--pool-pages") { if (!need_num() || num < 1) { err = "--pool-pages must be >= 1"; return false; } o.pool_pages_override = static_cast<std::uint64_t>(num); }
    else if (a == "--host-pages") { if (!need_num()) return false; o.host_pages = static_cast<std::uint64_t>(num); }
    else if (a == "--adapter-partition-gib") { if (!need_num()) return false; o.adapter_partition_gib = num; }
    else if (a == "--max-output") { if (!need_num() || num < 1) { err = "--max-output must be >= 1"; return false; } o.max_output = static_cast<std::uint32_t>(num); }
    else if (a == "--sched-params") {
      for (const auto& kv : split(v)) {
        const auto eq = kv.find('=');
        char* end = nullptr;
        const double x = eq == std::string::npos ? 0 : std::strtod(kv.c_str() + eq + 1, &end);
        if (eq == std::string::npos || end == kv.c_str() + eq + 1 || *end != '\0') {
          err = "--sched-params: \"" + kv + "\" is not key=number";
          return false;
        }
        o.sched_params[kv.substr(0, eq)] = x;
      }
    }
    else if (a == "--seed") { if (!need_num()) return false; o.seed = static_cast<std::uint64_t>(num); }
    else if (a == "--json") o.json = v;
    else if (a == "--report") o.report = v;
    else if (a == "--csv") o.csv = v;
    else if (a == "--records") o.records = v;
    else if (a == "--slo-ttft") { if (!need_num()) return false; o.target.ttft_s = num; }
    else if (a == "--slo-tbt") { if (!need_num()) return false; o.target.tbt_s = num; }
    else if (a == "--slo-tbt-stat") {
      if (v != "mean" && v != "p99") { err = "--slo-tbt-stat: mean or p99, got \"" + v + "\""; return false; }
      o.target.tbt_p99 = v == "p99";
    }
    else if (a == "--prompt-range" || a == "--output-range") {
      double lo = 0, hi = 0;
      if (!number_pair(v, ':', lo, hi) || !whole(lo) || !whole(hi) || lo < 1 || hi < lo || hi > 1e9) {
        err = a + ": \"" + v + "\" is not LO:HI with 1 <= LO <= HI";
        return false;
      }
      (a == "--prompt-range" ? o.prompt : o.output) = static_cast<std::uint32_t>(lo);
      (a == "--prompt-range" ? o.prompt_hi : o.output_hi) = static_cast<std::uint32_t>(hi);
    }
    else { err = "unknown option " + a; return false; }
  }
  if (o.poisson && o.rate <= 0) {
    err = "--arrivals poisson needs --rate";
    return false;
  }
  if (!o.conversations.empty() && o.rate <= 0) {
    err = "--conversations needs --rate (conversations started per second)";
    return false;
  }
  for (const auto& [node, at] : o.failures)
    if (node >= o.nodes) {
      err = "--fail-node: node " + std::to_string(node) + " of " + std::to_string(o.nodes) + " (--nodes); they are 0 to " +
            std::to_string(o.nodes - 1);
      return false;
    }
  if (o.disk_gib > 0 && o.host_gib <= 0 && o.host_pages == 0) {
    err = "--disk-gib needs a host pool (--host-gib or --host-pages): caches reach the disk through it";
    return false;
  }
  if (o.trace.empty() && o.conversations.empty() && (o.requests == 0 || o.rate <= 0)) {
    err = "give --trace FILE, or --requests N and --rate R";
    return false;
  }
  return true;
}

struct result {
  std::string policy;
  std::optional<sim_cluster_totals> cluster; ///< with --nodes > 1
  std::size_t aborted = 0;
  sim_totals totals;
  std::size_t finished = 0, lost = 0;
  double ttft_p50 = 0, ttft_p99 = 0, e2e_p50 = 0, e2e_p99 = 0;
  double wall_s = 0;
};

} // namespace

/// One rate: every setup on the workload; summaries appended.
int simulate(options o, std::vector<workload::run_summary>& summaries, std::ofstream& records, bool& first_record) {
  // Earlier rates' summaries come first; this rate's start here.
  const std::size_t first_summary = summaries.size();
  auto shape = gpu::find_model_preset(o.model);
  auto spec = gpu::find_gpu_spec(o.gpu);
  if (!shape || !spec) {
    std::cerr << "troupe-sim: unknown " << (!shape ? "--model " + o.model : "--gpu " + o.gpu) << "\n";
    return 2;
  }
  if (o.rope_long_after)
    shape->rope_long_after = *o.rope_long_after;
  gpu::cost_constants constants;
  if (auto error = gpu::apply_cost_overrides(o.cost, constants, *spec)) {
    std::cerr << "troupe-sim: --cost: " << *error << "\n";
    return 2;
  }

  // The workload.
  std::vector<workload::request> reqs;
  if (!o.conversations.empty()) {
    auto loaded = workload::load_conversations(o.conversations);
    if (auto* e = std::get_if<std::string>(&loaded)) {
      std::cerr << "troupe-sim: " << *e << "\n";
      return 1;
    }
    auto convs = std::get<std::vector<workload::conversation>>(std::move(loaded));
    if (o.requests > 0 && convs.size() > o.requests)
      convs.resize(o.requests);
    workload::cap_rounds(convs, o.max_rounds);
    reqs = workload::multi_turn(convs, o.rate, o.think_s, o.seed + 7);
    workload::cap_lengths(reqs, o.turn_prompt, o.turn_output);
  } else if (!o.trace.empty()) {
    auto loaded = workload::load_trace(o.trace);
    if (auto* e = std::get_if<std::string>(&loaded)) {
      std::cerr << "troupe-sim: " << *e << "\n";
      return 1;
    }
    reqs = std::get<std::vector<workload::request>>(std::move(loaded));
    if (o.requests > 0 && reqs.size() > o.requests)
      reqs.resize(o.requests);
    if (std::none_of(reqs.begin(), reqs.end(), [](const auto& r) { return r.arrival_s > 0; })) {
      if (o.rate <= 0) {
        std::cerr << "troupe-sim: " << o.trace << " has no arrival times: give --rate\n";
        return 2;
      }
      o.poisson = true;
    }
    if (o.seconds >= 0 || o.from_s > 0)
      reqs = workload::window(reqs, o.from_s, o.seconds >= 0 ? o.seconds : 1e18);
    if (o.poisson) {
      const auto t = workload::gamma_arrivals(reqs.size(), o.rate, 1.0, o.seed + 7);
      for (std::size_t i = 0; i < reqs.size(); ++i)
        reqs[i].arrival_s = t[i];
    } else if (o.rate > 0) {
      workload::set_rate(reqs, o.rate);
    }
  } else {
    reqs = workload::synthetic(o.requests, o.rate, o.cv, o.prompt, std::max(o.prompt, o.prompt_hi), o.output,
                               std::max(o.output, o.output_hi), o.seed);
  }
  if (o.max_output > 0)
    for (auto& r : reqs)
      r.output_tokens = std::min(r.output_tokens, o.max_output);
  const auto clamped = workload::clamp_context(reqs, o.max_context);
  if (o.time_factor != 1)
    workload::scale_time(reqs, o.time_factor);
  auto set = workload::make_adapter_set(o.adapters, o.ranks, o.popularity, o.cycle_ranks);
  if (auto* e = std::get_if<std::string>(&set)) {
    std::cerr << "troupe-sim: --popularity: " << *e << "\n";
    return 2;
  }
  workload::assign_adapters(reqs, std::get<workload::adapter_set>(set), o.base_fraction, o.seed);
  workload::assign_priorities(reqs, o.priorities, o.seed);
  const auto sum = workload::summarize(reqs);
  std::printf("workload: %zu requests over %.0f s (%.2f req/s), prompt mean %.0f p99 %.0f, output mean %.0f p99 %.0f, "
              "%zu of %u adapters used, %zu prompts cut to %u tokens\n",
              sum.requests, sum.duration_s, sum.mean_rate, sum.prompt_mean, sum.prompt_p99, sum.output_mean,
              sum.output_p99, sum.distinct_adapters, o.adapters, clamped, o.max_context);

  // The pool: GPU memory left by the weights, as the sim backend sizes it.
  const std::uint32_t page_tokens = 16;
  const auto page_bytes = std::uint64_t{page_tokens} * shape->kv_bytes_per_token();
  const double budget = static_cast<double>(spec->memory_bytes) * 0.9 - static_cast<double>(shape->weight_bytes());
  const auto all_pages = o.pool_pages_override > 0 ? o.pool_pages_override
                                                   : static_cast<std::uint64_t>(budget / static_cast<double>(page_bytes));
  const auto partition_pages =
    static_cast<std::uint64_t>(o.adapter_partition_gib * (1ull << 30) / static_cast<double>(page_bytes));
  if (partition_pages >= all_pages) {
    std::cerr << "troupe-sim: --adapter-partition-gib leaves no pages for KV\n";
    return 2;
  }
  const auto pool_pages = all_pages - partition_pages;
  std::uint64_t all_adapter_bytes = 0;
  for (auto r : std::get<workload::adapter_set>(set).ranks)
    all_adapter_bytes += shape->lora_adapter_bytes(r);
  std::printf("pool: %llu pages of %llu KiB (%.1f GiB) on %s; all adapters together: %.1f GiB\n",
              static_cast<unsigned long long>(pool_pages), static_cast<unsigned long long>(page_bytes >> 10),
              static_cast<double>(pool_pages * page_bytes) / (1 << 30), spec->name.c_str(),
              static_cast<double>(all_adapter_bytes) / (1 << 30));

  // What to compare: scheduler:eviction pairs.
  std::vector<std::pair<std::string, std::string>> pairs;
  if (o.setups.empty()) {
    for (const auto& e : o.policies)
      pairs.emplace_back("fcfs", e);
  } else {
    for (const auto& s : o.setups) {
      const auto colon = s.find(':');
      if (colon == std::string::npos) {
        std::cerr << "troupe-sim: --setups: \"" << s << "\" is not scheduler:eviction\n";
        return 2;
      }
      pairs.emplace_back(s.substr(0, colon), s.substr(colon + 1));
    }
  }
  std::vector<result> results;
  for (const auto& [sched_name, name] : pairs) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<adapter_spec> specs;
    const auto& ranks = std::get<workload::adapter_set>(set).ranks;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      specs.push_back({"a" + std::to_string(i), ranks[i], ""});
    std::shared_ptr<gpu::sim_backend> first_backend;
    // One node of the deployment: its own policies, pool and backend.
    auto make_node = [&]() -> std::unique_ptr<sim_engine> {
      auto policy = policies::make_eviction_policy(name);
      auto scheduling = policies::make_scheduling_policy(sched_name);
      if (!policy || !scheduling) {
        std::cerr << "troupe-sim: no " << (!policy ? "eviction policy named \"" + name : "scheduling policy named \"" + sched_name)
                  << "\"\n";
        return nullptr;
      }
      if (sched_name == "slora" && o.slo > 0)
        scheduling->configure({{"slo_s", o.slo}});
      const bool chameleon = sched_name == "chameleon";
      std::unique_ptr<policies::classifier_policy> classifier;
      if (chameleon)
        classifier = std::make_unique<policies::chameleon_classifier_policy>();
      else
        classifier = std::make_unique<policies::single_queue_classifier_policy>();
      auto predictor = policies::make_output_predictor(o.predictor);
      if (!predictor) {
        std::cerr << "troupe-sim: no predictor named \"" << o.predictor << "\"\n";
        return nullptr;
      }
      if (o.predictor == "oracle")
        predictor->configure({{"error", o.predictor_error}, {"seed", static_cast<double>(o.seed)}});
      classifier->set_predictor(std::move(predictor));
      sim_engine_config cfg;
      cfg.limits.max_running = o.max_running;
      cfg.limits.token_budget = o.token_budget;
      cfg.limits.max_waiting = 1u << 30;
      cfg.limits.total_pages = pool_pages;
      cfg.limits.page_tokens = page_tokens;
      cfg.limits.page_bytes = page_bytes;
      cfg.limits.session_pages = static_cast<std::uint64_t>(o.session_fraction * static_cast<double>(pool_pages));
      cfg.max_context = o.max_context;
      cfg.layer_streaming = o.layer_streaming;
      cfg.limits.prefix_caching = o.prefix_caching;
      cfg.limits.prefix_idle_pages = static_cast<std::uint64_t>(o.prefix_fraction * static_cast<double>(pool_pages));
      cfg.limits.prefix_admit_offers = o.prefix_repeated ? 2 : 1;
      cfg.shared_prefix_tokens = o.shared_prefix;
      cfg.prefix_groups = o.prefix_groups;
      cfg.advise_lead_s = o.advise_lead;
      cfg.limits.advise_fetch_lead_s = o.advise_fetch_lead;
      cfg.limits.session_eviction = *policies::session_eviction_named(o.session_eviction);
      cfg.layers = shape->num_layers;
      cfg.adapter_partition_pages = partition_pages;
      if (partition_pages > 0) // a full partition means waiting for room, not a broken adapter
        cfg.limits.max_adapter_failures = std::numeric_limits<std::uint32_t>::max();
      cfg.limits.on_demand = o.on_demand;
      cfg.limits.growth_watermark = pool_pages / 100;
      cfg.limits.host_pages = o.host_pages > 0 ? o.host_pages
                                                : static_cast<std::uint64_t>(o.host_gib * (1ull << 30) / static_cast<double>(page_bytes));
      cfg.limits.disk_pages = static_cast<std::uint64_t>(o.disk_gib * (1ull << 30) / static_cast<double>(page_bytes));
      cfg.limits.disk_write_back = o.disk_write_back;
      cfg.disk_fetch_by_cost = o.disk_fetch_by_cost;
      cfg.scheduling = std::move(scheduling);
      cfg.eviction = std::move(policy);
      cfg.classifier = std::move(classifier);
      cfg.tuner.enabled = chameleon;
      cfg.tuner.period_s = o.tuner_period;
      cfg.tuner.quota_size = o.quota_size;
      cfg.tuner.window_s = std::max(o.tuner_period, 300.0);
      cfg.cache.prefetch = o.prefetch;
      cfg.cache.window_s = o.cache_window;
      cfg.cache.predictor_interval_s = o.adapter_predictor_interval;
      if (o.adapter_predictor != "none") {
        cfg.prefetcher = policies::make_prefetch_policy(o.adapter_predictor);
        if (!cfg.prefetcher) {
          std::cerr << "troupe-sim: no adapter predictor named \"" << o.adapter_predictor << "\"\n";
          return nullptr;
        }
      }
      cfg.cache.prefetch_free_fraction = o.prefetch_free;
      auto backend = std::make_shared<gpu::sim_backend>(*shape, *spec, 1, constants, o.host_bytes);
      cfg.limits.hidden_page_tokens = backend->hidden_cache_tokens_per_page(page_tokens);
      cfg.limits.rope_long_after = backend->rope_long_after();
      if (sched_name == "aptserve") // ρ: measured on the backend by the engine's calibration
        cfg.scheduling->configure({{"ttft_slo_s", o.slo > 0 ? o.slo : 5.0},
                                   {"violated_decay", 0.4}});
      std::map<std::string, double> params;
      for (const auto& [k, v] : o.sched_params) {
        const auto dot = k.find('.');
        if (dot == std::string::npos)
          params[k] = v;
        else if (k.substr(0, dot) == sched_name)
          params[k.substr(dot + 1)] = v;
      }
      if (!params.empty()) {
        if (sched_name == "aptserve") { // keep the tool's own unless overridden
          params.try_emplace("ttft_slo_s", o.slo > 0 ? o.slo : 5.0);
          params.try_emplace("violated_decay", 0.4);
        }
        if (auto e = cfg.scheduling->configure(params); !e.empty()) {
          std::cerr << "troupe-sim: --sched-params: " << e << "\n";
          return nullptr;
        }
      }
      if (!first_backend)
        first_backend = backend;
      return std::make_unique<sim_engine>(std::move(cfg), backend,
                                          adapter_catalog{specs, {}, [&](std::uint32_t r) { return shape->lora_adapter_bytes(r); },
                                                          page_bytes},
                                          pool_pages);
    };
    std::vector<std::unique_ptr<sim_engine>> nodes;
    for (std::uint32_t n = 0; n < o.nodes; ++n) {
      nodes.push_back(make_node());
      if (!nodes.back())
        return 2; // told why
    }
    const auto backend = first_backend;
    std::vector<sim_request> in;
    in.reserve(reqs.size());
    for (const auto& r : reqs)
      in.push_back({r.arrival_s, r.prompt_tokens, r.output_tokens,
                    r.adapter == workload::none_adapter ? 0u : r.adapter + 1, r.session, r.think_s, r.priority});
    result res;
    res.policy = o.setups.empty() ? name : sched_name + ":" + name;
    std::vector<sim_outcome> out;
    if (nodes.size() == 1) {
      out = nodes.front()->run(in);
      res.totals = nodes.front()->totals();
    } else {
      sim_cluster_config cc;
      cc.imbalance = o.imbalance;
      cc.migrate = o.migrate;
      cc.adapter_affinity = o.adapter_affinity;
      cc.prefix_affinity_tokens = o.prefix_affinity;
      cc.network_bytes_per_s = o.network_gbps * 1e9 / 8;
      cc.advise_lead_s = o.advise_lead;
      cc.advise_place_lead_s = o.advise_place_lead;
      cc.failures = o.failures;
      sim_cluster cluster{std::move(nodes), cc};
      out = cluster.run(in);
      const auto& ct = cluster.totals();
      res.totals = ct.nodes;
      std::string placed;
      for (const auto p : ct.placed)
        placed += (placed.empty() ? "" : "/") + std::to_string(p);
      std::printf("%s on %zu nodes: requests placed %s; %llu turns moved off their session's node, %llu caches "
                  "pulled along (%.2f GB), %llu recomputed there",
                  res.policy.c_str(), cluster.size(), placed.c_str(), static_cast<unsigned long long>(ct.moves),
                  static_cast<unsigned long long>(ct.pulls), static_cast<double>(ct.pull_bytes) / 1e9,
                  static_cast<unsigned long long>(ct.pulls_missed));
      if (ct.nodes_lost > 0)
        std::printf("; %llu nodes lost, %llu of their requests placed again",
                    static_cast<unsigned long long>(ct.nodes_lost), static_cast<unsigned long long>(ct.resubmitted));
      std::printf("\n");
      res.cluster = ct;
    }
    std::vector<double> ttft, e2e;
    for (const auto& x : out) {
      if (x.reason == finish_reason::length || x.reason == finish_reason::eos) {
        ++res.finished;
        ttft.push_back(x.ttft_s);
        e2e.push_back(x.e2e_s);
      } else if (x.reason == finish_reason::aborted) {
        ++res.aborted; // answered, on purpose: counted apart
      } else {
        ++res.lost;
      }
    }
    res.ttft_p50 = workload::percentile(ttft, 50);
    res.ttft_p99 = workload::percentile(ttft, 99);
    res.e2e_p50 = workload::percentile(e2e, 50);
    res.e2e_p99 = workload::percentile(e2e, 99);
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The same records and summary troupe-bench writes.
    std::vector<workload::request_record> recs(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto& r = recs[i];
      const auto& x = out[i];
      r.id = "b" + std::to_string(i);
      r.arrival_s = x.arrival_s;
      r.prompt_tokens = in[i].prompt_tokens;
      r.max_tokens = in[i].output_tokens;
      r.completion_tokens = x.completion_tokens;
      r.adapter = in[i].adapter_id == 0 ? -1 : static_cast<std::int64_t>(in[i].adapter_id - 1);
      r.ttft_s = x.ttft_s;
      r.e2e_s = x.e2e_s;
      r.queue_s = x.queue_s;
      r.priority = in[i].priority;
      if (x.completion_tokens >= 2 && x.ttft_s >= 0)
        r.tbt_mean_s = (x.e2e_s - x.ttft_s) / static_cast<double>(x.completion_tokens - 1);
      r.tbt_p99_s = x.tbt_p99_s;
      r.outcome = std::string{to_string(x.reason)};
      if (x.reason == finish_reason::aborted)
        r.outcome = "overloaded"; // what a client is told
      // Alone on the GPU, its adapter resident (a conversation's turn is not
      // priced: its prompt carries a history whose cache may be reused).
      if (in[i].session == 0)
        r.isolated_s = backend->cost_model().isolated_seconds(
          in[i].prompt_tokens, in[i].output_tokens, in[i].adapter_id,
          in[i].adapter_id == 0 ? 0 : ranks[in[i].adapter_id - 1]);
    }
    // Offered load: requests per second, or conversations started per second.
    auto summary = workload::summarize_run(recs, o.target, o.conversations.empty() ? sum.mean_rate : o.rate,
                                           res.policy);
    summary.pcie_bytes = static_cast<double>(res.totals.pcie_bytes + res.totals.swap_bytes);
    const double looks = static_cast<double>(res.totals.adapter_hits + res.totals.adapter_misses);
    summary.adapter_hit_rate = looks > 0 ? static_cast<double>(res.totals.adapter_hits) / looks : 0.0;
    summaries.push_back(summary);
    if (records)
      workload::write_records_csv(records, res.policy, summary.offered_rate, recs, std::exchange(first_record, false));
    results.push_back(res);
  }

  if (!o.setups.empty()) {
    std::printf("\n| scheduler:eviction | finished | aborted | recomputed | swapped | queues | req/s | TTFT P50 s | TTFT P99 s | E2E P50 s | E2E P99 s | slowdown P50 | slowdown P99 | WTT | hit rate | PCIe GB | wall s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const auto& t = r.totals;
      const double lookups = static_cast<double>(t.adapter_hits + t.adapter_misses);
      // Slowdown is priced only where the latency alone is (not for turns).
      const auto& slowdown = summaries[first_summary + i].slowdown;
      const auto known = [&](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", v);
        return slowdown.count > 0 ? std::string{buf} : std::string{"-"};
      };
      std::printf("| %s | %zu | %zu | %llu | %llu | %zu | %.2f | %.3f | %.3f | %.2f | %.2f | %s | %s | %.2f | %.3f | %.1f | %.1f |\n", r.policy.c_str(),
                  r.finished, r.aborted, static_cast<unsigned long long>(t.squashed),
                  static_cast<unsigned long long>(t.swapped_out), t.queues,
                  t.end_s > 0 ? static_cast<double>(r.finished) / t.end_s : 0.0, r.ttft_p50,
                  r.ttft_p99, r.e2e_p50, r.e2e_p99, known(slowdown.p50).c_str(), known(slowdown.p99).c_str(),
                  summaries[first_summary + i].weighted_turnaround,
                  lookups > 0 ? static_cast<double>(t.adapter_hits) / lookups : 0.0,
                  static_cast<double>(t.pcie_bytes) / 1e9, r.wall_s);
    }
    if (!o.conversations.empty()) {
      std::printf("\n| scheduler:eviction | prompt tokens computed | of them computed before | history reused | output tokens | recomputed share of processed | caches to disk / back |\n");
      std::printf("|---|---|---|---|---|---|---|\n");
      for (const auto& r : results) {
        const auto& t = r.totals;
        const double processed = static_cast<double>(t.prefill_tokens + t.decode_tokens);
        std::printf("| %s | %llu | %llu | %llu | %llu | %.3f | %llu / %llu |\n", r.policy.c_str(),
                    static_cast<unsigned long long>(t.prefill_tokens), static_cast<unsigned long long>(t.recomputed_tokens),
                    static_cast<unsigned long long>(t.reused_tokens), static_cast<unsigned long long>(t.decode_tokens),
                    processed > 0 ? static_cast<double>(t.recomputed_tokens) / processed : 0.0,
                    static_cast<unsigned long long>(t.session_disk_writes),
                    static_cast<unsigned long long>(t.session_disk_reads));
      }
    }
  } else {
  std::printf("\n| policy | finished | lost | hit rate | misses | evictions | prefetches (hits) | PCIe GB | disk GB | TTFT P50 s | TTFT P99 s | E2E P99 s | wall s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : results) {
    const auto& t = r.totals;
    const double lookups = static_cast<double>(t.adapter_hits + t.adapter_misses);
    std::printf("| %s | %zu | %zu | %.3f | %llu | %llu | %llu (%llu) | %.1f | %.1f | %.3f | %.3f | %.2f | %.1f |\n",
                r.policy.c_str(), r.finished, r.lost, lookups > 0 ? static_cast<double>(t.adapter_hits) / lookups : 0.0,
                static_cast<unsigned long long>(t.adapter_misses), static_cast<unsigned long long>(t.adapter_evictions),
                static_cast<unsigned long long>(t.prefetches), static_cast<unsigned long long>(t.prefetch_hits),
                static_cast<double>(t.pcie_bytes) / 1e9, static_cast<double>(t.disk_bytes) / 1e9, r.ttft_p50,
                r.ttft_p99, r.e2e_p99, r.wall_s);
  }
  }
  if (!o.priorities.empty()) {
    std::printf("\n| setup | priority | requests | finished | TTFT P50 s | TTFT P90 s | TTFT P99 s | E2E P50 s | E2E P99 s | attainment |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (std::size_t i = 0; i < results.size(); ++i)
      for (const auto& c : summaries[first_summary + i].classes)
        std::printf("| %s | %d | %zu | %zu | %.3f | %.3f | %.3f | %.2f | %.2f | %.3f |\n", results[i].policy.c_str(),
                    c.priority, c.requests, c.finished, c.ttft.p50, c.ttft.p90, c.ttft.p99, c.e2e.p50, c.e2e.p99,
                    c.attainment);
  }
  if (!o.json.empty()) {
    std::ofstream j{o.json};
    j << "{\"requests\":" << sum.requests << ",\"adapters\":" << o.adapters << ",\"gpu\":\"" << spec->name
      << "\",\"model\":\"" << o.model << "\",\"popularity\":\"" << o.popularity << "\",\"results\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const auto& t = r.totals;
      const double lookups = static_cast<double>(t.adapter_hits + t.adapter_misses);
      j << (i ? "," : "") << "{\"policy\":\"" << r.policy << "\",\"finished\":" << r.finished
        << ",\"lost\":" << r.lost << ",\"aborted\":" << r.aborted << ",\"squashed\":" << t.squashed << ",\"swapped_out\":" << t.swapped_out
        << ",\"swap_bytes\":" << t.swap_bytes << ",\"growths_denied\":" << t.growths_denied << ",\"hit_rate\":" << (lookups > 0 ? t.adapter_hits / lookups : 0.0)
        << ",\"misses\":" << t.adapter_misses << ",\"evictions\":" << t.adapter_evictions
        << ",\"prefetches\":" << t.prefetches << ",\"prefetch_hits\":" << t.prefetch_hits
        << ",\"pcie_bytes\":" << t.pcie_bytes << ",\"disk_bytes\":" << t.disk_bytes
        << ",\"session_disk_writes\":" << t.session_disk_writes << ",\"session_disk_reads\":" << t.session_disk_reads
        << ",\"session_disk_bytes\":" << t.session_disk_bytes << ",\"session_disk_skips\":" << t.session_disk_skips
        << ",\"recomputed_tokens\":" << t.recomputed_tokens << ",\"reused_tokens\":" << t.reused_tokens
        << ",\"prefix_hits\":" << t.prefix_hits << ",\"prefill_tokens\":" << t.prefill_tokens
        << ",\"ttft_p50_s\":" << r.ttft_p50 << ",\"ttft_p99_s\":" << r.ttft_p99
        << ",\"e2e_p50_s\":" << r.e2e_p50 << ",\"e2e_p99_s\":" << r.e2e_p99
        << ",\"slowdown_p50\":" << summaries[first_summary + i].slowdown.p50 << ",\"slowdown_p99\":" << summaries[first_summary + i].slowdown.p99
        << ",\"steps\":" << t.steps;
      if (r.cluster)
        j << ",\"cluster\":{\"nodes\":" << r.cluster->placed.size() << ",\"moves\":" << r.cluster->moves
          << ",\"pulls\":" << r.cluster->pulls << ",\"pull_bytes\":" << r.cluster->pull_bytes
          << ",\"pulls_missed\":" << r.cluster->pulls_missed << ",\"nodes_lost\":" << r.cluster->nodes_lost
          << ",\"resubmitted\":" << r.cluster->resubmitted << "}";
      j << ",\"end_s\":" << t.end_s << "}";
    }
    j << "]}\n";
  }
  for (const auto& r : results)
    if (r.lost > 0) {
      std::cerr << "troupe-sim: " << r.lost << " requests did not finish under " << r.policy << "\n";
      return 1;
    }
  return 0;
}

int main(int argc, char** argv) {
  options o;
  std::string err;
  if (!parse(argc, argv, o, err)) {
    std::cerr << "troupe-sim: " << err << "\n" << usage;
    return 2;
  }
  std::vector<workload::run_summary> summaries;
  std::ofstream records;
  if (!o.records.empty())
    records.open(o.records);
  bool first_record = true;
  const auto rates = o.rates.empty() ? std::vector<double>{o.rate} : o.rates;
  for (double rate : rates) {
    auto one = o;
    one.rate = rate;
    if (rates.size() > 1)
      std::printf("\n## offered rate %.3g req/s\n", rate);
    if (const int rc = simulate(one, summaries, records, first_record); rc != 0)
      return rc;
  }
  if (rates.size() > 1)
    std::printf("%s", workload::effective_throughput_lines(summaries).c_str());
  workload::write_outputs(summaries, o.report, o.csv);
  return 0;
}
