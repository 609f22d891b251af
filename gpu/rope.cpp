// rope_inv_freq: HF's default inv_freq, then _compute_llama3_parameters,
// _compute_longrope_parameters, _compute_linear_scaling_rope_parameters or
// _compute_yarn_parameters, each step a float32 operation as torch does it;
// rope_for: a model's table.
#include "gpu/rope.hpp"

#include <algorithm>
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

// _compute_yarn_parameters from the default frequencies `extra`
// (1 / power): each pair's frequency blends the interpolated one
// (1 / (factor * power)) and `extra` by a ramp over the pairs between the
// correction range's ends (Python floats, their float32 casts meeting the
// float32 arange).
std::vector<float> yarn_blend(const std::vector<float>& extra, const std::vector<float>& power, std::uint32_t dim,
                              float theta, const rope_scaling& s) {
  // find_correction_dim: the pair index at which a pair turns `rotations`
  // times over the pretrained context (math.log in double).
  const double base = theta; // config.rope_theta, a Python float
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high)
    high += 0.001; // linear_ramp_factor's guard against a zero span
  const auto low_f = static_cast<float>(low), span = static_cast<float>(high - low);
  const auto factor = static_cast<float>(s.factor);
  std::vector<float> inv(extra.size());
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp; // inv_freq_extrapolation_factor
    const float interpolated = rdiv_f32(1.0f, factor * power[i]);
    const float a = interpolated * (1.0f - keep);
    const float b = extra[i] * keep;
    inv[i] = a + b;
  }
  return inv;
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
  if (scaling.type == "linear") {
    // _compute_linear_scaling_rope_parameters: inv_freq /= factor.
    const auto factor = static_cast<float>(scaling.factor);
    for (auto& f : inv)
      f /= factor;
    return inv;
  }
  if (scaling.type == "yarn")
    return yarn_blend(inv, power, dim, theta, scaling);
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
  }
  if (c.rope.type == "longrope" || c.rope.type == "yarn")
    t.scale = static_cast<float>(c.rope.attention_factor);
  return t;
}

} // namespace troupe::gpu
