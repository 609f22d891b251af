#include "runtime/request_state.hpp"

namespace troupe {

std::string_view to_string(request_state x) noexcept {
  switch (x) {
    case request_state::waiting:
      return "waiting";
    case request_state::admitting:
      return "admitting";
    case request_state::ready:
      return "ready";
    case request_state::running:
      return "running";
    case request_state::swapping_out:
      return "swapping_out";
    case request_state::swapping_in:
      return "swapping_in";
    case request_state::finished:
      return "finished";
  }
  return "?";
}

std::string_view to_string(finish_reason x) noexcept {
  switch (x) {
    case finish_reason::length:
      return "length";
    case finish_reason::eos:
      return "eos";
    case finish_reason::stop:
      return "stop";
    case finish_reason::cancelled:
      return "cancelled";
    case finish_reason::aborted:
      return "aborted";
    case finish_reason::adapter_error:
      return "adapter_error";
    case finish_reason::error:
      return "error";
  }
  return "?";
}

policies::classify_input classify_input_of(const request_spec& spec) {
  policies::classify_input in;
  in.prompt_tokens = static_cast<std::uint32_t>(spec.prompt.size());
  in.max_new_tokens = spec.max_new_tokens;
  in.adapter_id = spec.adapter_id;
  in.adapter_rank = spec.adapter_rank;
  in.priority = spec.priority;
  in.request_id = spec.request_id;
  return in;
}

std::uint64_t quota_cost_of(const request_spec& spec, std::uint32_t page_tokens) {
  return spec.prompt.size() + std::uint64_t{spec.predicted_tokens} + spec.adapter_pages * page_tokens;
}

} // namespace troupe
