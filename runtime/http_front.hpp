// The OpenAI-compatible HTTP front ([http] listen): an HTTP/1.1 server on
// Boost.Asio C++20 coroutines (Boost.Beast for the protocol) on its own
// io_context thread, and a client of the deployment's own ZeroMQ intake: each
// HTTP request becomes wire requests on one DEALER socket, and the wire
// replies become the HTTP response (messages/openai does the translating).
// So the intake, its validation and its one-terminal-reply rule serve both
// fronts unchanged. Asio, Beast and ZeroMQ stay in the .cpp.
#pragma once

#include "messages/openai.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace troupe {

struct http_front_config {
  /// "host:port" to listen on (port 0: any free one).
  std::string listen;
  /// The intake's ZeroMQ endpoint (zmq_bridge::endpoint()).
  std::string intake;
  /// The name clients give as "model" for the base model.
  std::string model;
  /// Larger request bodies get 413.
  std::uint64_t max_body_bytes = 1 << 20;
  /// The intake's limit on a wire frame: a request whose frame is larger
  /// gets 413 (the intake would refuse it without naming it).
  std::uint64_t max_frame_bytes = 1 << 20;
  /// Connections open at once; past it a new one gets 503 and is closed.
  std::uint32_t max_connections = 256;
  /// Keys a client must send ("Authorization: Bearer KEY") for /v1/ paths;
  /// empty: none needed. /health and /metrics need none.
  std::vector<std::string> api_keys;
  /// Whether POST /v1/load_lora_adapter and /v1/unload_lora_adapter are
  /// served (a load reads a path on the server); off: 404.
  bool adapter_updates = false;
  /// Bytes of POST /v1/responses answers kept for previous_response_id and
  /// GET /v1/responses/ID (0: none).
  std::size_t response_store_bytes = std::size_t{64} << 20;
  /// Bytes of conversations kept for /v1/conversations and a response's
  /// `conversation` (0: none).
  std::size_t conversation_store_bytes = std::size_t{64} << 20;
  /// Bytes of uploaded files kept for batches (0: the Files and Batch
  /// APIs are not served); POST /v1/files takes a body up to this size.
  std::size_t file_store_bytes = std::size_t{256} << 20;
  /// Batch lines run at once, across all batches.
  std::uint32_t batch_concurrency = 32;
  /// A batch line's priority where its body gives none.
  std::int32_t batch_priority = -1;
  /// A directory the stores are written through to, and read back from at
  /// start ("": memory only).
  std::string store_dir;
  /// Each of store_dir's writes reaches the disk before the front goes on.
  bool store_sync = false;
  /// How POST /v1/chat/completions renders messages; none: not served,
  /// for the reason `no_chat` gives.
  std::optional<openai::chat_template> chat;
  std::string no_chat = "the deployment names no chat template ([http] chat_template)";
  /// What a request that leaves out temperature, top_p or top_k is given.
  openai::sampling_defaults sampling;
};

class http_front {
public:
  /// Binds the listening socket and connects to the intake; an error message
  /// (naming the address) on failure. Serves from the call on.
  static std::variant<std::unique_ptr<http_front>, std::string> open(const http_front_config& cfg);

  ~http_front();
  http_front(const http_front&) = delete;
  http_front& operator=(const http_front&) = delete;

  /// Stops taking connections; requests still waiting for the intake are
  /// answered 503; then the io thread ends.
  void stop();
  /// The server is draining: background responses still running are
  /// cancelled (what they would answer is kept in this front's memory, and
  /// in store_dir's files where there are any) and kept as "failed",
  /// shutting down.
  void cancel_background();

  /// "host:port" actually bound (the real port when the config said 0).
  const std::string& endpoint() const noexcept;

  struct impl;

private:
  explicit http_front(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe
