// [queue_tuner] options as the tuner's parameters, for the queue_tuner actor
// and the virtual-time engine alike.
#pragma once

#include "policies/queue_tuner.hpp"
#include "runtime/options.hpp"

#include <cstdint>

namespace troupe {

/// The tuner's parameters from `o` for a pool of `total_tokens` tokens
/// (o.quota_size is "max" or "mean", as the config loader checks).
inline policies::tuner_params tuner_params_of(const queue_tuner_options& o, std::uint64_t total_tokens) {
  policies::tuner_params p;
  p.max_queues = o.max_queues;
  p.elbow = o.elbow;
  p.slo_s = o.slo_s;
  p.size = o.quota_size == "mean" ? policies::tuner_params::quota_size::mean : policies::tuner_params::quota_size::max;
  p.window_s = o.window_s;
  p.total_tokens = total_tokens;
  return p;
}

} // namespace troupe
