// The one bridge between the ZeroMQ/Asio world and CAF: a ROUTER socket
// served by Boost.Asio C++20 coroutines on its own io_context thread. Frames
// in become messages to the intake actor; replies from the intake are posted
// back to the io_context and sent there. Asio and ZeroMQ stay in the .cpp.
#pragma once

#include "messages/interfaces.hpp"
#include "runtime/intake_core.hpp"
#include "runtime/options.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace troupe {

class zmq_bridge {
public:
  /// Binds a ROUTER socket to `opts.endpoint`; an error message on failure.
  static std::variant<std::unique_ptr<zmq_bridge>, std::string>
  open(const server_options& opts);

  ~zmq_bridge();
  zmq_bridge(const zmq_bridge&) = delete;
  zmq_bridge& operator=(const zmq_bridge&) = delete;

  /// Starts the io thread; frames go to `intake` from now on.
  void start(caf::actor_system& sys, intake_actor intake);

  /// Queues frames for sending. Thread-safe, never blocks: callable from any
  /// actor. A frame to a peer that is gone makes the bridge tell the intake.
  void send(std::vector<outbound_frame> frames);

  /// Sends what is queued, then stops the io thread and closes the socket.
  void stop();

  /// The bound endpoint (with the real port when the config asked for 0/*).
  const std::string& endpoint() const noexcept;

  /// Frames received and sent so far.
  std::uint64_t frames_in() const noexcept;
  std::uint64_t frames_out() const noexcept;

  struct impl;

private:
  explicit zmq_bridge(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Encodes a ZeroMQ routing envelope (one or more frames) as one string, and
/// back. Exposed for tests.
std::string encode_envelope(const std::vector<std::string>& frames);
std::vector<std::string> decode_envelope(const std::string& peer);

} // namespace troupe
