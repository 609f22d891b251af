// What the backend measured at start-up (runtime/calibration.cpp), for
// policies that predict costs: AdaptiveLLM's swap and recompute times and
// Apt-Serve's ρ. Plain data; the simulator fills it from its cost model the
// same way, so both run the same decisions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace troupe::policies {

struct cost_calibration {
  /// Copy bandwidths of a KV swap out to host memory and back (0: unmeasured).
  double d2h_bytes_per_s = 0;
  double h2d_bytes_per_s = 0;
  /// Measured prefill times: (prompt tokens, seconds), a few lengths.
  std::vector<std::pair<std::uint32_t, double>> prefill_points;
  /// ρ: seconds one hidden-cache page adds to a decode step (recomputing K
  /// and V from it); 0 where the backend keeps no hidden caches.
  double hidden_page_seconds = 0;
};

} // namespace troupe::policies
