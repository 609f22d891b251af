// Plain message payloads exchanged between actors (no CAF here: cores use
// them too). Their CAF inspect overloads are in messages/inspect.hpp.
#pragma once

#include "gpu/step.hpp"
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

/// A request's end, with its usage and timings (milliseconds).
struct finish_event {
  std::uint64_t request_id = 0;
  std::uint8_t reason = 0; ///< a troupe::finish_reason
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  double queue_ms = 0;
  double ttft_ms = 0;
  double e2e_ms = 0;
};

/// What one scheduler iteration produced, sent to the intake as one message.
struct progress_batch {
  std::vector<token_event> tokens;
  std::vector<finish_event> finished;
};

/// Per-step figures for the metrics actor.
struct step_metrics {
  std::uint32_t batch_size = 0;
  std::uint32_t new_tokens = 0;
  double device_seconds = 0;
  double wall_seconds = 0;
};

/// A named figure in a stats reply.
using stat_values = std::vector<std::pair<std::string, double>>;

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

/// An adapter load for the copy engine.
struct transfer_order {
  std::uint32_t adapter_id = 0;
  std::uint64_t bytes = 0;
  std::string path; ///< PEFT directory; empty for the sim backend
  std::uint8_t kind = 0; ///< a troupe::transfer_class (runtime/transfer_queue.hpp)
  /// A KV swap (kind swap_in or swap_out): the request and its pages, page i
  /// to page i.
  std::uint64_t request_id = 0;
  std::vector<std::uint32_t> device_pages;
  std::vector<std::uint32_t> host_pages;
};

/// What a transfer took; `error` is empty on success.
struct transfer_report {
  std::string error;
  bool host_hit = false;
  double disk_seconds = 0;
  double copy_seconds = 0;
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
