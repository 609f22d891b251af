// Helpers of the elementwise tests (reference, oracle, kernel): random
// fp16/bf16 data as bits, distances in units in the last place, and the
// fp64 formulas the references are held against. Header-only, no CUDA.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu::cuda::elementwise_test {

inline constexpr dtype both_dtypes[] = {dtype::f16, dtype::bf16};

/// Llama 3.1's rotary scaling (factor 8 over 8,192 positions).
inline rope_scaling llama3_scaling() {
  rope_scaling s;
  s.type = "llama3";
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

/// n values of N(mean, sd) rounded to `t`, as bits.
inline std::vector<std::uint16_t> random_bits(dtype t, std::size_t n, std::uint64_t seed,
                                              float sd = 1.0f, float mean = 0.0f) {
  std::mt19937_64 rng{seed};
  std::normal_distribution<float> dist{mean, sd};
  std::vector<std::uint16_t> v(n);
  for (auto& b : v)
    b = to_bits(t, dist(rng));
  return v;
}

inline bool is_nan_bits(dtype t, std::uint16_t b) { return std::isnan(from_bits(t, b)); }

/// Position of `b` on the number line of `t`, so that adjacent values
/// differ by 1 (+0 and -0 coincide).
inline std::int64_t ordinal(std::uint16_t b) {
  return (b & 0x8000u) ? -static_cast<std::int64_t>(b & 0x7fffu) : static_cast<std::int64_t>(b);
}

/// Units in the last place between two non-NaN values of `t`.
inline std::int64_t ulps(std::uint16_t a, std::uint16_t b) {
  return std::llabs(ordinal(a) - ordinal(b));
}

/// fp64 value rounded to `t` (through fp32, as every path here rounds).
inline std::uint16_t bits_of(dtype t, double v) { return to_bits(t, static_cast<float>(v)); }

/// How two arrays of `t` bits compare: elements not within one ulp and not
/// within the allowed absolute difference, elements that differ at all,
/// and NaN disagreements. `abs_tol(i)` gives element i's allowance.
struct comparison {
  std::size_t bad = 0;
  std::size_t inexact = 0;
  std::size_t nan_mismatch = 0;
  std::string first; ///< the first bad element, described
};

template <class AbsTol>
comparison compare_bits(dtype t, std::span<const std::uint16_t> got,
                        std::span<const std::uint16_t> want, AbsTol abs_tol) {
  comparison c;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool gn = is_nan_bits(t, got[i]);
    const bool wn = is_nan_bits(t, want[i]);
    if (gn || wn) {
      if (gn != wn) {
        ++c.nan_mismatch;
        if (c.first.empty())
          c.first = "element " + std::to_string(i) + ": NaN on one side only";
      }
      continue;
    }
    if (got[i] == want[i] || ulps(got[i], want[i]) == 0)
      continue;
    ++c.inexact;
    const double diff = std::abs(static_cast<double>(from_bits(t, got[i])) - from_bits(t, want[i]));
    if (ulps(got[i], want[i]) > 1 && diff > abs_tol(i)) {
      ++c.bad;
      if (c.first.empty())
        c.first = "element " + std::to_string(i) + ": got " +
                  std::to_string(from_bits(t, got[i])) + ", want " +
                  std::to_string(from_bits(t, want[i]));
    }
  }
  return c;
}

inline comparison compare_bits(dtype t, std::span<const std::uint16_t> got,
                               std::span<const std::uint16_t> want) {
  return compare_bits(t, got, want, [](std::size_t) { return 0.0; });
}

/// At most this many elements of n may differ at all from a reference that
/// shares the kernel's rounding points (fp32 results that straddle a
/// rounding boundary by the last bits of fp32): 1%, and at least 2.
inline std::size_t inexact_allowance(std::size_t n) { return std::max<std::size_t>(2, n / 100); }

} // namespace troupe::gpu::cuda::elementwise_test
