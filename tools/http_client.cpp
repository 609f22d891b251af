#include "tools/http_client.hpp"

// Boost 1.74's headers use std::exchange without including <utility>.
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

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

void http_client::set_api_key(std::string key) {
  impl_->authorization = "Bearer " + std::move(key);
}

std::variant<http_client::response, std::string> http_client::request(const char* method, const std::string& target,
                                                                      const std::string& body) {
  auto& p = *impl_;
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, p.host);
  req.keep_alive(true);
  if (!p.authorization.empty())
    req.set(http::field::authorization, p.authorization);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  boost::system::error_code ec;
  http::write(p.socket, req, ec);
  if (ec)
    return "sending to " + p.host + " failed: " + ec.message();
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 30);
  http::read(p.socket, p.buffer, parser, ec);
  if (ec)
    return "reading from " + p.host + " failed: " + ec.message();
  response r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = std::move(parser.get().body());
  return r;
}

} // namespace troupe
