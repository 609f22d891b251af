// Rotary embedding frequencies as Hugging Face computes them; one
// definition for the cpu model, the CUDA model and the kernels' references.
#pragma once

#include "gpu/llama_config.hpp"

#include <cstdint>
#include <vector>

namespace troupe::gpu {

/// Hugging Face's inv_freq over `dim` rotary elements: 1 / theta^(2i / dim)
/// for i < dim / 2 (computed in double, rounded to fp32), then
/// - scaling.type "llama3": _compute_llama3_parameters (wavelengths longer
///   than original_max / low_freq_factor divided by factor, shorter than
///   original_max / high_freq_factor kept, smoothly blended between);
/// - "longrope": _compute_longrope_parameters, each divided by its
///   long_factor where `long_factors`, else by its short_factor (double,
///   then rounded);
/// any other type unscaled. Throws std::invalid_argument for an odd or zero
/// dim, or longrope factor lists not dim / 2 long.
std::vector<float> rope_inv_freq(std::uint32_t dim, float theta, const rope_scaling& scaling,
                                 bool long_factors = false);

/// One model's rotary embedding: the leading rotary_dim() elements of each
/// head of q and k turn, pairs (i, i + rotary_dim() / 2) at angle
/// position * inv_freq[i], with cos and sin multiplied by `scale`
/// (LongRoPE's attention factor; 1 otherwise); the rest of the head passes
/// through.
struct rope_table {
  std::vector<float> inv_freq; ///< [rotary_dim / 2]
  float scale = 1.0f;
  std::uint32_t rotary_dim() const noexcept { return static_cast<std::uint32_t>(2 * inv_freq.size()); }
};

/// The table `c` runs with: its rotary_dims(), theta and scaling. LongRoPE
/// takes its long factors where the deployment's sequences may pass the
/// pretrained context (c.serving_context, else max_position_embeddings,
/// above rope.original_max_position_embeddings), else its short ones:
/// Hugging Face's choice for a sequence of that length, made once for
/// every sequence so that no cache is turned two ways.
rope_table rope_for(const llama_config& c);

} // namespace troupe::gpu
