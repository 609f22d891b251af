// Test support: starts a deployment from a config file in-process on a
// random loopback port, and collects a client's replies per request id.
#pragma once

#include "runtime/backend_factory.hpp"
#include "runtime/config.hpp"
#include "runtime/deployment.hpp"
#include "runtime/logging.hpp"
#include "tools/client_connection.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace troupe::testing {

/// Loads `path` (relative to the repo root) and starts it; fails the test on error.
inline std::unique_ptr<deployment> start_from_file(const std::string& path) {
  auto loaded = load_config_file(path, default_catalog());
  if (auto* err = std::get_if<config_error>(&loaded)) {
    ADD_FAILURE() << err->message;
    return nullptr;
  }
  auto opts = std::get<deployment_options>(std::move(loaded));
  if (auto err = configure_logging(opts.logging)) {
    ADD_FAILURE() << *err;
    return nullptr;
  }
  auto started = deployment::start(opts);
  if (auto* err = std::get_if<std::string>(&started)) {
    ADD_FAILURE() << *err;
    return nullptr;
  }
  return std::get<std::unique_ptr<deployment>>(std::move(started));
}

/// Everything one request id received, in order.
struct reply_log {
  std::vector<wire::reply> replies;
  std::size_t terminal = 0;       ///< done + error replies
  std::size_t streamed_tokens = 0;
  const wire::done_reply* done() const {
    for (const auto& r : replies)
      if (auto* d = std::get_if<wire::done_reply>(&r))
        return d;
    return nullptr;
  }
  const wire::error_reply* error() const {
    for (const auto& r : replies)
      if (auto* e = std::get_if<wire::error_reply>(&r))
        return e;
    return nullptr;
  }
};

inline const std::string& reply_id(const wire::reply& r) {
  return std::visit([](const auto& x) -> const std::string& { return x.id; }, r);
}

inline bool is_terminal(const wire::reply& r) {
  return std::holds_alternative<wire::done_reply>(r) || std::holds_alternative<wire::error_reply>(r)
         || std::holds_alternative<wire::health_reply>(r) || std::holds_alternative<wire::stats_reply>(r)
         || std::holds_alternative<wire::adapters_reply>(r)
         || std::holds_alternative<wire::adapter_reply>(r);
}

/// Receives until every id in `ids` has a terminal reply or `timeout` passes
/// without any frame; records everything in `logs`. Returns false on timeout.
inline bool collect(client_connection& c, const std::vector<std::string>& ids,
                    std::map<std::string, reply_log>& logs,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto pending = [&] {
    for (const auto& id : ids)
      if (logs[id].terminal == 0)
        return true;
    return false;
  };
  while (pending()) {
    auto got = c.receive(timeout);
    if (!got)
      return false;
    auto* reply = std::get_if<wire::reply>(&*got);
    if (reply == nullptr) {
      ADD_FAILURE() << "unreadable reply: " << std::get<wire::parse_error>(*got).message;
      continue;
    }
    auto& log = logs[reply_id(*reply)];
    if (auto* t = std::get_if<wire::token_reply>(reply))
      log.streamed_tokens += t->tokens.size();
    if (is_terminal(*reply))
      ++log.terminal;
    log.replies.push_back(std::move(*reply));
  }
  return true;
}

/// Asks for stats on `c` and returns them by name; empty on failure.
inline std::map<std::string, double> stats_of(client_connection& c, const std::string& id) {
  std::map<std::string, reply_log> logs;
  if (!c.send(wire::stats_request{id}) || !collect(c, {id}, logs))
    return {};
  auto* s = std::get_if<wire::stats_reply>(&logs[id].replies.back());
  if (s == nullptr)
    return {};
  std::map<std::string, double> out;
  for (const auto& v : s->values)
    out.emplace(v.name, v.value);
  return out;
}

} // namespace troupe::testing
