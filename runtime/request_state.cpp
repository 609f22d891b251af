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

} // namespace troupe
