// plan_batch and the page layouts: rows, page tables, LoRA grouping and
// segments, attention tiles and items, logit adjustments, and rejected
// entries.
#include "gpu/cuda/plan.hpp"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace troupe::gpu::cuda {
namespace {

constexpr kv_layout small_kv{.num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .page_tokens = 4};

step_entry entry(std::uint64_t id, std::uint32_t context, std::uint32_t new_tokens,
                 std::vector<std::uint32_t> pages, std::uint32_t adapter = 0,
                 std::uint32_t rank = 0) {
  step_entry e;
  e.request_id = id;
  e.adapter_id = adapter;
  e.adapter_rank = rank;
  e.context_tokens = context;
  e.new_tokens = new_tokens;
  e.output_index = context == 0 ? 0 : 3;
  e.seed = 100 + id;
  e.temperature = 0.5f;
  for (std::uint32_t t = 0; t < new_tokens; ++t)
    e.tokens.push_back(static_cast<std::int32_t>((id * 7 + t) % 50));
  e.pages = std::move(pages);
  return e;
}

struct fixture {
  std::map<std::uint32_t, resident_adapter> adapters;
  plan_inputs in;
  fixture() {
    in.kv = small_kv;
    in.vocab_size = 50;
    in.pool_pages = 64;
    in.adapter = [this](std::uint32_t id) -> const resident_adapter* {
      auto it = adapters.find(id);
      return it == adapters.end() ? nullptr : &it->second;
    };
    adapters[7] = {8, 2.0f, {40, 41}};
    adapters[9] = {16, 1.0f, {50, 51, 52, 53}};
  }
};

TEST(kv_layout, pages_hold_layers_then_k_and_v_then_slots) {
  const kv_layout kv = small_kv;
  EXPECT_EQ(kv.kv_dim(), 8u);
  EXPECT_EQ(kv.layer_elems(), 2u * 4 * 8);
  EXPECT_EQ(kv.page_elems(), 2u * 2 * 4 * 8);
  EXPECT_EQ(kv.offset(0, 0, 0, 0), 0u);
  EXPECT_EQ(kv.offset(0, 0, 1, 0), 32u);     // V after the page's K slots
  EXPECT_EQ(kv.offset(0, 1, 0, 2), 64u + 16); // second layer, slot 2
  EXPECT_EQ(kv.offset(3, 1, 1, 3), 3 * 128u + 64 + 32 + 24);
}

TEST(lora_layout, rows_fill_pages_whole_and_dims_follow_the_projection) {
  // GQA: q_dim 16, kv_dim 8, hidden 12.
  const kv_layout kv{.num_layers = 3, .num_kv_heads = 2, .head_dim = 4, .page_tokens = 2};
  const auto l = lora_layout::make(kv, 12, 16);
  EXPECT_EQ(l.row_width, 16u);
  EXPECT_EQ(l.rows_per_page, kv.page_elems() / 16); // 96 / 16
  EXPECT_EQ(l.in_dim(lora_proj::q), 12u);
  EXPECT_EQ(l.in_dim(lora_proj::o), 16u);
  EXPECT_EQ(l.out_dim(lora_proj::q), 16u);
  EXPECT_EQ(l.out_dim(lora_proj::k), 8u);
  EXPECT_EQ(l.out_dim(lora_proj::v), 8u);
  EXPECT_EQ(l.out_dim(lora_proj::o), 12u);
  EXPECT_EQ(l.rows(4), 8u * 3 * 4);
  EXPECT_EQ(l.pages(4), (96u + 5) / 6);
  // Rows are layer-major, then projection, then A before B, then j.
  EXPECT_EQ(l.row_index(0, lora_proj::q, 0, 0, 4), 0u);
  EXPECT_EQ(l.row_index(0, lora_proj::q, 1, 0, 4), 4u);
  EXPECT_EQ(l.row_index(0, lora_proj::k, 0, 1, 4), 9u);
  EXPECT_EQ(l.row_index(2, lora_proj::o, 1, 3, 4), 95u);
  // Every (layer, projection, side, j) gets its own row.
  std::vector<int> seen(l.rows(4), 0);
  for (std::uint32_t layer = 0; layer < 3; ++layer)
    for (std::uint32_t p = 0; p < 4; ++p)
      for (std::uint32_t s = 0; s < 2; ++s)
        for (std::uint32_t j = 0; j < 4; ++j)
          ++seen[l.row_index(layer, static_cast<lora_proj>(p), s, j, 4)];
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST(lora_layout, a_page_smaller_than_a_row_is_unusable) {
  const kv_layout kv{.num_layers = 1, .num_kv_heads = 1, .head_dim = 2, .page_tokens = 1};
  const auto l = lora_layout::make(kv, 64, 64);
  EXPECT_EQ(l.rows_per_page, 0u);
  EXPECT_EQ(l.pages(8), 0u);
}

TEST(plan_batch, a_mixed_prefill_and_decode_batch_is_flattened_in_adapter_groups) {
  fixture f;
  std::vector<step_entry> batch{
    entry(1, 0, 5, {3, 4}, 9, 16), // prefill, adapter 9
    entry(2, 6, 1, {5, 6}),        // decode, base model
    entry(3, 2, 1, {7}, 7, 8),     // decode, adapter 7
    entry(4, 9, 1, {8, 9, 10}, 9, 16),
  };
  const auto p = plan_batch(batch, f.in);
  ASSERT_TRUE(p.rejected.empty());
  // Base model first, then adapter 9 (first seen), then 7.
  EXPECT_EQ(p.order, (std::vector<std::uint32_t>{1, 0, 3, 2}));
  EXPECT_EQ(p.rows(), 8u);
  EXPECT_EQ(p.qo_indptr, (std::vector<std::uint32_t>{0, 1, 6, 7, 8}));
  EXPECT_EQ(p.positions, (std::vector<std::int32_t>{6, 0, 1, 2, 3, 4, 9, 2}));
  EXPECT_EQ(p.row_seq, (std::vector<std::uint32_t>{0, 1, 1, 1, 1, 1, 2, 3}));
  EXPECT_EQ(p.last_row, (std::vector<std::uint32_t>{0, 5, 6, 7}));
  EXPECT_EQ(p.token_ids[1], batch[0].tokens[0]);
  EXPECT_EQ(p.token_ids[5], batch[0].tokens[4]);
  // Page tables: only the pages the cache needs after this step.
  EXPECT_EQ(p.kv_len, (std::vector<std::uint32_t>{7, 5, 10, 3}));
  EXPECT_EQ(p.kv_indptr, (std::vector<std::uint32_t>{0, 2, 4, 7, 8}));
  EXPECT_EQ(p.kv_pages, (std::vector<std::uint32_t>{5, 6, 3, 4, 8, 9, 10, 7}));
  // Row 0 (position 6, pages 5,6) goes to page 6 slot 2; row 5 (position
  // 4, pages 3,4) to page 4 slot 0.
  EXPECT_EQ(p.row_page[0], 6u);
  EXPECT_EQ(p.row_slot[0], 2u);
  EXPECT_EQ(p.row_page[5], 4u);
  EXPECT_EQ(p.row_slot[5], 0u);
  EXPECT_EQ(p.row_page[6], 10u);
  EXPECT_EQ(p.row_slot[6], 1u);
  // LoRA: two slots, their pages, one segment per adapter (9's two
  // sequences are adjacent and merged).
  ASSERT_EQ(p.slots.size(), 2u);
  EXPECT_EQ(p.slots[0].rank, 16u);
  EXPECT_EQ(p.slots[0].page_offset, 0u);
  EXPECT_EQ(p.slots[1].rank, 8u);
  EXPECT_FLOAT_EQ(p.slots[1].scale, 2.0f);
  EXPECT_EQ(p.slots[1].page_offset, 4u);
  EXPECT_EQ(p.lora_pages, (std::vector<std::uint32_t>{50, 51, 52, 53, 40, 41}));
  EXPECT_EQ(p.row_lora, (std::vector<std::int32_t>{-1, 0, 0, 0, 0, 0, 0, 1}));
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[0].first_row, 1u);
  EXPECT_EQ(p.segments[0].rows, 6u);
  EXPECT_EQ(p.segments[0].slot, 0u);
  EXPECT_EQ(p.segments[1].first_row, 7u);
  EXPECT_EQ(p.segments[1].rows, 1u);
  EXPECT_EQ(p.max_rank, 16u);
  EXPECT_EQ(p.max_new_tokens, 5u);
  EXPECT_EQ(p.max_kv_len, 10u);
  EXPECT_FALSE(p.decode_only());
  // Sampling follows the sequences.
  ASSERT_EQ(p.sampling.size(), 4u);
  EXPECT_EQ(p.sampling[0].seed, 102u);
  EXPECT_EQ(p.sampling[1].output_index, 0u);
  EXPECT_FLOAT_EQ(p.sampling[2].temperature, 0.5f);
}

/// An attention item as a test expects it: sequence, rows [q0, q1), cache [k0, k1).
struct item_want {
  std::uint32_t seq, q0, q1, k0, k1;
};

void expect_items(const batch_plan& p, const std::vector<item_want>& items) {
  ASSERT_EQ(p.items.size(), items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(p.items[i].seq, items[i].seq);
    EXPECT_EQ(p.items[i].q_begin, items[i].q0);
    EXPECT_EQ(p.items[i].q_end, items[i].q1);
    EXPECT_EQ(p.items[i].kv_begin, items[i].k0);
    EXPECT_EQ(p.items[i].kv_end, items[i].k1);
  }
}

TEST(plan_batch, attention_tiles_cut_rows_and_items_cut_the_visible_cache) {
  fixture f;
  f.in.split = {.q_tile = 2, .kv_chunk = 4};
  std::vector<step_entry> batch{entry(1, 3, 5, {1, 2}), entry(2, 9, 1, {3, 4, 5})};
  const auto p = plan_batch(batch, f.in);
  ASSERT_TRUE(p.rejected.empty());
  // Sequence 0: rows 0..4 at positions 3..7 in tiles [0,2) [2,4) [4,5),
  // seeing positions < 5, < 7, < 8. Sequence 1: one row at position 9,
  // seeing 10 positions.
  const std::vector<item_want> items{
    {0, 0, 2, 0, 4}, {0, 0, 2, 4, 5},                 // tile 0
    {0, 2, 4, 0, 4}, {0, 2, 4, 4, 7},                 // tile 1
    {0, 4, 5, 0, 4}, {0, 4, 5, 4, 8},                 // tile 2
    {1, 5, 6, 0, 4}, {1, 5, 6, 4, 8}, {1, 5, 6, 8, 10} // tile 3
  };
  expect_items(p, items);
  EXPECT_EQ(p.tile_indptr, (std::vector<std::uint32_t>{0, 2, 4, 6, 9}));
}

TEST(plan_batch, a_sliding_window_starts_each_tile_where_its_first_row_sees) {
  fixture f;
  f.in.split = {.q_tile = 2, .kv_chunk = 4};
  f.in.sliding_window = 3;
  std::vector<step_entry> batch{entry(1, 3, 5, {1, 2}), entry(2, 9, 1, {3, 4, 5}), entry(3, 0, 2, {6})};
  const auto p = plan_batch(batch, f.in);
  ASSERT_TRUE(p.rejected.empty());
  EXPECT_EQ(p.sliding_window, 3u);
  // Sequence 0: rows at positions 3..7 in tiles [0,2) [2,4) [4,5); their
  // first rows (3, 5, 7) see from 1, 3, 5. Sequence 1: position 9 sees
  // 7..9. Sequence 2: a prompt shorter than the window sees from 0.
  const std::vector<item_want> items{{0, 0, 2, 1, 5}, {0, 2, 4, 3, 7}, {0, 4, 5, 5, 8}, {1, 5, 6, 7, 10},
                                {2, 6, 8, 0, 2}};
  expect_items(p, items);
  // A long context is still cut into kv_chunk items, from the window's start.
  f.in.sliding_window = 10;
  const auto long_one = plan_batch(std::vector<step_entry>{entry(2, 40, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})}, f.in);
  ASSERT_EQ(long_one.items.size(), 3u);
  EXPECT_EQ(long_one.items[0].kv_begin, 31u);
  EXPECT_EQ(long_one.items[1].kv_begin, 35u);
  EXPECT_EQ(long_one.items[2].kv_begin, 39u);
  EXPECT_EQ(long_one.items[2].kv_end, 41u);
}

TEST(plan_batch, without_a_chunk_each_tile_is_one_item_over_its_visible_cache) {
  fixture f;
  f.in.split = {.q_tile = 64, .kv_chunk = 0};
  std::vector<step_entry> batch{entry(1, 0, 7, {1, 2}), entry(2, 4, 1, {3, 4})};
  const auto p = plan_batch(batch, f.in);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].kv_end, 7u);
  EXPECT_EQ(p.items[1].kv_end, 5u);
  EXPECT_EQ(p.tile_indptr, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_TRUE(plan_batch(std::vector<step_entry>{entry(2, 4, 1, {3, 4})}, f.in).decode_only());
}

TEST(plan_batch, bad_entries_are_rejected_with_a_reason_and_the_rest_planned) {
  fixture f;
  std::vector<step_entry> batch{
    entry(1, 0, 5, {3}),           // 5 positions need 2 pages
    entry(2, 0, 2, {99}),          // page outside the pool
    entry(3, 0, 2, {4}, 8, 8),     // adapter not resident
    entry(4, 0, 2, {5}, 7, 16),    // rank differs from the resident one
    entry(5, 0, 2, {6}),           // fine
    entry(6, 0, 2, {7}),           // token outside the vocabulary
    entry(7, 0, 2, {8}),           // hidden cache
    entry(8, 0, 0, {9}),           // no tokens
  };
  batch[5].tokens[1] = 50;
  batch[6].hidden = true;
  const auto p = plan_batch(batch, f.in);
  EXPECT_EQ(p.order, (std::vector<std::uint32_t>{4}));
  ASSERT_EQ(p.rejected.size(), 7u);
  std::map<std::uint32_t, std::string> why(p.rejected.begin(), p.rejected.end());
  EXPECT_NE(why[0].find("need 2 pages"), std::string::npos) << why[0];
  EXPECT_NE(why[1].find("outside the pool"), std::string::npos) << why[1];
  EXPECT_NE(why[2].find("not on the device"), std::string::npos) << why[2];
  EXPECT_NE(why[3].find("rank 8"), std::string::npos) << why[3];
  EXPECT_NE(why[5].find("vocabulary"), std::string::npos) << why[5];
  EXPECT_NE(why[6].find("hidden"), std::string::npos) << why[6];
  EXPECT_NE(why[7].find("0 tokens"), std::string::npos) << why[7];
  EXPECT_EQ(p.rows(), 2u);
  EXPECT_TRUE(p.slots.empty());
  EXPECT_TRUE(p.segments.empty());
}

TEST(plan_batch, logit_adjustments_follow_the_plan_order_and_only_when_some_entry_has_any) {
  fixture f;
  std::vector<step_entry> batch{entry(1, 0, 3, {3}, 9, 16), entry(2, 6, 1, {5, 6}), entry(3, 2, 1, {7})};
  EXPECT_TRUE(plan_batch(batch, f.in).adjust_indptr.empty()) << "none: the step samples its logits as they are";
  batch[0].logit_adjust = {{4, 1.5f}, {9, -2.0f, true}};
  batch[0].repetition_penalty = 1.2f;
  batch[0].min_p = 0.05f;
  batch[2].logit_adjust = {{0, 100.0f}};
  const auto p = plan_batch(batch, f.in);
  ASSERT_EQ(p.order, (std::vector<std::uint32_t>{1, 2, 0})); // base model first
  EXPECT_EQ(p.adjust_indptr, (std::vector<std::uint32_t>{0, 0, 1, 3}));
  EXPECT_EQ(p.adjust_tokens, (std::vector<std::int32_t>{0, 4, 9}));
  EXPECT_EQ(p.adjust_deltas, (std::vector<float>{100.0f, 1.5f, -2.0f}));
  EXPECT_EQ(p.adjust_repeated, (std::vector<std::uint8_t>{0, 0, 1}));
  EXPECT_EQ(p.sampling[2].repetition_penalty, 1.2f) << "the penalty and the cut go with their sequence";
  EXPECT_EQ(p.sampling[2].min_p, 0.05f);
  EXPECT_EQ(p.sampling[0].repetition_penalty, 1.0f);
  EXPECT_EQ(p.sampling[0].min_p, 0.0f);
}

TEST(plan_batch, an_empty_batch_gives_an_empty_plan) {
  fixture f;
  const auto p = plan_batch({}, f.in);
  EXPECT_EQ(p.seqs(), 0u);
  EXPECT_EQ(p.rows(), 0u);
  EXPECT_EQ(p.qo_indptr, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(p.tile_indptr, (std::vector<std::uint32_t>{0}));
}

TEST(plan_batch, same_adapter_sequences_split_by_the_input_order_still_share_a_slot) {
  fixture f;
  std::vector<step_entry> batch{entry(1, 4, 1, {1, 2}, 7, 8), entry(2, 4, 1, {3, 4}, 9, 16),
                                entry(3, 4, 1, {5, 6}, 7, 8), entry(4, 4, 1, {7, 8})};
  const auto p = plan_batch(batch, f.in);
  EXPECT_EQ(p.order, (std::vector<std::uint32_t>{3, 0, 2, 1}));
  EXPECT_EQ(p.row_lora, (std::vector<std::int32_t>{-1, 0, 0, 1}));
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[0].rows, 2u);
  EXPECT_EQ(p.lora_pages, (std::vector<std::uint32_t>{40, 41, 50, 51, 52, 53}));
  EXPECT_TRUE(p.decode_only());
  // A row per sequence: each is its sequence's last, in order (cuda_model
  // then feeds the LM head the rows as they are).
  EXPECT_EQ(p.last_row, (std::vector<std::uint32_t>{0, 1, 2, 3}));
}

TEST(split_for, contexts_are_cut_only_where_the_tiles_leave_multiprocessors_idle) {
  const auto decode = [](std::uint32_t n, std::uint32_t context) {
    std::vector<step_entry> b(n);
    for (auto& e : b) {
      e.context_tokens = context;
      e.new_tokens = 1;
    }
    return b;
  };
  // One sequence, 32 kv heads, 132 multiprocessors: 32 blocks; cut.
  EXPECT_EQ(split_for(decode(1, 4000), 32, 132).kv_chunk, 256u);
  // 64 sequences: 2,048 blocks; whole.
  EXPECT_EQ(split_for(decode(64, 512), 32, 132).kv_chunk, 0u);
  // 8 sequences of 8 kv heads: 64 blocks; cut. 33 of them: 264, two waves; whole.
  EXPECT_EQ(split_for(decode(8, 4000), 8, 132).kv_chunk, 256u);
  EXPECT_EQ(split_for(decode(33, 4000), 8, 132).kv_chunk, 0u);
  EXPECT_EQ(split_for(decode(32, 4000), 8, 132).kv_chunk, 256u);
  // A prompt counts its tiles of 64 rows: 8 x 1,024 tokens is 128 tiles.
  std::vector<step_entry> prefill(8);
  for (auto& e : prefill)
    e.new_tokens = 1024;
  EXPECT_EQ(split_for(prefill, 32, 132).kv_chunk, 0u);
  EXPECT_EQ(split_for(prefill, 1, 132).kv_chunk, 256u);
  EXPECT_EQ(split_for(prefill, 1, 132).q_tile, 64u);
  EXPECT_EQ(split_for({}, 32, 132).kv_chunk, 256u);
}

TEST(pool_pages_for, takes_the_fraction_of_what_weights_and_scratch_leave_in_whole_pages) {
  constexpr std::uint64_t gib = std::uint64_t{1} << 30;
  // 80 GiB free, 13 GiB of weights, 3 GiB of scratch: 64 GiB left, 90% of it
  // in 8 MiB pages.
  EXPECT_EQ(pool_pages_for(80 * gib, 13 * gib, 3 * gib, 0.9, 8 << 20),
            static_cast<std::uint64_t>(64.0 * 0.9 * 128));
  EXPECT_EQ(pool_pages_for(80 * gib, 13 * gib, 3 * gib, 1.0, 8 << 20), 64u * 128);
  // Less than a page left after rounding, or nothing at all.
  EXPECT_EQ(pool_pages_for(16 * gib + (4 << 20), 13 * gib, 3 * gib, 1.0, 8 << 20), 0u);
  EXPECT_EQ(pool_pages_for(10 * gib, 13 * gib, 3 * gib, 0.9, 8 << 20), 0u);
  EXPECT_EQ(pool_pages_for(16 * gib, 13 * gib, 3 * gib, 0.9, 8 << 20), 0u);
  EXPECT_EQ(pool_pages_for(80 * gib, 13 * gib, 3 * gib, 0.9, 0), 0u);
}


TEST(unsupported_model, names_what_the_kernels_do_not_take) {
  // Llama-2-7B and a GQA model: served.
  EXPECT_EQ(unsupported_model(4096, 32, {32, 32, 128, 16}), "");
  EXPECT_EQ(unsupported_model(2048, 32, {16, 8, 64, 16}), "");
  EXPECT_EQ(unsupported_model(256, 8, {4, 4, 32, 16}), "head_dim 32: the attention kernels take 64 or 128");
  EXPECT_EQ(unsupported_model(768, 12, {2, 5, 64, 16}), "12 attention heads do not split evenly over 5 KV heads");
  EXPECT_EQ(unsupported_model(8320, 130, {2, 2, 64, 16}),
            "65 query heads per KV head: the attention kernels take 64 at most");
  // One layer, one KV head, one token per page: 256 elements a page, rows of 4096.
  const auto small = unsupported_model(4096, 32, {1, 1, 128, 1});
  EXPECT_NE(small.find("less than one adapter row of 4096 elements"), std::string::npos) << small;
}

} // namespace
} // namespace troupe::gpu::cuda
