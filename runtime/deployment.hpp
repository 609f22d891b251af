// Deployment bootstrap: builds the actor system and every actor a deployment
// file asks for, wires them together and opens the ZeroMQ endpoint. Used by
// troupe-serve and by the end-to-end tests. CAF stays inside the .cpp.
#pragma once

#include "runtime/options.hpp"

#include <memory>
#include <string>
#include <variant>

namespace troupe {

/// A running deployment. Not copyable; stop() (or the destructor) shuts it down.
class deployment {
public:
  /// Starts everything; an error message that names the cause on failure.
  static std::variant<std::unique_ptr<deployment>, std::string>
  start(const deployment_options& opts);

  ~deployment();
  deployment(const deployment&) = delete;
  deployment& operator=(const deployment&) = delete;

  /// The endpoint clients connect to (real port when the config said 0).
  const std::string& endpoint() const noexcept;
  /// The OpenAI-compatible HTTP front's "host:port" ("" without [http] listen).
  const std::string& http_endpoint() const noexcept;

  /// Why this process's backend can run nothing more ("" while it can):
  /// executor_backend::broken().
  std::string broken() const;

  /// Graceful stop: refuses new work, waits up to server.drain_timeout_s for
  /// in-flight requests to finish, then stops the bridge and every actor.
  /// Returns the number of requests still in flight when it gave up. Call
  /// it from the thread that called start(): CAF 0.17 ties the actor
  /// system's logger to that thread, and its destructor waits for it.
  std::uint64_t stop();

  struct impl;

private:
  explicit deployment(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe
