// sample_token: greedy, or softmax with temperature in double, then top-k,
// then top-p, and one uniform draw from splitmix64 keyed by (seed, index).
#include "gpu/sampling.hpp"

#include "gpu/random.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace troupe::gpu {

namespace {

// Lowest id among the largest logits; NaN never wins.
std::int32_t argmax(std::span<const float> logits) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i])))
      best = i;
  return static_cast<std::int32_t>(best);
}

// A uniform double in [0, 1) that depends only on (seed, output_index).
double uniform01(std::uint64_t seed, std::uint32_t output_index) {
  const std::uint64_t r = splitmix64(splitmix64(seed) ^ splitmix64(0x5eed0000ULL + output_index));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

} // namespace

/// Empty logits give -1. A temperature <= 0 (or NaN) means greedy; top_k <= 0
/// keeps every token; top_p >= 1 (or NaN) keeps every token left; at least
/// one token is always kept. NaN logits count as -infinity.
std::int32_t sample_token(std::span<const float> logits, const sampling_config& cfg,
                          std::uint64_t seed, std::uint32_t output_index) {
  if (logits.empty())
    return -1;
  if (!(cfg.temperature > 0.0f))
    return argmax(logits);

  const std::size_t n = logits.size();
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits)
    if (!std::isnan(l))
      mx = std::max(mx, static_cast<double>(l) * inv_t);
  if (!std::isfinite(mx))
    return argmax(logits);
  std::vector<double> p(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double l = static_cast<double>(logits[i]);
    p[i] = std::isnan(l) ? 0.0 : std::exp(l * inv_t - mx);
    total += p[i];
  }
  for (auto& x : p)
    x /= total;

  // Descending probability, ties by lower id.
  std::vector<std::int32_t> order(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = static_cast<std::int32_t>(i);
  auto before = [&p](std::int32_t a, std::int32_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
  };
  std::size_t keep = n;
  if (cfg.top_k > 0 && static_cast<std::size_t>(cfg.top_k) < n) {
    keep = static_cast<std::size_t>(cfg.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  double kept_mass = 0;
  for (std::size_t i = 0; i < keep; ++i)
    kept_mass += p[order[i]];

  // top-p over the top-k distribution renormalized, as HF's warpers chain.
  if (cfg.top_p < 1.0f) {
    const double target = static_cast<double>(std::max(cfg.top_p, 0.0f)) * kept_mass;
    double cum = 0;
    std::size_t i = 0;
    while (i < keep) {
      cum += p[order[i]];
      ++i;
      if (cum >= target)
        break;
    }
    keep = i;
    kept_mass = cum;
  }

  const double u = uniform01(seed, output_index) * kept_mass;
  double cum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += p[order[i]];
    if (u < cum)
      return order[i];
  }
  return order[keep - 1];
}

} // namespace troupe::gpu
