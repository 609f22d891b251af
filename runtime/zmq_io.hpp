// ZeroMQ under Boost.Asio, for the two fronts that hold a ZeroMQ socket
// (zmq_bridge, http_front). ZMQ_FD only says that the socket's state changed
// (edge-triggered), so a socket is drained of every ready message after each
// wake-up and after each send. Include only from .cpp files that use Asio.
#pragma once

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::zmq_io {

/// A ZeroMQ context and the one socket a front holds in it, closed in that
/// order when it goes (the fronts' impls derive from it).
struct owned_socket {
  void* ctx = nullptr;
  void* socket = nullptr;
  owned_socket() = default;
  owned_socket(const owned_socket&) = delete;
  owned_socket& operator=(const owned_socket&) = delete;
  ~owned_socket() {
    if (socket)
      zmq_close(socket);
    if (ctx)
      zmq_ctx_term(ctx);
  }
};

/// The next message ready on `socket`, its frames in order, without
/// blocking; std::nullopt when none is ready.
inline std::optional<std::vector<std::string>> receive(void* socket) {
  int events = 0;
  size_t len = sizeof events;
  if (zmq_getsockopt(socket, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN))
    return std::nullopt;
  std::vector<std::string> parts;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      break;
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    const bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more)
      break;
  }
  if (parts.empty())
    return std::nullopt;
  return parts;
}

/// Calls drain() now and after every wake-up of the socket's descriptor,
/// until `stopped` is set (by whoever cancels `fd`).
template <class Drain>
boost::asio::awaitable<void> serve(boost::asio::posix::stream_descriptor& fd, const bool& stopped, Drain drain,
                                   std::string_view who) {
  namespace asio = boost::asio;
  for (;;) {
    drain();
    boost::system::error_code ec;
    co_await fd.async_wait(asio::posix::stream_descriptor::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (stopped)
      co_return;
    if (ec && ec != asio::error::operation_aborted) {
      spdlog::error("{}: waiting for ZeroMQ failed: {}", who, ec.message());
      co_return;
    }
  }
}

} // namespace troupe::zmq_io
