// Rotary embedding frequencies as Hugging Face computes them; one
// definition for the cpu model, the CUDA model and the kernels' references.
#pragma once

#include "gpu/llama_config.hpp"

#include <cstdint>
#include <vector>

namespace troupe::gpu {

/// Hugging Face's inv_freq over `dim` rotary elements: 1 / theta^(2i / dim)
/// for i < dim / 2, then
/// - scaling.type "llama3": _compute_llama3_parameters (wavelengths longer
///   than original_max / low_freq_factor divided by factor, shorter than
///   original_max / high_freq_factor kept, smoothly blended between);
/// - "longrope": _compute_longrope_parameters, each divided by its
///   long_factor where `long_factors`, else by its short_factor;
/// - "linear": each divided by factor;
/// - "yarn": _compute_yarn_parameters (pairs turning more than beta_fast
///   times over the pretrained context kept, fewer than beta_slow times
///   divided by factor, linearly blended between);
/// any other type unscaled. Each step is the float32 operation torch does
/// (the exponent 2i / dim rounded, the power rounded, `1 / x` a reciprocal,
/// a Python scalar cast to float32), so the table is transformers' to the
/// bit but where torch's float32 pow is not correctly rounded: at 128K
/// positions a few ulps of inv_freq turn a pair by up to 0.008 radian.
/// Throws std::invalid_argument for an odd or zero dim, or longrope factor
/// lists not dim / 2 long.
std::vector<float> rope_inv_freq(std::uint32_t dim, float theta, const rope_scaling& scaling,
                                 bool long_factors = false);

/// One model's rotary embedding: the leading rotary_dim() elements of each
/// head of q and k turn, pairs (i, i + rotary_dim() / 2) at angle
/// position * inv_freq[i], with cos and sin multiplied by `scale`
/// (LongRoPE's or YaRN's attention factor; 1 otherwise); the rest of the head passes
/// through. LongRoPE has two sets of frequencies: as Hugging Face, a pass
/// after which the sequence holds more than `long_after` tokens turns by
/// long_inv_freq, a shorter one by inv_freq. A cache turned by one set is
/// not read by a pass of the other: the server recomputes a sequence that
/// grows past long_after, as Hugging Face's generate() does.
struct rope_table {
  std::vector<float> inv_freq;      ///< [rotary_dim / 2]; LongRoPE's short factors'
  std::vector<float> long_inv_freq; ///< [rotary_dim / 2]: LongRoPE's long factors'; else empty
  float scale = 1.0f;
  std::uint32_t long_after = 0; ///< LongRoPE's original_max_position_embeddings; 0: one set
  std::uint32_t rotary_dim() const noexcept { return static_cast<std::uint32_t>(2 * inv_freq.size()); }
  /// The frequencies of a pass after which its sequence holds `length` tokens.
  const std::vector<float>& for_length(std::uint64_t length) const noexcept {
    return long_after != 0 && length > long_after ? long_inv_freq : inv_freq;
  }
};

/// The table of `c`: its rotary_dims(), theta and scaling.
rope_table rope_for(const llama_config& c);

} // namespace troupe::gpu
