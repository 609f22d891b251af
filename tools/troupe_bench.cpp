// troupe-bench: control-plane load generator. Starts a deployment from a
// config file in-process (or targets a running server with --endpoint),
// sends N generate requests from C concurrent ZeroMQ clients, and reports
// requests/s and tokens/s through intake, scheduler, executor and back.
#include "runtime/backend_factory.hpp"
#include "runtime/config.hpp"
#include "runtime/deployment.hpp"
#include "runtime/logging.hpp"
#include "tools/client_connection.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: troupe-bench [--config FILE | --endpoint URL] [--clients C]\n"
               "                    [--requests N] [--max-tokens K] [--prompt-bytes B]\n"
               "                    [--adapters A] [--stream]\n"
               "Defaults: config tests/e2e/configs/sim-instant.toml, 8 clients,\n"
               "20000 requests, 8 tokens, 32 prompt bytes, 0 adapters, no streaming.\n");
}

} // namespace

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
    else if (arg == "--help" || arg == "-h") { usage(stdout); return 0; }
    else { usage(stderr); return 2; }
  }
  if (clients < 1 || requests < clients || max_tokens < 1) {
    std::fprintf(stderr, "troupe-bench: need clients >= 1, requests >= clients, max-tokens >= 1\n");
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
    configure_logging(opts.logging);
    auto started = deployment::start(opts);
    if (auto* err = std::get_if<std::string>(&started)) {
      std::fprintf(stderr, "troupe-bench: %s\n", err->c_str());
      return 1;
    }
    dep = std::get<std::unique_ptr<deployment>>(std::move(started));
    endpoint = dep->endpoint();
  }
  std::atomic<long> done{0}, errors{0}, tokens{0};
  const long per_client = requests / clients;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k) {
    threads.emplace_back([&, k] {
      client_connection c{endpoint};
      // Keep a window of requests in flight per client so the server, not
      // the client's round trips, sets the pace.
      const long window = 256;
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
  std::printf("troupe-bench: %ld requests (%d clients, %u tokens each%s): %.3f s, "
              "%.0f requests/s, %.0f tokens/s, %ld errors\n",
              done.load(), clients, max_tokens, stream ? ", streamed" : "", secs,
              static_cast<double>(done.load()) / secs, static_cast<double>(tokens.load()) / secs,
              errors.load());
  if (dep)
    dep->stop();
  return errors.load() == 0 ? 0 : 1;
}
