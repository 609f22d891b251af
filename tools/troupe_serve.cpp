// troupe-serve: runs one deployment from a TOML file (or the embedded
// default) until SIGINT/SIGTERM, then drains in-flight requests and exits.
#include "messages/version.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/config.hpp"
#include "runtime/deployment.hpp"
#include "runtime/logging.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

volatile std::sig_atomic_t stop_requested = 0;

void on_signal(int) {
  stop_requested = 1;
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: troupe-serve [--config FILE] [--endpoint URL] [--log-level LEVEL]\n"
               "                    [--node N] [--print-default-config] [--version]\n"
               "Serves the deployment in FILE (default: the embedded config/default.toml).\n"
               "--node N: in a multi-node deployment ([cluster] nodes), run node N\n"
               "(overrides cluster.node); the router node takes the clients.\n");
}

} // namespace

int main(int argc, char** argv) {
  std::string config_path;
  std::string endpoint;
  std::string log_level;
  std::string node;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "troupe-serve: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--config")
      config_path = value("--config");
    else if (arg == "--endpoint")
      endpoint = value("--endpoint");
    else if (arg == "--node")
      node = value("--node");
    else if (arg == "--log-level")
      log_level = value("--log-level");
    else if (arg == "--print-default-config") {
      std::fwrite(troupe::embedded_default_config().data(), 1,
                  troupe::embedded_default_config().size(), stdout);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    } else if (arg == "--version") {
      std::printf("troupe-serve %s\n", std::string(troupe::version()).c_str());
      return 0;
    } else {
      std::fprintf(stderr, "troupe-serve: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  const auto catalog = troupe::default_catalog();
  auto loaded = config_path.empty()
                  ? troupe::parse_config(troupe::embedded_default_config(),
                                         "<embedded default>", catalog)
                  : troupe::load_config_file(config_path, catalog);
  if (auto* err = std::get_if<troupe::config_error>(&loaded)) {
    std::fprintf(stderr, "troupe-serve: %s\n", err->message.c_str());
    return 1;
  }
  auto opts = std::get<troupe::deployment_options>(std::move(loaded));
  if (!endpoint.empty())
    opts.server.endpoint = endpoint;
  if (!log_level.empty())
    opts.logging.level = log_level;
  if (!node.empty()) {
    char* end = nullptr;
    const auto n = std::strtoul(node.c_str(), &end, 10);
    if (end == node.c_str() || *end != '\0' || !opts.cluster.enabled() || n >= opts.cluster.nodes.size()) {
      std::fprintf(stderr, "troupe-serve: --node %s: %s\n", node.c_str(),
                   opts.cluster.enabled()
                     ? ("must be a node index below " + std::to_string(opts.cluster.nodes.size())).c_str()
                     : "the deployment has no [cluster] nodes");
      return 2;
    }
    opts.cluster.node = static_cast<std::uint32_t>(n);
  }
  if (auto err = troupe::configure_logging(opts.logging)) {
    std::fprintf(stderr, "troupe-serve: %s\n", err->c_str());
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  auto started = troupe::deployment::start(opts);
  if (auto* err = std::get_if<std::string>(&started)) {
    std::fprintf(stderr, "troupe-serve: %s\n", err->c_str());
    return 1;
  }
  auto& dep = *std::get<std::unique_ptr<troupe::deployment>>(started);
  std::printf("troupe-serve: listening on %s\n", dep.endpoint().c_str());
  if (!dep.http_endpoint().empty())
    std::printf("troupe-serve: http on %s\n", dep.http_endpoint().c_str());
  std::fflush(stdout);
  std::string broken;
  while (!stop_requested && (broken = dep.broken()).empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!broken.empty()) {
    // Nothing more can run in this process: stop, so a supervisor starts a
    // fresh one; the requests in flight end with errors.
    spdlog::critical("troupe: the backend can run nothing more ({}); stopping", broken);
    dep.stop();
    return 4;
  }
  spdlog::info("troupe: stopping (draining for up to {} s)", opts.server.drain_timeout_s);
  const auto left = dep.stop();
  return left == 0 ? 0 : 3;
}
