// Plain message payloads exchanged between actors (no CAF here: cores use
// them too). Their CAF inspect overloads are in messages/inspect.hpp.
#pragma once

#include "gpu/step.hpp"
#include "messages/stat.hpp"
#include "policies/queue_tuning.hpp"
#include "runtime/adapter_registry.hpp"
#include "runtime/request_state.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace troupe {

/// One output token of one request.
struct token_event {
  std::uint64_t request_id = 0;
  std::uint32_t index = 0;
  std::int32_t token = 0;
};

/// The log-probabilities of output token `index` of a request that asked
/// for them (request_spec::logprobs >= 0).
struct logprobs_event {
  std::uint64_t request_id = 0;
  std::uint32_t index = 0;
  gpu::token_logprobs logprobs;
};

/// The prompt log-probabilities of a request that asked for them
/// (request_spec::prompt_logprobs >= 0), one per prompt token after the
/// first; sent with the request's first output token.
struct prompt_logprobs_event {
  std::uint64_t request_id = 0;
  std::vector<gpu::token_logprobs> logprobs;
};

/// A request's end, with its usage and timings (milliseconds).
struct finish_event {
  std::uint64_t request_id = 0;
  std::uint8_t reason = 0; ///< a troupe::finish_reason
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  double queue_ms = 0;
  double ttft_ms = 0;
  double e2e_ms = 0;
  /// Prompt tokens read from a cache rather than computed.
  std::uint32_t cached_tokens = 0;
};

/// What one scheduler iteration produced, sent to the intake as one message.
struct progress_batch {
  std::vector<token_event> tokens;
  std::vector<finish_event> finished;
  /// One per token of the requests that asked, in token order.
  std::vector<logprobs_event> logprobs;
  /// One per request that asked, in the batch holding its first token.
  std::vector<prompt_logprobs_event> prompt_logprobs;
};

/// Per-step figures for the metrics actor.
struct step_metrics {
  std::uint32_t batch_size = 0;
  std::uint32_t new_tokens = 0;
  double device_seconds = 0;
  double wall_seconds = 0;
};


/// An adapter's status for list_adapters.
struct adapter_status {
  std::string name;
  std::uint32_t rank = 0;
  bool resident = false;
};

/// The scheduler's waiting requests per adapter, for the adapter cache:
/// waiting[i] requests wait for adapter_ids[i] (0 clears it).
struct adapter_demand {
  std::vector<std::uint32_t> adapter_ids;
  std::vector<std::uint32_t> waiting;
};

/// A transfer for the copy engine: an adapter load (into `device_pages`,
/// the pool pages reserved for it), a KV swap or a session cache's move.
struct transfer_order {
  std::uint32_t adapter_id = 0;
  std::uint64_t bytes = 0;
  std::string path; ///< PEFT directory; empty for the sim backend
  std::uint8_t kind = 0; ///< a troupe::transfer_class (runtime/transfer_queue.hpp)
  /// A KV swap (kind swap_in or swap_out): the request and its pages, page i
  /// to page i. An adapter load: its pool pages in `device_pages`.
  std::uint64_t request_id = 0;
  std::vector<std::uint32_t> device_pages;
  std::vector<std::uint32_t> host_pages;
  /// Not a swap but a session cache leaving or joining this node (class
  /// swap_out or swap_in for the queue): a kv_op.
  std::uint8_t kv_op = 0;
  /// kv_op import: the cache to write into `host_pages`.
  std::string data;
};

/// transfer_order::kv_op.
enum class kv_op : std::uint8_t {
  swap = 0,
  export_device = 1, ///< read `device_pages` into the report's data
  export_host = 2,   ///< read `host_pages` into the report's data
  import_host = 3,   ///< write the order's data into `host_pages`
  host_to_file = 4,  ///< read `host_pages` into the file at `path`
  file_to_host = 5,  ///< read the file at `path` into `host_pages`
  stream_in = 6,     ///< a swap-in layer by layer, under stream `request_id`
};

/// A session's cached KV on its way between nodes: the tokens whose K and V
/// it holds, and the page contents (empty on the sim backend). `pages` 0: no
/// cache came (none there, or `error` says why).
struct session_kv {
  std::uint64_t session = 0;
  std::vector<std::int32_t> tokens;
  std::uint32_t adapter_id = 0; ///< the adapter K and V were computed with
  std::uint64_t pages = 0;
  std::string data;
  std::string error;
};

/// What a transfer took; `error` is empty on success.
struct transfer_report {
  std::string error;
  bool host_hit = false;
  double disk_seconds = 0;
  double copy_seconds = 0;
  /// What a kv_op export read.
  std::string data;
};

/// A classified request, for the queue tuner: when it arrived, its weighted
/// size, its token cost and its predicted output.
struct wrs_sample {
  double arrival_s = 0;
  double wrs = 0;
  std::uint64_t cost_tokens = 0;
  std::uint32_t predicted_tokens = 0;
};

/// The answer to registering an adapter: the entry, or why not.
struct register_result {
  adapter_entry entry;
  std::string error;
};

} // namespace troupe
