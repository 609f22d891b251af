// The elementwise references: each output element computed in fp32 exactly
// as cpu_model computes it, from inputs widened from fp16/bf16 bits, and
// rounded once to the element type.
#include "gpu/cuda/reference_elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

void need(const char* who, const char* what, std::size_t have, std::uint64_t want) {
  if (have < want)
    fail(std::string(who) + ": " + what + " holds " + std::to_string(have) + " elements, " +
         std::to_string(want) + " needed");
}

// Normalises `row` ([hidden] fp32) into `out` bits.
void norm_row(dtype t, std::span<const float> row, std::span<const std::uint16_t> weight,
              float eps, std::span<std::uint16_t> out) {
  const float scale = rms_scale(row, eps);
  for (std::size_t i = 0; i < row.size(); ++i)
    out[i] = to_bits(t, rms_apply(row[i], scale, from_bits(t, weight[i])));
}

} // namespace

float rms_scale(std::span<const float> x, float eps) noexcept {
  double ss = 0;
  for (float v : x)
    ss += static_cast<double>(v) * v;
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps));
}

rope_cos_sin rope_angle(std::int32_t position, float inv_freq) noexcept {
  const float angle = static_cast<float>(position) * inv_freq;
  return {static_cast<float>(std::cos(static_cast<double>(angle))),
          static_cast<float>(std::sin(static_cast<double>(angle)))};
}

float silu_mul(float g, float u) noexcept { return g / (1.0f + std::exp(-g)) * u; }

void embedding_gather_reference(std::span<const std::uint16_t> table,
                                std::span<const std::int32_t> ids, std::uint32_t hidden,
                                std::span<std::uint16_t> out) {
  if (hidden == 0)
    fail("embedding_gather_reference: hidden 0");
  need("embedding_gather_reference", "out", out.size(), std::uint64_t{ids.size()} * hidden);
  const std::uint64_t vocab = table.size() / hidden;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || static_cast<std::uint64_t>(ids[r]) >= vocab)
      throw std::out_of_range("embedding_gather_reference: id " + std::to_string(ids[r]) +
                              " of row " + std::to_string(r) + " outside a vocabulary of " +
                              std::to_string(vocab));
    const auto src = table.subspan(static_cast<std::size_t>(ids[r]) * hidden, hidden);
    std::copy(src.begin(), src.end(), out.begin() + static_cast<std::ptrdiff_t>(r * hidden));
  }
}

void rmsnorm_reference(dtype t, std::span<const std::uint16_t> x,
                       std::span<const std::uint16_t> weight, float eps, std::uint32_t rows,
                       std::uint32_t hidden, std::span<std::uint16_t> out) {
  const std::uint64_t n = std::uint64_t{rows} * hidden;
  need("rmsnorm_reference", "x", x.size(), n);
  need("rmsnorm_reference", "weight", weight.size(), hidden);
  need("rmsnorm_reference", "out", out.size(), n);
  std::vector<float> row(hidden);
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint32_t i = 0; i < hidden; ++i)
      row[i] = from_bits(t, x[r * hidden + i]);
    norm_row(t, row, weight, eps, out.subspan(r * hidden, hidden));
  }
}

void add_rmsnorm_reference(dtype t, std::span<std::uint16_t> residual,
                           std::span<const std::uint16_t> x, std::span<const std::uint16_t> weight,
                           float eps, std::uint32_t rows, std::uint32_t hidden,
                           std::span<std::uint16_t> out) {
  const std::uint64_t n = std::uint64_t{rows} * hidden;
  need("add_rmsnorm_reference", "residual", residual.size(), n);
  need("add_rmsnorm_reference", "x", x.size(), n);
  need("add_rmsnorm_reference", "weight", weight.size(), hidden);
  need("add_rmsnorm_reference", "out", out.size(), n);
  std::vector<float> row(hidden);
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint32_t i = 0; i < hidden; ++i) {
      const std::uint64_t e = r * hidden + i;
      const std::uint16_t sum = to_bits(t, from_bits(t, residual[e]) + from_bits(t, x[e]));
      residual[e] = sum;
      row[i] = from_bits(t, sum); // the norm reads the rounded sum
    }
    norm_row(t, row, weight, eps, out.subspan(r * hidden, hidden));
  }
}

void rope_reference(dtype t, std::span<std::uint16_t> q, std::span<std::uint16_t> k,
                    std::span<const std::int32_t> positions, std::span<const float> inv_freq,
                    std::uint32_t rows, std::uint32_t heads, std::uint32_t kv_heads,
                    std::uint32_t head_dim, float scale) {
  if (head_dim == 0 || head_dim % 2 != 0)
    fail("rope_reference: head_dim " + std::to_string(head_dim) + " is not even");
  if (inv_freq.empty() || inv_freq.size() > head_dim / 2)
    fail("rope_reference: " + std::to_string(inv_freq.size()) + " rotary frequencies for head_dim " +
         std::to_string(head_dim));
  const auto half = static_cast<std::uint32_t>(inv_freq.size());
  need("rope_reference", "q", q.size(), std::uint64_t{rows} * heads * head_dim);
  need("rope_reference", "k", k.size(), std::uint64_t{rows} * kv_heads * head_dim);
  need("rope_reference", "positions", positions.size(), rows);
  std::vector<rope_cos_sin> cs(half);
  auto rotate = [&](std::span<std::uint16_t> x, std::uint64_t row, std::uint32_t n_heads) {
    for (std::uint64_t h = 0; h < n_heads; ++h) {
      std::uint16_t* p = x.data() + (row * n_heads + h) * head_dim;
      for (std::uint32_t i = 0; i < half; ++i) {
        const rope_pair r = rope_rotate(from_bits(t, p[i]), from_bits(t, p[i + half]), cs[i]);
        p[i] = to_bits(t, r.a);
        p[i + half] = to_bits(t, r.b);
      }
    }
  };
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint32_t i = 0; i < half; ++i) {
      cs[i] = rope_angle(positions[r], inv_freq[i]);
      cs[i].cos *= scale;
      cs[i].sin *= scale;
    }
    rotate(q, r, heads);
    rotate(k, r, kv_heads);
  }
}

void swiglu_reference(dtype t, std::span<const std::uint16_t> gate_up, std::uint32_t rows,
                      std::uint32_t inter, std::span<std::uint16_t> out) {
  need("swiglu_reference", "gate_up", gate_up.size(), 2ull * rows * inter);
  need("swiglu_reference", "out", out.size(), std::uint64_t{rows} * inter);
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint32_t i = 0; i < inter; ++i) {
      const float g = from_bits(t, gate_up[2 * r * inter + i]);
      const float u = from_bits(t, gate_up[2 * r * inter + inter + i]);
      out[r * inter + i] = to_bits(t, silu_mul(g, u));
    }
}

void add_bias_reference(dtype t, std::span<std::uint16_t> x, std::span<const std::uint16_t> bias,
                        std::uint32_t rows, std::uint32_t cols) {
  need("add_bias_reference", "x", x.size(), std::uint64_t{rows} * cols);
  need("add_bias_reference", "bias", bias.size(), cols);
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint32_t i = 0; i < cols; ++i) {
      auto& e = x[r * cols + i];
      e = to_bits(t, from_bits(t, e) + from_bits(t, bias[i]));
    }
}

} // namespace troupe::gpu::cuda
