// The adapter packer and page accessors: page sizes recovered from the
// layout, every element of every row back through shuffled pages (GQA and
// odd dimensions, pages with tails), zero rows where nothing is targeted,
// and the refusals with what they name.
#include "gpu/cuda/lora_pack.hpp"

#include "tests/gpu/cuda/lora_test_support.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <type_traits>

namespace troupe::gpu::cuda {
namespace {

using namespace lora_testing;

static_assert(std::is_trivially_copyable_v<lora_layout>);
static_assert(lora_proj_count == 4);

TEST(lora_layout_pages, rows_fill_the_pool_pages_of_real_and_test_models) {
  struct model {
    const char* name;
    kv_layout kv;
    std::uint32_t hidden, q_dim;
  };
  const model models[] = {
    {"llama-7b", {32, 32, 128, 16}, 4096, 4096},
    {"llama-3-8b", {32, 8, 128, 16}, 4096, 4096},
    {"llama-2-70b", {80, 8, 128, 16}, 8192, 8192},
    {"llama-3.2-3b (pages with a tail)", {28, 8, 128, 16}, 3072, 3072},
    {"qwen2-7b", {28, 4, 128, 16}, 3584, 3584},
    {"one-token pages", {32, 8, 128, 1}, 4096, 4096},
    {gqa.name, gqa.kv, gqa.hidden, gqa.q_dim},
    {odd.name, odd.kv, odd.hidden, odd.q_dim},
    {ragged.name, ragged.kv, ragged.hidden, ragged.q_dim},
    {wide.name, wide.kv, wide.hidden, wide.q_dim},
  };
  for (const auto& m : models) {
    SCOPED_TRACE(m.name);
    const auto l = lora_layout::make(m.kv, m.hidden, m.q_dim);
    ASSERT_GT(l.rows_per_page, 0u);
    EXPECT_EQ(l.page_elems, m.kv.page_elems());
    EXPECT_LE(std::uint64_t{l.rows_per_page} * l.row_width, l.page_elems);
    EXPECT_GT(std::uint64_t{l.rows_per_page + 1} * l.row_width, l.page_elems);
  }
  // The 3B model's pages really do end in a tail the rows leave unused.
  const auto l3b = lora_layout::make({28, 8, 128, 16}, 3072, 3072);
  EXPECT_LT(std::uint64_t{l3b.rows_per_page} * l3b.row_width, l3b.page_elems);
}

TEST(lora_layout_pages, a_page_that_holds_no_row_is_refused_by_the_packer) {
  const auto l = lora_layout::make({1, 1, 2, 1}, 64, 64); // 4-element pages, 64-wide rows
  EXPECT_EQ(l.rows_per_page, 0u);
  gpu::lora_adapter a;
  a.rank = 1;
  a.layers.resize(1);
  const auto r = pack_lora_adapter(a, l, dtype::f16);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find("hold no LoRA row"), std::string::npos) << std::get<std::string>(r);
}

// Every element of every row of `a` as packed into `p` at `r`'s pages.
void expect_round_trip(const gpu::lora_adapter& a, const lora_layout& l, dtype t,
                       const pool& p, const resident_adapter& r) {
  std::uint64_t mismatches = 0;
  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (std::uint32_t pi = 0; pi < lora_proj_count; ++pi) {
      const auto proj = static_cast<lora_proj>(pi);
      const std::uint32_t in = l.in_dim(proj);
      const std::uint32_t out = l.out_dim(proj);
      for (std::uint32_t j = 0; j < a.rank; ++j)
        for (std::uint32_t k = 0; k < l.row_width; ++k) {
          std::uint16_t want_a = 0;
          std::uint16_t want_b = 0;
          if (a.targets[pi]) {
            if (k < in)
              want_a = to_bits(t, a.layers[layer][pi].a[std::size_t{j} * in + k]);
            if (k < out)
              want_b = to_bits(t, a.layers[layer][pi].b[std::size_t{k} * a.rank + j]);
          }
          const auto got_a = lora_element(p.data, l, r.pages, a.rank, layer, proj, 0, j, k);
          const auto got_b = lora_element(p.data, l, r.pages, a.rank, layer, proj, 1, j, k);
          if (got_a != want_a || got_b != want_b) {
            if (++mismatches <= 5)
              ADD_FAILURE() << "layer " << layer << " proj " << pi << " j " << j << " k " << k
                            << ": A " << got_a << " want " << want_a << ", B " << got_b
                            << " want " << want_b;
          }
        }
    }
  EXPECT_EQ(mismatches, 0u);
}

TEST(pack_lora_adapter, every_element_comes_back_through_shuffled_pages) {
  for (const shape& s : {gqa, odd, ragged})
    for (dtype t : {dtype::f16, dtype::bf16}) {
      SCOPED_TRACE(std::string(s.name) + " " + std::string(to_string(t)));
      const auto l = s.layout();
      const std::vector<gpu::lora_adapter> adapters{random_adapter(l, 8, 2.0f, 1),
                                                    random_adapter(l, 5, 0.5f, 2),
                                                    random_adapter(l, 16, 1.0f, 3)};
      const auto p = make_pool(l, t, adapters, 7, 11);
      ASSERT_EQ(p.resident.size(), adapters.size());
      for (std::size_t i = 0; i < adapters.size(); ++i) {
        SCOPED_TRACE(i);
        expect_round_trip(adapters[i], l, t, p, p.resident[i]);
      }
    }
}

TEST(pack_lora_adapter, pages_are_whole_rows_then_a_zero_tail) {
  const auto l = odd.layout(); // 6 rows of 100 in pages of 640
  ASSERT_EQ(l.rows_per_page, 6u);
  const auto a = random_adapter(l, 8, 1.0f, 5);
  for (dtype t : {dtype::f16, dtype::bf16}) {
    auto packed = pack_lora_adapter(a, l, t);
    ASSERT_TRUE(std::holds_alternative<std::vector<std::uint16_t>>(packed))
      << std::get<std::string>(packed);
    const auto& bits = std::get<std::vector<std::uint16_t>>(packed);
    const std::uint64_t pe = l.page_elems;
    ASSERT_EQ(pe, 640u);
    ASSERT_EQ(bits.size(), l.pages(8) * pe);
    EXPECT_EQ(l.pages(8), (8u * 2 * 8 + 5) / 6); // 128 rows
    for (std::uint64_t page = 0; page < l.pages(8); ++page)
      for (std::uint64_t e = 600; e < pe; ++e)
        ASSERT_EQ(bits[page * pe + e], 0u) << "page " << page << " element " << e;
    // Row 0 is A_q's row 0 of layer 0; row 8 (page 1, second row) B_q's column 0.
    EXPECT_EQ(bits[3], to_bits(t, a.layers[0][0].a[3]));
    EXPECT_EQ(bits[pe + 2 * 100 + 4], to_bits(t, a.layers[0][0].b[4 * 8 + 0]));
  }
}

TEST(pack_lora_adapter, projections_not_targeted_are_zero_rows) {
  const auto l = gqa.layout();
  const auto a = random_adapter(l, 8, 1.0f, 9, {true, false, true, false}); // q and v
  const auto p = make_pool(l, dtype::bf16, std::vector{a}, 3, 4);
  ASSERT_EQ(p.resident.size(), 1u);
  expect_round_trip(a, l, dtype::bf16, p, p.resident[0]);
  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (auto proj : {lora_proj::k, lora_proj::o})
      for (std::uint32_t side = 0; side < 2; ++side)
        for (std::uint32_t j = 0; j < 8; ++j) {
          const auto at = lora_row_offset(l, p.page_elems, p.resident[0].pages, 8, layer, proj,
                                          side, j);
          for (std::uint32_t k = 0; k < l.row_width; ++k)
            ASSERT_EQ(p.data[at + k], 0u);
        }
}

TEST(pack_lora_adapter, gqa_rows_use_the_projection_s_own_width) {
  const auto l = gqa.layout(); // hidden 1024, q 1024, kv 256
  const auto a = random_adapter(l, 4, 1.0f, 21);
  const auto p = make_pool(l, dtype::f16, std::vector{a}, 1, 2);
  const auto& pages = p.resident[0].pages;
  for (auto proj : {lora_proj::k, lora_proj::v}) {
    // B^T rows of k and v hold kv_dim values, then zeros; their A rows hidden values.
    EXPECT_NE(lora_element(p.data, l, pages, 4, 1, proj, 1, 3, 255), 0u);
    EXPECT_EQ(lora_element(p.data, l, pages, 4, 1, proj, 1, 3, 256), 0u);
    EXPECT_NE(lora_element(p.data, l, pages, 4, 1, proj, 0, 3, 1023), 0u);
  }
  const auto l2 = lora_layout::make({2, 2, 64, 4}, 96, 128); // q_dim wider than hidden
  const auto a2 = random_adapter(l2, 4, 1.0f, 22);
  const auto p2 = make_pool(l2, dtype::f16, std::vector{a2}, 1, 3);
  expect_round_trip(a2, l2, dtype::f16, p2, p2.resident[0]);
  EXPECT_EQ(l2.in_dim(lora_proj::o), 128u);
  EXPECT_NE(lora_element(p2.data, l2, p2.resident[0].pages, 4, 0, lora_proj::o, 0, 0, 127), 0u);
  EXPECT_EQ(lora_element(p2.data, l2, p2.resident[0].pages, 4, 0, lora_proj::o, 1, 0, 96), 0u);
}

TEST(pack_lora_adapter, refuses_mlp_targets_naming_the_module) {
  const auto l = gqa.layout();
  const std::pair<lora_target, const char*> mlp[] = {
    {lora_target::gate, "gate_proj"}, {lora_target::up, "up_proj"}, {lora_target::down, "down_proj"}};
  for (const auto& [target, name] : mlp) {
    auto a = random_adapter(l, 8, 1.0f, 1);
    a.targets[static_cast<std::size_t>(target)] = true;
    const auto r = pack_lora_adapter(a, l, dtype::f16);
    ASSERT_TRUE(std::holds_alternative<std::string>(r)) << name;
    const auto& why = std::get<std::string>(r);
    EXPECT_NE(why.find(name), std::string::npos) << why;
    EXPECT_NE(why.find("q_proj, k_proj, v_proj and o_proj only"), std::string::npos) << why;
  }
}

std::string refusal(const gpu::lora_adapter& a, const lora_layout& l, dtype t = dtype::f16) {
  auto r = pack_lora_adapter(a, l, t);
  if (auto* why = std::get_if<std::string>(&r))
    return *why;
  return "(packed)";
}

TEST(pack_lora_adapter, refuses_shapes_that_do_not_fit_the_model) {
  const auto l = gqa.layout();
  auto a = random_adapter(l, 8, 1.0f, 1);
  auto fewer = a;
  fewer.layers.pop_back();
  EXPECT_EQ(refusal(fewer, l), "adapter has 1 layers, the model 2");
  auto short_a = a;
  short_a.layers[1][1].a.pop_back();
  EXPECT_EQ(refusal(short_a, l),
            "layer 1 k_proj lora_A has 8191 elements, rank 8 x 1024 expected");
  auto wrong_b = a;
  wrong_b.layers[0][3].b.resize(256 * 8); // o's B is [hidden, r]
  EXPECT_EQ(refusal(wrong_b, l), "layer 0 o_proj lora_B has 2048 elements, 1024 x rank 8 expected");
  auto rank0 = a;
  rank0.rank = 0;
  EXPECT_EQ(refusal(rank0, l), "adapter has rank 0");
  const auto unusable = lora_layout::make({1, 1, 2, 1}, 64, 64); // 4-element pages
  EXPECT_EQ(refusal(random_adapter(unusable, 2, 1.0f, 1), unusable),
            "pool pages of 4 elements hold no LoRA row of 64");
}

TEST(pack_lora_adapter, refuses_weights_the_type_cannot_hold) {
  const auto l = odd.layout();
  auto a = random_adapter(l, 2, 1.0f, 1);
  a.layers[1][2].b[5] = 1.0e5f; // past fp16's 65504, fine in bf16
  const auto why = refusal(a, l, dtype::f16);
  EXPECT_NE(why.find("layer 1 v_proj lora_B"), std::string::npos) << why;
  EXPECT_NE(why.find("not finite in fp16"), std::string::npos) << why;
  EXPECT_EQ(refusal(a, l, dtype::bf16), "(packed)");
  a.layers[0][0].a[0] = std::nanf("");
  EXPECT_NE(refusal(a, l, dtype::bf16).find("layer 0 q_proj lora_A"), std::string::npos);
}

TEST(lora_row_offset, finds_rows_through_the_page_list) {
  const auto l = gqa.layout(); // 4 rows a page of 4096
  const std::vector<std::uint32_t> pages{9, 2, 7, 5, 30, 31, 32, 33};
  // rank 2: (layer 0, k, B, j 1) is row ((0 * 4 + 1) * 2 + 1) * 2 + 1 = 7,
  // the last row of the adapter's second page.
  EXPECT_EQ(lora_row_offset(l, 4096, pages, 2, 0, lora_proj::k, 1, 1), 2u * 4096 + 3 * 1024);
  EXPECT_EQ(lora_row_offset(l, 4096, pages, 2, 0, lora_proj::q, 0, 0), 9u * 4096);
  // (layer 1, o, B, j 1) is row 31 of 32: page 7 of the list.
  EXPECT_EQ(lora_row_offset(l, 4096, pages, 2, 1, lora_proj::o, 1, 1), 33u * 4096 + 3 * 1024);
  EXPECT_THROW(lora_row_offset(l, 4096, std::span(pages).first(7), 2, 1, lora_proj::o, 1, 1),
               std::out_of_range);
  const std::vector<std::uint16_t> small_pool(4096 * 8);
  EXPECT_THROW(lora_element(small_pool, l, pages, 2, 0, lora_proj::q, 0, 0, 0), std::out_of_range);
  EXPECT_THROW(lora_element(small_pool, l, pages, 2, 0, lora_proj::k, 1, 1, 1024),
               std::out_of_range);
}

} // namespace
} // namespace troupe::gpu::cuda
