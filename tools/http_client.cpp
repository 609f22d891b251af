#include "tools/http_client.hpp"

// Boost 1.74's headers use std::exchange without including <utility>.
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <array>

namespace troupe {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct http_client::impl {
  asio::io_context io;
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
  std::string host;
  std::string authorization;
};

http_client::http_client(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

http_client::~http_client() {
  boost::system::error_code ignored;
  impl_->socket.shutdown(tcp::socket::shutdown_both, ignored);
}

std::variant<std::unique_ptr<http_client>, std::string> http_client::connect(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return "\"" + host_port + "\" is not host:port";
  auto p = std::make_unique<impl>();
  p->host = host_port;
  boost::system::error_code ec;
  tcp::resolver resolver(p->io);
  const auto at = resolver.resolve(host_port.substr(0, colon), host_port.substr(colon + 1), ec);
  if (!ec)
    asio::connect(p->socket, at, ec);
  if (ec)
    return "cannot connect to " + host_port + ": " + ec.message();
  p->socket.set_option(tcp::no_delay(true), ec);
  return std::unique_ptr<http_client>(new http_client(std::move(p)));
}

int http_client::native_handle() const noexcept {
  return const_cast<tcp::socket&>(impl_->socket).native_handle();
}

void http_client::set_api_key(std::string key) {
  impl_->authorization = "Bearer " + std::move(key);
}

namespace {

http::request<http::string_body> make_request(const char* method, const std::string& target, const std::string& body,
                                              const std::string& host, const std::string& authorization) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  req.keep_alive(true);
  if (!authorization.empty())
    req.set(http::field::authorization, authorization);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  return req;
}

} // namespace

std::variant<int, std::string> http_client::request_streaming(const char* method, const std::string& target,
                                                              const std::string& body,
                                                              const std::function<void(std::string_view)>& on_body) {
  auto& p = *impl_;
  auto req = make_request(method, target, body, p.host, p.authorization);
  boost::system::error_code ec;
  http::write(p.socket, req, ec);
  if (ec)
    return "sending to " + p.host + " failed: " + ec.message();
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::uint64_t{1} << 40); // a stream may run long
  http::read_header(p.socket, p.buffer, parser, ec);
  if (ec)
    return "reading from " + p.host + " failed: " + ec.message();
  std::array<char, 16384> piece;
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    http::read_some(p.socket, p.buffer, parser, ec);
    if (ec == http::error::need_buffer)
      ec = {};
    if (ec)
      return "reading from " + p.host + " failed: " + ec.message();
    const auto got = piece.size() - parser.get().body().size;
    if (got > 0)
      on_body(std::string_view(piece.data(), got));
  }
  return static_cast<int>(parser.get().result_int());
}

std::variant<http_client::response, std::string> http_client::request(const char* method, const std::string& target,
                                                                      const std::string& body) {
  response r;
  auto status = request_streaming(method, target, body, [&r](std::string_view piece) { r.body.append(piece); });
  if (auto* why = std::get_if<std::string>(&status))
    return std::move(*why);
  r.status = std::get<int>(status);
  return r;
}

} // namespace troupe
