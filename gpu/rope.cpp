// rope_inv_freq: HF's default inv_freq, then _compute_llama3_parameters or
// _compute_longrope_parameters; rope_for: a model's table.
#include "gpu/rope.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::gpu {

std::vector<float> rope_inv_freq(std::uint32_t dim, float theta, const rope_scaling& scaling,
                                 bool long_factors) {
  if (dim == 0 || dim % 2 != 0)
    throw std::invalid_argument("rope_inv_freq: rotary dim " + std::to_string(dim) + " is not even");
  const std::uint32_t half = dim / 2;
  std::vector<double> base(half);
  for (std::uint32_t i = 0; i < half; ++i) {
    const double e = static_cast<double>(2 * i) / static_cast<double>(dim);
    base[i] = 1.0 / std::pow(static_cast<double>(theta), e);
  }
  std::vector<float> inv(half);
  if (scaling.type == "longrope") {
    const auto& ext = long_factors ? scaling.long_factor : scaling.short_factor;
    if (ext.size() != half)
      throw std::invalid_argument("rope_inv_freq: " + std::to_string(ext.size()) + " longrope factors for " +
                                  std::to_string(half) + " rotary pairs");
    for (std::uint32_t i = 0; i < half; ++i)
      inv[i] = static_cast<float>(base[i] / ext[i]);
    return inv;
  }
  for (std::uint32_t i = 0; i < half; ++i)
    inv[i] = static_cast<float>(base[i]);
  if (scaling.type != "llama3")
    return inv;
  const double factor = scaling.factor;
  const double low = scaling.low_freq_factor;
  const double high = scaling.high_freq_factor;
  const double orig = scaling.original_max_position_embeddings;
  const double low_wavelen = orig / low;
  const double high_wavelen = orig / high;
  for (auto& f : inv) {
    const double freq = f;
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double out = freq; // wavelen < high_wavelen: kept
    if (wavelen > low_wavelen) {
      out = freq / factor;
    } else if (!(wavelen < high_wavelen)) {
      const double smooth = (orig / wavelen - low) / (high - low);
      out = (1.0 - smooth) * freq / factor + smooth * freq;
    }
    f = static_cast<float>(out);
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
