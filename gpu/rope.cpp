// rope_inv_freq: HF's default inv_freq, then _compute_llama3_parameters.
#include "gpu/rope.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::gpu {

std::vector<float> rope_inv_freq(std::uint32_t head_dim, float theta,
                                 const rope_scaling& scaling) {
  if (head_dim == 0 || head_dim % 2 != 0)
    throw std::invalid_argument("rope_inv_freq: head_dim " + std::to_string(head_dim) + " is not even");
  const std::uint32_t half = head_dim / 2;
  std::vector<float> inv(half);
  for (std::uint32_t i = 0; i < half; ++i) {
    const double e = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    inv[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(theta), e));
  }
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

} // namespace troupe::gpu
