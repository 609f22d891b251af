// weight_bits: a checkpoint's tensor in the CUDA backend's type. The stored
// bits where the types agree (NaN payloads and infinities included), else
// each value rounded to nearest even exactly as set_weight rounds fp32.
#include "gpu/cuda/weight_bits.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

template <class T>
tensor_view view_of(const std::vector<T>& values, gpu::dtype type) {
  tensor_view t;
  t.type = type;
  t.shape = {values.size()};
  t.data = std::as_bytes(std::span{values});
  return t;
}

TEST(weight_bits, the_stored_bits_where_the_types_agree) {
  const std::vector<std::uint16_t> f16{0x3c00, 0x7c00, 0xfc00, 0x7e01, 0x0001, 0x8000, 0x3555};
  EXPECT_EQ(weight_bits(view_of(f16, gpu::dtype::f16), dtype::f16), f16);
  const std::vector<std::uint16_t> bf16{0x3f80, 0x7f80, 0xff80, 0x7fc1, 0x0001, 0x8000, 0x3eab};
  EXPECT_EQ(weight_bits(view_of(bf16, gpu::dtype::bf16), dtype::bf16), bf16);
  EXPECT_TRUE(weight_bits(view_of(std::vector<std::uint16_t>{}, gpu::dtype::f16), dtype::bf16).empty());
}

TEST(weight_bits, fp32_rounds_to_nearest_even_as_set_weight_does) {
  const std::vector<float> f32{1.0f,
                               1.0f + 0x1.0p-11f,               // f16 tie: stays 1 (even)
                               1.0f + 3 * 0x1.0p-11f,           // f16 tie: up to the even 1 + 2^-9
                               65520.0f,                        // f16: inf
                               1.0f + 0x1.0p-8f,                // bf16 tie: stays 1
                               -0.0f,
                               1e-8f,                           // f16: subnormal range
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               0.3333333f};
  for (const dtype target : {dtype::f16, dtype::bf16}) {
    SCOPED_TRACE(target == dtype::f16 ? "to fp16" : "to bf16");
    const auto got = weight_bits(view_of(f32, gpu::dtype::f32), target);
    ASSERT_EQ(got.size(), f32.size());
    for (std::size_t i = 0; i < f32.size(); ++i)
      EXPECT_EQ(got[i], to_bits(target, f32[i])) << i;
  }
  const auto f16 = weight_bits(view_of(f32, gpu::dtype::f32), dtype::f16);
  EXPECT_EQ(f16[1], 0x3c00);
  EXPECT_EQ(f16[2], 0x3c02);
  EXPECT_EQ(f16[3], 0x7c00);
  EXPECT_EQ(weight_bits(view_of(f32, gpu::dtype::f32), dtype::bf16)[4], 0x3f80);
}

TEST(weight_bits, one_16_bit_type_to_the_other_goes_through_its_exact_fp32_value) {
  const std::vector<std::uint16_t> bf16{0x3eab, 0x4780, 0x3380, 0xbf80}; // ~1/3, 65536, ~6e-8, -1
  const auto f16 = weight_bits(view_of(bf16, gpu::dtype::bf16), dtype::f16);
  for (std::size_t i = 0; i < bf16.size(); ++i)
    EXPECT_EQ(f16[i], to_bits(dtype::f16, bf16_bits_to_f32(bf16[i]))) << i;
  EXPECT_EQ(f16[1], 0x7c00); // 65536 is past fp16's range
  EXPECT_EQ(f16[3], 0xbc00);
  const std::vector<std::uint16_t> half{0x3555, 0x0001, 0x7bff};
  const auto b = weight_bits(view_of(half, gpu::dtype::f16), dtype::bf16);
  for (std::size_t i = 0; i < half.size(); ++i)
    EXPECT_EQ(b[i], to_bits(dtype::bf16, f16_bits_to_f32(half[i]))) << i;
}

} // namespace
} // namespace troupe::gpu::cuda
