// Start-up measurements of the backend for cost-predicting policies
// (policies/cost_calibration.hpp): prefill times at a few lengths (for
// AdaptiveLLM's recompute regression), KV swap bandwidths out and back, and
// Apt-Serve's ρ (what a hidden-cache page adds to a decode step). Runs on
// the backend before it serves, on pages nothing else holds yet; on the sim
// backend the same calls return the cost model's times.
#pragma once

#include "gpu/backend.hpp"
#include "policies/cost_calibration.hpp"

#include <cstdint>

namespace troupe {

struct calibration_setup {
  std::uint64_t pool_pages = 0;
  std::uint32_t page_tokens = 16;
  std::uint64_t page_bytes = 0;
  /// Pages of the host pool the swap timing may use (0: no host pool,
  /// nothing ever swaps, no swap is timed).
  std::uint64_t host_pages = 0;
  /// Longest prompt to time (the model's context, or less).
  std::uint32_t max_tokens = 512;
  /// Prompts double in length until one takes longer than this: a GPU is
  /// measured across its context, a slow backend on short prompts only (its
  /// start-up stays short).
  double max_prefill_seconds = 0.5;
  /// Tokens a hidden-cache page holds (0: none; ρ is not measured).
  std::uint32_t hidden_page_tokens = 0;
  /// Timings per point; the median is kept.
  int repeats = 3;
};

/// Measures the backend. Points the pool cannot hold are skipped; a failed
/// step or swap leaves that figure at 0 (unmeasured).
policies::cost_calibration calibrate_backend(gpu::executor_backend& backend,
                                             const calibration_setup& setup);

} // namespace troupe
