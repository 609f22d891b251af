// Rotary embedding frequencies as Hugging Face's Llama computes them; one
// definition for the cpu model, the CUDA model and the kernels' references.
#pragma once

#include "gpu/llama_config.hpp"

#include <cstdint>
#include <vector>

namespace troupe::gpu {

/// Hugging Face's inv_freq for Llama: 1 / theta^(2i / head_dim) for
/// i < head_dim / 2 (computed in double, rounded to fp32), then, for
/// scaling.type "llama3", _compute_llama3_parameters (wavelengths longer than
/// original_max / low_freq_factor divided by factor, shorter than
/// original_max / high_freq_factor kept, smoothly blended between). Any
/// other type is unscaled. Throws std::invalid_argument for an odd or zero
/// head_dim.
std::vector<float> rope_inv_freq(std::uint32_t head_dim, float theta,
                                 const rope_scaling& scaling);

} // namespace troupe::gpu
