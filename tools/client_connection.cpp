#include "tools/client_connection.hpp"

#include <zmq.h>

namespace troupe {

client_connection::client_connection(const std::string& endpoint) {
  ctx_ = zmq_ctx_new();
  socket_ = zmq_socket(ctx_, ZMQ_DEALER);
  int linger = 0;
  int zero = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(socket_, ZMQ_RCVHWM, &zero, sizeof zero);
  zmq_setsockopt(socket_, ZMQ_SNDHWM, &zero, sizeof zero);
  zmq_connect(socket_, endpoint.c_str());
}

client_connection::~client_connection() {
  zmq_close(socket_);
  zmq_ctx_term(ctx_);
}

bool client_connection::send_raw(std::string_view frame) {
  return zmq_send(socket_, frame.data(), frame.size(), 0) >= 0;
}

bool client_connection::send(const wire::request& r) {
  return send_raw(wire::to_json(r));
}

std::optional<std::string> client_connection::receive_raw(std::chrono::milliseconds timeout) {
  zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, static_cast<long>(timeout.count())) <= 0)
    return std::nullopt;
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  if (zmq_msg_recv(&msg, socket_, 0) < 0) {
    zmq_msg_close(&msg);
    return std::nullopt;
  }
  std::string out(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
  zmq_msg_close(&msg);
  return out;
}

std::optional<std::variant<wire::reply, wire::parse_error>>
client_connection::receive(std::chrono::milliseconds timeout) {
  auto raw = receive_raw(timeout);
  if (!raw)
    return std::nullopt;
  return wire::parse_reply(*raw);
}

} // namespace troupe
