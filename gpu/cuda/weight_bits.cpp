#include "gpu/cuda/weight_bits.hpp"

#include <cstring>

namespace troupe::gpu::cuda {

namespace {

float stored_value(gpu::dtype type, const std::byte* at) noexcept {
  if (type == gpu::dtype::f32) {
    float f = 0;
    std::memcpy(&f, at, 4);
    return f;
  }
  std::uint16_t b = 0;
  std::memcpy(&b, at, 2);
  return type == gpu::dtype::f16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

} // namespace

std::vector<std::uint16_t> weight_bits(const tensor_view& t, dtype target) {
  const std::size_t width = t.type == gpu::dtype::f32 ? 4 : 2;
  const std::size_t n = t.data.size() / width;
  std::vector<std::uint16_t> out(n);
  const bool same = (t.type == gpu::dtype::f16 && target == dtype::f16) ||
                    (t.type == gpu::dtype::bf16 && target == dtype::bf16);
  if (same) {
    if (n > 0)
      std::memcpy(out.data(), t.data.data(), n * 2);
    return out;
  }
  for (std::size_t i = 0; i < n; ++i)
    out[i] = to_bits(target, stored_value(t.type, t.data.data() + i * width));
  return out;
}

} // namespace troupe::gpu::cuda
