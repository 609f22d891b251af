// rope_inv_freq: HF's default inv_freq, then _compute_llama3_parameters or
// _compute_longrope_parameters, each step a float32 operation as torch does
// it; rope_for: a model's table.
#include "gpu/rope.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::gpu {

namespace {

// torch's float32 pow of a Python scalar base: the base is cast to float32,
// and the power rounded once to float32.
float pow_f32(float base, float e) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
}

// `scalar / tensor` in torch is tensor.reciprocal() * scalar (Tensor's
// __rtruediv__), the scalar cast to float32: two roundings.
float rdiv_f32(float scalar, float x) {
  const float r = 1.0f / x;
  return r * scalar;
}

} // namespace

std::vector<float> rope_inv_freq(std::uint32_t dim, float theta, const rope_scaling& scaling,
                                 bool long_factors) {
  if (dim == 0 || dim % 2 != 0)
    throw std::invalid_argument("rope_inv_freq: rotary dim " + std::to_string(dim) + " is not even");
  const std::uint32_t half = dim / 2;
  // base ** (arange(0, dim, 2).float() / dim), in float32.
  std::vector<float> power(half);
  for (std::uint32_t i = 0; i < half; ++i)
    power[i] = pow_f32(theta, static_cast<float>(2 * i) / static_cast<float>(dim));
  std::vector<float> inv(half);
  if (scaling.type == "longrope") {
    // 1.0 / (ext_factors * base ** ...), ext_factors a float32 tensor.
    const auto& ext = long_factors ? scaling.long_factor : scaling.short_factor;
    if (ext.size() != half)
      throw std::invalid_argument("rope_inv_freq: " + std::to_string(ext.size()) + " longrope factors for " +
                                  std::to_string(half) + " rotary pairs");
    for (std::uint32_t i = 0; i < half; ++i)
      inv[i] = rdiv_f32(1.0f, static_cast<float>(ext[i]) * power[i]);
    return inv;
  }
  for (std::uint32_t i = 0; i < half; ++i)
    inv[i] = rdiv_f32(1.0f, power[i]);
  if (scaling.type != "llama3")
    return inv;
  // _compute_llama3_parameters, op by op: Python floats meet float32
  // tensors as float32; `a * b / c` is (a * b) / c.
  const auto factor = static_cast<float>(scaling.factor);
  const auto low = static_cast<float>(scaling.low_freq_factor);
  const auto span = static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor); // Python floats
  const auto orig = static_cast<float>(scaling.original_max_position_embeddings);
  const auto low_wavelen = static_cast<float>(scaling.original_max_position_embeddings / scaling.low_freq_factor);
  const auto high_wavelen = static_cast<float>(scaling.original_max_position_embeddings / scaling.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (auto& f : inv) {
    const float freq = f;
    const float wavelen = rdiv_f32(two_pi, freq);
    const float scaled = wavelen > low_wavelen ? freq / factor : freq;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = (rdiv_f32(orig, wavelen) - low) / span;
      const float kept = (1.0f - smooth) * scaled / factor;
      f = kept + smooth * scaled;
    } else {
      f = scaled;
    }
  }
  return inv;
}

rope_table rope_for(const llama_config& c) {
  rope_table t;
  t.inv_freq = rope_inv_freq(c.rotary_dims(), c.rope_theta, c.rope);
  if (c.rope_long_after() != 0) {
    t.long_inv_freq = rope_inv_freq(c.rotary_dims(), c.rope_theta, c.rope, true);
    t.long_after = c.rope_long_after();
    t.scale = static_cast<float>(c.rope.attention_factor);
  }
  return t;
}

} // namespace troupe::gpu
