// CPU references of the elementwise launchers of gpu/cuda/kernels.hpp
// (embedding_gather, rmsnorm, add_rmsnorm, rope, swiglu, add_bias; the kernels are in
// gpu/cuda/elementwise.cu), and HF Llama's rotary inv_freq, which the CUDA
// backend uploads for `rope`. Element arrays are fp16 or bf16 bits; the math
// is the fp32 math of the cpu backend's model (gpu/cpu_model.cpp) with the
// kernels' rounding points: inputs widened to fp32, each output rounded once
// to the element type, add_rmsnorm's residual sum rounded before the norm.
// The fp32 cores are public so the oracle test can hold them against
// gpu::cpu_model. Plain C++, no CUDA; every function is pure (but for its
// output spans) and may be called from any thread.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/rope.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::gpu::cuda {

// -- fp32 cores (what cpu_model computes, element by element) ----------------------

/// 1 / sqrt(mean(x^2) + eps): the squares summed in double in index order,
/// the result rounded to fp32 (cpu_model's rms_norm).
float rms_scale(std::span<const float> x, float eps) noexcept;

/// One normalised element: w * (x * scale), fp32.
inline float rms_apply(float x, float scale, float w) noexcept { return w * (x * scale); }

/// cos and sin of one rotary angle: angle = float(position) * inv_freq in
/// fp32 (as HF computes its freqs), cos and sin taken in double and rounded.
struct rope_cos_sin {
  float cos = 1.0f;
  float sin = 0.0f;
};
rope_cos_sin rope_angle(std::int32_t position, float inv_freq) noexcept;

/// Rotate-half on one pair (x[i], x[i + head_dim/2]), fp32:
/// (a cos - b sin, b cos + a sin).
struct rope_pair {
  float a = 0.0f;
  float b = 0.0f;
};
inline rope_pair rope_rotate(float a, float b, rope_cos_sin cs) noexcept {
  return {a * cs.cos - b * cs.sin, b * cs.cos + a * cs.sin};
}

/// silu(g) * u as cpu_model writes it: g / (1 + expf(-g)) * u, fp32.
float silu_mul(float g, float u) noexcept;

// -- the launchers' references -------------------------------------------------------

/// out[r] = table[ids[r]] for r < ids.size(); table: [vocab, hidden] bits
/// (vocab = table.size() / hidden), out: [ids.size(), hidden]. The bits are
/// copied, so no element type is needed. Throws std::out_of_range for an id
/// outside [0, vocab), std::invalid_argument when out is too short.
void embedding_gather_reference(std::span<const std::uint16_t> table,
                                std::span<const std::int32_t> ids, std::uint32_t hidden,
                                std::span<std::uint16_t> out);

/// out[r, i] = round_t(weight[i] * (x[r, i] * rms_scale(x[r], eps))).
/// x, out: [rows, hidden]; weight: [hidden]. Throws std::invalid_argument
/// when a span is too short.
void rmsnorm_reference(dtype t, std::span<const std::uint16_t> x,
                       std::span<const std::uint16_t> weight, float eps, std::uint32_t rows,
                       std::uint32_t hidden, std::span<std::uint16_t> out);

/// residual[r, i] = round_t(residual[r, i] + x[r, i]) (sum in fp32), then
/// out[r] = rmsnorm of the rounded residual row, as rmsnorm_reference.
/// residual, x, out: [rows, hidden]; weight: [hidden]. Throws as rmsnorm.
void add_rmsnorm_reference(dtype t, std::span<std::uint16_t> residual,
                           std::span<const std::uint16_t> x, std::span<const std::uint16_t> weight,
                           float eps, std::uint32_t rows, std::uint32_t hidden,
                           std::span<std::uint16_t> out);

/// Rotary embeddings in place, HF's rotate-half over the leading
/// rotary_dim = 2 * inv_freq.size() elements of each head: for every head of
/// q ([rows, heads * head_dim]) and of k ([rows, kv_heads * head_dim]) and
/// i < rotary_dim / 2, (x[i], x[i + rotary_dim/2]) = rope_rotate(..., cs)
/// with cs = rope_angle(positions[r], inv_freq[i]) times `scale` (cos and
/// sin, fp32), each rounded once to t; the rest of the head is untouched.
/// positions: [rows]. Throws std::invalid_argument for an odd head_dim, no
/// frequencies or more than head_dim / 2, or a span too short.
void rope_reference(dtype t, std::span<std::uint16_t> q, std::span<std::uint16_t> k,
                    std::span<const std::int32_t> positions, std::span<const float> inv_freq,
                    std::uint32_t rows, std::uint32_t heads, std::uint32_t kv_heads,
                    std::uint32_t head_dim, float scale = 1.0f);

/// out[r, i] = round_t(silu_mul(gate_up[r, i], gate_up[r, inter + i])).
/// gate_up: [rows, 2 * inter]; out: [rows, inter]. Throws
/// std::invalid_argument when a span is too short.
void swiglu_reference(dtype t, std::span<const std::uint16_t> gate_up, std::uint32_t rows,
                      std::uint32_t inter, std::span<std::uint16_t> out);

/// x[r, i] = round_t(x[r, i] + bias[i]). x: [rows, cols]; bias: [cols].
/// Throws std::invalid_argument when a span is too short.
void add_bias_reference(dtype t, std::span<std::uint16_t> x, std::span<const std::uint16_t> bias,
                        std::uint32_t rows, std::uint32_t cols);

} // namespace troupe::gpu::cuda
