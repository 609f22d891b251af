// A blocking HTTP/1.1 client for one keep-alive connection: troupe-bench's
// HTTP mode uses it against the OpenAI-compatible front. Boost.Beast stays
// in the .cpp. Not for use inside actors.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace troupe {

class http_client {
public:
  struct response {
    int status = 0;
    std::string body; ///< whole (a chunked stream read to its end)
  };

  /// Connects to "host:port"; why not, naming the address.
  static std::variant<std::unique_ptr<http_client>, std::string> connect(const std::string& host_port);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// The socket's descriptor: another thread may shut it down to end a
  /// read that waits too long.
  int native_handle() const noexcept;

  /// Sends "Authorization: Bearer KEY" with every request from now on.
  void set_api_key(std::string key);

  /// Sends a request (a JSON body for POST; none for GET) and reads its whole
  /// response on the same connection; why not when the connection failed.
  std::variant<response, std::string> request(const char* method, const std::string& target,
                                               const std::string& body = {});

  /// As request(), but the body goes to `on_body` piece by piece as it
  /// arrives (a stream of server-sent events); the status, or why not.
  std::variant<int, std::string> request_streaming(const char* method, const std::string& target,
                                                   const std::string& body,
                                                   const std::function<void(std::string_view)>& on_body);

  struct impl;

private:
  explicit http_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe
