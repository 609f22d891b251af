// The element types of the CUDA backend (fp16, bf16) and their host-side
// conversions, written without CUDA headers so the CPU references and the
// planning code build everywhere. Rounding is to nearest, ties to even, as
// __float2half_rn and __float2bfloat16_rn do on the device.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

namespace troupe::gpu::cuda {

enum class dtype : std::uint8_t { f16, bf16 };

constexpr std::string_view to_string(dtype t) noexcept { return t == dtype::f16 ? "fp16" : "bf16"; }
constexpr std::uint32_t dtype_bytes(dtype) noexcept { return 2; }

/// fp32 -> IEEE binary16 bits, round to nearest even; overflow gives inf, NaN stays NaN.
constexpr std::uint16_t f32_to_f16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) // inf or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) // rounds to >= 65520: inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) { // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) // below half the smallest subnormal: zero
      return static_cast<std::uint16_t>(sign);
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - (abs >> 23); // 14..24
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u)))
      ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = ((abs >> 13) - (112u << 10)); // rebias 127 -> 15
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
    ++half; // may carry into the exponent, which is right
  return static_cast<std::uint16_t>(sign | half);
}

constexpr float f16_bits_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return std::bit_cast<float>(sign);
    std::uint32_t e = 113; // 127 - 15 + 1
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// fp32 -> bfloat16 bits, round to nearest even; NaN stays NaN.
constexpr std::uint16_t f32_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bf16_bits_to_f32(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

constexpr std::uint16_t to_bits(dtype t, float f) noexcept {
  return t == dtype::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
}
constexpr float from_bits(dtype t, std::uint16_t b) noexcept {
  return t == dtype::f16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}
/// `f` as the nearest value of type `t` holds.
constexpr float round_to(dtype t, float f) noexcept { return from_bits(t, to_bits(t, f)); }

} // namespace troupe::gpu::cuda
