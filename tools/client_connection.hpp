// A blocking ZeroMQ DEALER client for the wire protocol: troupe-client,
// troupe-bench and the end-to-end tests use it. Not for use inside actors.
#pragma once

#include "messages/wire.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <variant>

namespace troupe {

class client_connection {
public:
  /// Connects a DEALER socket to `endpoint` (connection completes lazily).
  explicit client_connection(const std::string& endpoint);
  ~client_connection();
  client_connection(const client_connection&) = delete;
  client_connection& operator=(const client_connection&) = delete;

  /// Sends one raw frame; false if the socket refused it.
  bool send_raw(std::string_view frame);
  /// Sends a request as JSON.
  bool send(const wire::request& r);
  /// Waits up to `timeout` for one frame; nullopt on timeout.
  std::optional<std::string> receive_raw(std::chrono::milliseconds timeout);
  /// Waits for one reply and parses it; nullopt on timeout.
  std::optional<std::variant<wire::reply, wire::parse_error>>
  receive(std::chrono::milliseconds timeout);

private:
  void* ctx_ = nullptr;
  void* socket_ = nullptr;
};

} // namespace troupe
