// troupe-client: submits one job (or a health/stats/list_adapters query) to a
// Troupe server over ZeroMQ, streams the output, and exits non-zero on an
// error reply or a timeout.
#include "messages/version.hpp"
#include "tools/client_connection.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
    "usage: troupe-client [--endpoint URL] [--prompt TEXT] [--max-tokens N]\n"
    "                     [--adapter NAME] [--temperature T] [--top-p P] [--top-k K]\n"
    "                     [--seed S] [--stop TEXT]... [--no-stream] [--id ID]\n"
    "                     [--cancel-after N] [--timeout-ms MS] [--json] [--session S]\n"
    "                     [--logprobs K]   (each token's log-probability and K alternatives';\n"
    "                                       with --json to see them)\n"
    "                     [--prompt-logprobs K]   (each prompt token's, given those before it)\n"
    "                     [--presence-penalty P] [--frequency-penalty F]\n"
    "                     [--min-p P] [--repetition-penalty R]\n"
    "                     [--logit-bias TOKEN=BIAS]... [--stop-token TOKEN]...\n"
    "                     [--ignore-eos] [--min-tokens N]\n"
    "                     [--keep-special]   (special tokens show their text: skip_special_tokens false)\n"
    "                     [--json-object]   (the output is one JSON object: response_format)\n"
    "                     [--json-schema FILE]   (the output is a value of the JSON Schema in FILE)\n"
    "                     [--choice TEXT]...   (the output is one of the texts: guided_choice)\n"
    "                     [--regex EXPR]   (the whole output matches the expression: guided_regex)\n"
    "                     [--grammar FILE]   (the output is a sentence of the GBNF grammar in FILE: guided_grammar)\n"
    "       troupe-client [--endpoint URL] --health | --stats | --list-adapters\n"
    "       troupe-client [--endpoint URL] --load-adapter NAME=PATH | --load-adapter NAME:RANK\n"
    "                                      | --unload-adapter NAME\n"
    "       troupe-client [--endpoint URL] --advise SESSION [--in S]   (its next turn is coming)\n"
    "       troupe-client [--endpoint URL] --tokenize TEXT | --detokenize ID,ID,...\n"
    "       troupe-client --version\n"
    "Defaults: endpoint tcp://127.0.0.1:5555, max-tokens 16, streaming on.\n"
    "Exit status: 0 on done, 1 on an error reply, 2 on bad usage, 3 on timeout.\n");
}

} // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  std::string endpoint = "tcp://127.0.0.1:5555";
  wire::generate_request g;
  g.id = "client-" + std::to_string(::getpid());
  g.stream = true;
  std::string query;
  std::string adapter_arg;
  long cancel_after = -1;
  long timeout_ms = 60000;
  double advise_in = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "troupe-client: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&]() -> double {
      const auto v = value();
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0') {
        std::fprintf(stderr, "troupe-client: %s needs a number, got '%s'\n", arg.c_str(), v.c_str());
        std::exit(2);
      }
      return d;
    };
    if (arg == "--endpoint") endpoint = value();
    else if (arg == "--prompt") g.prompt = value();
    else if (arg == "--max-tokens") g.max_tokens = static_cast<std::uint32_t>(number());
    else if (arg == "--adapter") g.adapter = value();
    else if (arg == "--temperature") g.sampling.temperature = static_cast<float>(number());
    else if (arg == "--top-p") g.sampling.top_p = static_cast<float>(number());
    else if (arg == "--top-k") g.sampling.top_k = static_cast<std::int32_t>(number());
    else if (arg == "--seed") g.sampling.seed = static_cast<std::uint64_t>(number());
    else if (arg == "--stop") g.stop.push_back(value());
    else if (arg == "--no-stream") g.stream = false;
    else if (arg == "--id") g.id = value();
    else if (arg == "--cancel-after") cancel_after = static_cast<long>(number());
    else if (arg == "--timeout-ms") timeout_ms = static_cast<long>(number());
    else if (arg == "--json") json = true;
    else if (arg == "--session") g.session = value();
    else if (arg == "--logprobs") g.logprobs = static_cast<std::int32_t>(number());
    else if (arg == "--prompt-logprobs") g.prompt_logprobs = static_cast<std::int32_t>(number());
    else if (arg == "--presence-penalty") g.sampling.presence_penalty = static_cast<float>(number());
    else if (arg == "--frequency-penalty") g.sampling.frequency_penalty = static_cast<float>(number());
    else if (arg == "--min-p") g.sampling.min_p = static_cast<float>(number());
    else if (arg == "--repetition-penalty") g.sampling.repetition_penalty = static_cast<float>(number());
    else if (arg == "--logit-bias") {
      const auto v = value();
      const auto eq = v.find('=');
      char* end = nullptr;
      const long token = eq == std::string::npos ? -1 : std::strtol(v.c_str(), &end, 10);
      const char* bias_at = eq == std::string::npos ? "" : v.c_str() + eq + 1;
      char* bias_end = nullptr;
      const double bias = std::strtod(bias_at, &bias_end);
      if (eq == std::string::npos || end != v.c_str() + eq || eq == 0 || bias_end == bias_at || *bias_end != '\0') {
        std::fprintf(stderr, "troupe-client: --logit-bias needs TOKEN=BIAS (a token id and a number), got '%s'\n",
                     v.c_str());
        return 2;
      }
      g.sampling.logit_bias.emplace_back(static_cast<std::int32_t>(token), static_cast<float>(bias));
    }
    else if (arg == "--stop-token") g.stop_token_ids.push_back(static_cast<std::int32_t>(number()));
    else if (arg == "--ignore-eos") g.ignore_eos = true;
    else if (arg == "--keep-special") g.skip_special_tokens = false;
    else if (arg == "--choice") g.choice.push_back(value());
    else if (arg == "--regex") g.regex = value();
    else if (arg == "--min-tokens") g.min_tokens = static_cast<std::uint32_t>(number());
    else if (arg == "--json-object") g.json_object = true;
    else if (arg == "--json-schema") {
      const auto path = value();
      std::ifstream in(path, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      const auto schema = nlohmann::json::parse(text.str(), nullptr, false);
      if (!in || !schema.is_object()) {
        std::fprintf(stderr, "troupe-client: --json-schema needs a file holding a JSON object, got '%s'\n",
                     path.c_str());
        return 2;
      }
      g.json_schema = schema.dump();
    }
    else if (arg == "--grammar") {
      const auto path = value();
      std::ifstream in(path, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      if (!in || text.str().empty()) {
        std::fprintf(stderr, "troupe-client: --grammar needs a file holding a GBNF grammar, got '%s'\n", path.c_str());
        return 2;
      }
      g.grammar = text.str();
    }
    else if (arg == "--advise") { query = arg; adapter_arg = value(); }
    else if (arg == "--in") advise_in = number();
    else if (arg == "--tokenize" || arg == "--detokenize") { query = arg; adapter_arg = value(); }
    else if (arg == "--health" || arg == "--stats" || arg == "--list-adapters") query = arg;
    else if (arg == "--load-adapter" || arg == "--unload-adapter") {
      query = arg;
      adapter_arg = value();
    }
    else if (arg == "--help" || arg == "-h") { usage(stdout); return 0; }
    else if (arg == "--version") { std::printf("troupe-client %s\n", std::string(version()).c_str()); return 0; }
    else {
      std::fprintf(stderr, "troupe-client: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  client_connection conn{endpoint};
  wire::request req;
  if (query == "--health") req = wire::health_request{g.id};
  else if (query == "--stats") req = wire::stats_request{g.id};
  else if (query == "--list-adapters") req = wire::list_adapters_request{g.id};
  else if (query == "--unload-adapter") req = wire::unload_adapter_request{g.id, adapter_arg};
  else if (query == "--advise") req = wire::advise_request{g.id, adapter_arg, advise_in, 0};
  else if (query == "--tokenize") req = wire::tokenize_request{g.id, adapter_arg};
  else if (query == "--detokenize") {
    wire::detokenize_request d{g.id, {}};
    for (const char* p = adapter_arg.c_str(); *p != '\0';) {
      char* end = nullptr;
      const long id = std::strtol(p, &end, 10);
      if (end == p || (*end != ',' && *end != '\0')) {
        std::fprintf(stderr, "troupe-client: --detokenize takes token ids separated by commas, got '%s'\n",
                     adapter_arg.c_str());
        return 2;
      }
      d.tokens.push_back(static_cast<std::int32_t>(id));
      p = *end == ',' ? end + 1 : end;
    }
    req = d;
  }
  else if (query == "--load-adapter") {
    // NAME=PATH (a PEFT directory on the server) or NAME:RANK (sim backend).
    const auto eq = adapter_arg.find('=');
    const auto colon = adapter_arg.rfind(':');
    wire::load_adapter_request l{g.id, "", "", 0};
    if (eq != std::string::npos) {
      l.name = adapter_arg.substr(0, eq);
      l.path = adapter_arg.substr(eq + 1);
    } else if (colon != std::string::npos) {
      l.name = adapter_arg.substr(0, colon);
      char* end = nullptr;
      const auto rank = std::strtoul(adapter_arg.c_str() + colon + 1, &end, 10);
      if (*end != '\0' || rank == 0) {
        std::fprintf(stderr, "troupe-client: --load-adapter NAME:RANK needs a positive rank\n");
        return 2;
      }
      l.rank = static_cast<std::uint32_t>(rank);
    } else {
      std::fprintf(stderr, "troupe-client: --load-adapter takes NAME=PATH or NAME:RANK\n");
      return 2;
    }
    req = l;
  } else {
    if (!g.prompt)
      g.prompt = "hello";
    req = g;
  }
  if (!conn.send(req)) {
    std::fprintf(stderr, "troupe-client: cannot send to %s\n", endpoint.c_str());
    return 3;
  }
  long tokens_seen = 0;
  bool cancel_sent = false;
  for (;;) {
    auto raw = conn.receive_raw(std::chrono::milliseconds(timeout_ms));
    if (!raw) {
      std::fprintf(stderr, "troupe-client: no reply from %s within %ld ms\n", endpoint.c_str(), timeout_ms);
      return 3;
    }
    if (json)
      std::printf("%s\n", raw->c_str());
    auto parsed = wire::parse_reply(*raw);
    if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
      std::fprintf(stderr, "troupe-client: unreadable reply: %s\n", err->message.c_str());
      return 1;
    }
    auto& reply = std::get<wire::reply>(parsed);
    if (auto* e = std::get_if<wire::error_reply>(&reply)) {
      std::fprintf(stderr, "error: %s: %s\n", std::string{wire::to_string(e->code)}.c_str(),
                   e->message.c_str());
      return 1;
    }
    if (auto* t = std::get_if<wire::token_reply>(&reply)) {
      tokens_seen += static_cast<long>(t->tokens.size());
      if (!json) {
        std::fputs(t->text.c_str(), stdout);
        std::fflush(stdout);
      }
      if (cancel_after >= 0 && tokens_seen >= cancel_after && !cancel_sent) {
        conn.send(wire::cancel_request{g.id});
        cancel_sent = true;
      }
      continue;
    }
    if (auto* d = std::get_if<wire::done_reply>(&reply)) {
      if (!json) {
        if (d->text)
          std::fputs(d->text->c_str(), stdout);
        std::printf("\n");
      }
      std::fprintf(stderr,
                   "done: finish_reason=%s prompt_tokens=%u completion_tokens=%u cached_tokens=%u "
                   "queue_ms=%.2f ttft_ms=%.2f e2e_ms=%.2f\n",
                   d->finish_reason.c_str(), d->prompt_tokens, d->completion_tokens, d->cached_tokens,
                   d->time.queue_ms, d->time.ttft_ms, d->time.e2e_ms);
      return 0;
    }
    if (std::holds_alternative<wire::accepted_reply>(reply))
      continue;
    if (!json) // health, stats, adapters, adapter, advise, tokenize, detokenize: print the raw reply
      std::printf("%s\n", raw->c_str());
    return 0;
  }
}
