// The LoRA references on values worked out by hand: which entries they
// write and leave alone, mixed ranks, tmp kept in fp32, scale applied in
// fp32 and y rounded once; and their refusals of spans that are too short.
#include "gpu/cuda/reference_lora.hpp"

#include "gpu/cuda/lora_pack.hpp"
#include "tests/gpu/cuda/lora_test_support.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <stdexcept>

namespace troupe::gpu::cuda {
namespace {

using namespace lora_testing;

// One layer, 4-wide everything: pages of 16 elements hold 4 rows.
constexpr shape tiny{"tiny", {.num_layers = 1, .num_kv_heads = 1, .head_dim = 4, .page_tokens = 2},
                     4, 4};

gpu::lora_adapter q_only(std::uint32_t rank, float scale, std::vector<float> a,
                         std::vector<float> b) {
  gpu::lora_adapter ad;
  ad.rank = rank;
  ad.scale = scale;
  ad.targets[0] = true;
  ad.layers.resize(1);
  ad.layers[0][0].a = std::move(a);
  ad.layers[0][0].b = std::move(b);
  return ad;
}

constexpr float sentinel = -12345.0f;

TEST(lora_reference, writes_adapter_rows_only_and_ranks_only) {
  const auto l = tiny.layout();
  ASSERT_EQ(l.page_elems, 16u);
  for (dtype t : {dtype::f16, dtype::bf16}) {
    SCOPED_TRACE(std::string(to_string(t)));
    // Adapter 0, rank 1: A = [1 2 .5 -1], B = [1 .5 -2 .25]^T, scale 2.
    // Adapter 1, rank 2: A = [[1 0 0 0], [0 0 0 -2]], B = [[1 0] [0 1] [1 1] [0 0]], scale .5.
    const std::vector<gpu::lora_adapter> adapters{
      q_only(1, 2.0f, {1, 2, 0.5f, -1}, {1, 0.5f, -2, 0.25f}),
      q_only(2, 0.5f, {1, 0, 0, 0, 0, 0, 0, -2}, {1, 0, 0, 1, 1, 1, 0, 0})};
    const auto p = make_pool(l, t, adapters, 3, 7);
    const std::vector<step_entry> batch{lora_entry(p, 1, 1, 0, 1, 2), lora_entry(p, 2, -1, 3, 1, 2),
                                        lora_entry(p, 3, 0, 0, 1, 2)};
    const auto plan = plan_for(p, tiny.kv, batch);
    // Rows: base model (entry 1), adapter 1 (entry 0), adapter 0 (entry 2).
    ASSERT_EQ(plan.row_lora, (std::vector<std::int32_t>{-1, 0, 1}));
    ASSERT_EQ(plan.max_rank, 2u);
    const float xs[3][4] = {{7, 7, 7, 7}, {3, 1, 1, 0.5f}, {1, 1, 2, -1}};
    std::vector<std::uint16_t> x;
    for (const auto& row : xs)
      for (float v : row)
        x.push_back(to_bits(t, v));
    std::vector<float> tmp(3 * 2, sentinel);
    lora_shrink_reference(t, plan, l, 0, lora_proj::q, x, p.data, tmp);
    // Row 1 (rank 2): [3, -1]; row 2 (rank 1): [1 + 2 + 1 + 1] and j = 1 left alone.
    EXPECT_EQ(tmp, (std::vector<float>{sentinel, sentinel, 3, -1, 5, sentinel}));

    const float ys[3][4] = {{9, 9, 9, 9}, {0, 0, 0, 0}, {0.5f, -1, 3, 0}};
    std::vector<std::uint16_t> y;
    for (const auto& row : ys)
      for (float v : row)
        y.push_back(to_bits(t, v));
    const auto y0 = y;
    lora_expand_reference(t, plan, l, 0, lora_proj::q, tmp, p.data, y);
    // Row 1: .5 * [3, -1, 2, 0]; row 2: [.5, -1, 3, 0] + 2 * 5 * [1, .5, -2, .25].
    const float want[3][4] = {{9, 9, 9, 9}, {1.5f, -0.5f, 1, 0}, {10.5f, 4, -17, 2.5f}};
    for (std::uint32_t r = 0; r < 3; ++r)
      for (std::uint32_t o = 0; o < 4; ++o)
        EXPECT_EQ(from_bits(t, y[r * 4 + o]), want[r][o]) << "row " << r << " out " << o;
    EXPECT_TRUE(std::equal(y.begin(), y.begin() + 4, y0.begin())); // base row: the same bits
    // Other layers' and projections' rows are zero: k's delta is nothing.
    auto yk = y0;
    auto tk = std::vector<float>(6, sentinel);
    lora_shrink_reference(t, plan, l, 0, lora_proj::k, x, p.data, tk);
    EXPECT_EQ(tk, (std::vector<float>{sentinel, sentinel, 0, 0, 0, sentinel}));
    lora_expand_reference(t, plan, l, 0, lora_proj::k, tk, p.data, yk);
    EXPECT_EQ(yk, y0);
  }
}

TEST(lora_reference, tmp_stays_fp32_and_y_is_rounded_once) {
  const auto l = tiny.layout();
  // A = [1, 2^-10, 0, 0], x = [1, 2^-10, 0, 0]: tmp = 1 + 2^-20, which no
  // 16-bit type holds. B = [1, 0, 0, 0]^T and scale (2^-11 + 2^-22) / tmp
  // in fp32 make y0 + delta = 1 + 2^-11 + 2^-22 (to within fp32): rounded
  // once to fp16 it is 1 + 2^-10; had delta been rounded to fp16 first
  // (2^-11, ties to even) y would tie back to 1.
  const float tmp_want = 1.0f + 0x1p-20f;
  const float scale = (0x1p-11f + 0x1p-22f) / tmp_want;
  const std::vector<gpu::lora_adapter> adapters{
    q_only(1, scale, {1, 0x1p-10f, 0, 0}, {1, 0, 0, 0})};
  const auto p = make_pool(l, dtype::f16, adapters, 1, 3);
  const std::vector<step_entry> batch{lora_entry(p, 1, 0, 0, 1, 2)};
  const auto plan = plan_for(p, tiny.kv, batch);
  const std::vector<std::uint16_t> x{to_bits(dtype::f16, 1), to_bits(dtype::f16, 0x1p-10f), 0, 0};
  std::vector<float> tmp(1, sentinel);
  lora_shrink_reference(dtype::f16, plan, l, 0, lora_proj::q, x, p.data, tmp);
  EXPECT_EQ(tmp[0], tmp_want);
  std::vector<std::uint16_t> y(4, to_bits(dtype::f16, 1.0f));
  lora_expand_reference(dtype::f16, plan, l, 0, lora_proj::q, tmp, p.data, y);
  EXPECT_EQ(from_bits(dtype::f16, y[0]), 1.0f + 0x1p-10f);
  EXPECT_EQ(from_bits(dtype::f16, y[1]), 1.0f); // delta 0: y unchanged
}

TEST(lora_reference, refuses_short_spans_and_pages_outside_the_pool) {
  const auto l = tiny.layout();
  const std::vector<gpu::lora_adapter> adapters{q_only(1, 1.0f, {1, 1, 1, 1}, {1, 1, 1, 1})};
  const auto p = make_pool(l, dtype::bf16, adapters, 1, 3);
  const std::vector<step_entry> batch{lora_entry(p, 1, 0, 0, 2, 2)};
  const auto plan = plan_for(p, tiny.kv, batch);
  std::vector<std::uint16_t> x(8, 0);
  std::vector<std::uint16_t> y(8, 0);
  std::vector<float> tmp(2, 0);
  const auto t = dtype::bf16;
  EXPECT_THROW(lora_shrink_reference(t, plan, l, 0, lora_proj::q, std::span(x).first(7), p.data,
                                     tmp),
               std::invalid_argument);
  EXPECT_THROW(lora_shrink_reference(t, plan, l, 0, lora_proj::q, x, p.data,
                                     std::span(tmp).first(1)),
               std::invalid_argument);
  EXPECT_THROW(lora_expand_reference(t, plan, l, 0, lora_proj::q, tmp, p.data,
                                     std::span(y).first(7)),
               std::invalid_argument);
  auto outside = plan;
  outside.lora_pages[0] = static_cast<std::uint32_t>(p.pages); // one past the pool
  EXPECT_THROW(lora_shrink_reference(t, outside, l, 0, lora_proj::q, x, p.data, tmp),
               std::out_of_range);
  auto broken = plan;
  broken.lora_pages.pop_back();
  EXPECT_THROW(lora_shrink_reference(t, broken, l, 0, lora_proj::q, x, p.data, tmp),
               std::out_of_range);
  const auto no_row = lora_layout::make({1, 1, 2, 1}, 64, 64); // 4-element pages
  EXPECT_THROW(lora_shrink_reference(t, plan, no_row, 0, lora_proj::q, x, p.data, tmp),
               std::invalid_argument);
}

} // namespace
} // namespace troupe::gpu::cuda
