#include "runtime/zmq_bridge.hpp"

#include "runtime/zmq_io.hpp"

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

namespace asio = boost::asio;

namespace troupe {

// -- envelopes ------------------------------------------------------------------

std::string encode_envelope(const std::vector<std::string>& frames) {
  std::string out;
  for (const auto& f : frames) {
    const auto n = static_cast<std::uint32_t>(f.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += f;
  }
  return out;
}

std::vector<std::string> decode_envelope(const std::string& peer) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos + sizeof(std::uint32_t) <= peer.size()) {
    std::uint32_t n = 0;
    std::memcpy(&n, peer.data() + pos, sizeof n);
    pos += sizeof n;
    if (pos + n > peer.size())
      break;
    out.emplace_back(peer.substr(pos, n));
    pos += n;
  }
  return out;
}

// -- impl -------------------------------------------------------------------------

struct zmq_bridge::impl : zmq_io::owned_socket {
  server_options opts;
  std::string endpoint;
  asio::io_context io{1};
  std::optional<asio::posix::stream_descriptor> fd;
  std::thread thread;
  caf::actor_system* sys = nullptr;
  intake_actor intake;
  std::atomic<std::uint64_t> in{0};
  std::atomic<std::uint64_t> out{0};
  bool stopped = false;

  /// Receives every frame ZeroMQ has ready. ZMQ_FD is edge-triggered, so
  /// this runs after every wake-up and after every send.
  void drain() {
    while (auto got = zmq_io::receive(socket)) {
      auto& parts = *got;
      if (parts.size() < 2)
        continue; // not a routed message; nothing to answer to
      ++in;
      // Envelope: the routing id, plus the empty delimiter a REQ peer adds.
      std::vector<std::string> env{parts[0]};
      std::size_t body = 1;
      if (parts.size() >= 3 && parts[1].empty()) {
        env.push_back(parts[1]);
        body = 2;
      }
      std::string payload;
      if (parts.size() - body == 1) {
        payload = std::move(parts[body]);
      } else {
        // Several body frames: not our protocol. Let the parser say so by
        // handing it something that is not a JSON object.
        payload = "multipart frames are not supported: send one JSON object per message";
      }
      caf::anon_send(intake, frame_atom_v, encode_envelope(env), std::move(payload));
    }
  }

  void send_now(const std::vector<outbound_frame>& frames) {
    for (const auto& f : frames) {
      auto env = decode_envelope(f.peer);
      bool ok = true;
      for (const auto& part : env) {
        if (zmq_send(socket, part.data(), part.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
          ok = false;
          break;
        }
      }
      if (ok && zmq_send(socket, f.payload.data(), f.payload.size(), ZMQ_DONTWAIT) < 0)
        ok = false;
      if (ok) {
        ++out;
        continue;
      }
      const int err = zmq_errno();
      if (err == EHOSTUNREACH) {
        // ROUTER_MANDATORY: the peer disconnected. Its requests are freed.
        caf::anon_send(intake, gone_atom_v, f.peer);
      } else {
        spdlog::warn("zmq bridge: send failed: {}", zmq_strerror(err));
      }
    }
    drain();
  }
};

// -- zmq_bridge -------------------------------------------------------------------

zmq_bridge::zmq_bridge(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

zmq_bridge::~zmq_bridge() {
  stop();
}

std::variant<std::unique_ptr<zmq_bridge>, std::string>
zmq_bridge::open(const server_options& opts) {
  auto p = std::make_unique<impl>();
  p->opts = opts;
  p->ctx = zmq_ctx_new();
  p->socket = zmq_socket(p->ctx, ZMQ_ROUTER);
  int one = 1;
  int zero = 0;
  int linger = 1000;
  // Frames beyond twice the limit drop the connection; between the limit and
  // that, the parser answers frame_too_large.
  std::int64_t hard_cap = static_cast<std::int64_t>(opts.max_frame_bytes) * 2 + 4096;
  zmq_setsockopt(p->socket, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  zmq_setsockopt(p->socket, ZMQ_SNDHWM, &zero, sizeof zero);
  zmq_setsockopt(p->socket, ZMQ_RCVHWM, &zero, sizeof zero);
  zmq_setsockopt(p->socket, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(p->socket, ZMQ_MAXMSGSIZE, &hard_cap, sizeof hard_cap);
  if (zmq_bind(p->socket, opts.endpoint.c_str()) != 0)
    return "cannot bind " + opts.endpoint + ": " + zmq_strerror(zmq_errno());
  char buf[512];
  size_t len = sizeof buf;
  if (zmq_getsockopt(p->socket, ZMQ_LAST_ENDPOINT, buf, &len) == 0)
    p->endpoint.assign(buf, strnlen(buf, len));
  else
    p->endpoint = opts.endpoint;
  return std::unique_ptr<zmq_bridge>(new zmq_bridge(std::move(p)));
}

void zmq_bridge::start(caf::actor_system& sys, intake_actor intake) {
  auto& p = *impl_;
  p.sys = &sys;
  p.intake = std::move(intake);
  int raw = -1;
  size_t len = sizeof raw;
  zmq_getsockopt(p.socket, ZMQ_FD, &raw, &len);
  p.fd.emplace(p.io, raw);
  asio::co_spawn(p.io, zmq_io::serve(*p.fd, p.stopped, [&p] { p.drain(); }, "zmq bridge"), asio::detached);
  p.thread = std::thread([&p] {
    auto guard = asio::make_work_guard(p.io);
    p.io.run();
  });
}

void zmq_bridge::send(std::vector<outbound_frame> frames) {
  auto* p = impl_.get();
  asio::post(p->io, [p, frames = std::move(frames)] {
    if (!p->stopped)
      p->send_now(frames);
  });
}

void zmq_bridge::stop() {
  auto& p = *impl_;
  if (!p.thread.joinable())
    return;
  // Runs after every send posted before it: replies already queued go out.
  asio::post(p.io, [&p] {
    p.stopped = true;
    if (p.fd) {
      p.fd->cancel();
      p.fd->release(); // the descriptor belongs to ZeroMQ
    }
    p.io.stop();
  });
  p.thread.join();
}

const std::string& zmq_bridge::endpoint() const noexcept {
  return impl_->endpoint;
}

std::uint64_t zmq_bridge::frames_in() const noexcept {
  return impl_->in;
}

std::uint64_t zmq_bridge::frames_out() const noexcept {
  return impl_->out;
}

} // namespace troupe
