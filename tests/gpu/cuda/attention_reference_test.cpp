// The attention and KV-write references (gpu/cuda/reference_attention.hpp):
// the item split and merge against plain attention and against a naive fp64
// attention written here over contiguous K/V; causality; partials of items
// a row cannot see; the merge rule; write_kv's placement; bad shapes.
#include "gpu/cuda/reference_attention.hpp"

#include "tests/gpu/cuda/attention_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace troupe::gpu::cuda {
namespace {

static_assert(std::is_nothrow_move_constructible_v<attention_partial>);
static_assert(attention_kv_tile == 64);

using testing::attention_case;
using testing::case_options;
using testing::make_case;
using testing::seq_spec;

std::vector<float> reference_split(const attention_case& c) {
  return attention_reference_f32(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool);
}
std::vector<float> reference_unsplit(const attention_case& c) {
  return attention_unsplit_reference_f32(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool);
}

// Every element finite and within `tol` (absolute plus relative) of `want`.
void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isfinite(got[i]) && std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0u);
}

// softmax(q K^T * scale) V in fp64 over K and V copied out of the pool into
// contiguous per-sequence arrays, written without the reference's helpers;
// a row at pos sees positions pos - window + 1 to pos (window 0: from 0).
std::vector<double> naive_attention(const attention_case& c) {
  const auto& p = c.plan;
  const std::uint32_t hd = c.kv.head_dim, kvd = c.kv.kv_dim(), group = c.heads / c.kv.num_kv_heads;
  std::vector<double> out(std::size_t{p.rows()} * c.width(), 0.0);
  for (std::uint32_t s = 0; s < p.seqs(); ++s) {
    const auto& e = c.entries[p.order[s]];
    const std::uint32_t len = e.context_tokens + e.new_tokens;
    std::vector<double> k(std::size_t{len} * kvd), v(std::size_t{len} * kvd);
    for (std::uint32_t t = 0; t < len; ++t)
      for (std::uint32_t d = 0; d < kvd; ++d) {
        const std::uint32_t page = e.pages[t / c.kv.page_tokens], slot = t % c.kv.page_tokens;
        k[t * kvd + d] = from_bits(c.t, c.pool[c.kv.offset(page, c.layer, 0, slot) + d]);
        v[t * kvd + d] = from_bits(c.t, c.pool[c.kv.offset(page, c.layer, 1, slot) + d]);
      }
    for (std::uint32_t i = 0; i < e.new_tokens; ++i) {
      const std::uint32_t row = p.qo_indptr[s] + i, pos = e.context_tokens + i;
      for (std::uint32_t h = 0; h < c.heads; ++h) {
        const std::uint32_t kvh = h / group;
        const std::uint32_t window = c.plan.sliding_window;
        const std::uint32_t first = window == 0 || pos < window ? 0 : pos - window + 1;
        std::vector<double> w(pos + 1, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (std::uint32_t t = first; t <= pos; ++t) {
          double dot = 0;
          for (std::uint32_t d = 0; d < hd; ++d)
            dot += from_bits(c.t, c.q[(std::size_t{row} * c.heads + h) * hd + d]) *
                   k[t * kvd + kvh * hd + d];
          w[t] = dot * c.scale;
          mx = std::max(mx, w[t]);
        }
        double sum = 0;
        for (auto& x : w)
          sum += (x = std::exp(x - mx));
        for (std::uint32_t t = first; t <= pos; ++t)
          for (std::uint32_t d = 0; d < hd; ++d)
            out[(std::size_t{row} * c.heads + h) * hd + d] += w[t] / sum * v[t * kvd + kvh * hd + d];
      }
    }
  }
  return out;
}

// A prefill with context, a fresh prefill, decodes of several lengths.
const std::vector<seq_spec> mixed_batch{{5, 37}, {0, 70}, {130, 1}, {1, 1}, {63, 1}, {64, 2}};

TEST(attention_reference, split_and_merge_equal_plain_attention) {
  const attention_split splits[] = {{64, 0}, {4, 16}, {7, 5}, {1, 64}, {16, 100}, {3, 1}};
  for (dtype t : {dtype::f16, dtype::bf16})
    for (std::uint32_t group : {1u, 4u})
      for (std::uint32_t hd : {16u, 64u})
        for (const auto& split : splits) {
          case_options o{.t = t, .kv_heads = 2, .group = group, .head_dim = hd, .page_tokens = 8,
                         .split = split, .seed = 7 + hd + group};
          SCOPED_TRACE(testing::describe(mixed_batch, o));
          const auto c = make_case(mixed_batch, o);
          ASSERT_TRUE(c.plan.rejected.empty());
          if (split.kv_chunk != 0 && split.kv_chunk < 64) {
            ASSERT_GT(c.plan.items.size(), c.plan.tile_indptr.size() - 1) << "nothing was split";
          }
          const auto split_out = reference_split(c);
          const auto plain = reference_unsplit(c);
          expect_near_all(split_out, plain, 1e-5f);
          // Rounded once, they differ at most where fp32 noise crosses a rounding boundary.
          const auto a = attention_reference(t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool);
          const auto b = attention_unsplit_reference(t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool);
          ASSERT_EQ(a.size(), b.size());
          for (std::size_t i = 0; i < a.size(); ++i)
            ASSERT_LE(std::abs(from_bits(t, a[i]) - from_bits(t, b[i])),
                      std::abs(from_bits(t, b[i])) * (t == dtype::f16 ? 0x1p-10f : 0x1p-7f) + 1e-6f)
              << "element " << i;
        }
}

TEST(attention_reference, matches_a_naive_fp64_attention_over_contiguous_kv) {
  for (dtype t : {dtype::f16, dtype::bf16})
    for (std::uint32_t group : {1u, 2u, 4u}) {
      case_options o{.t = t, .kv_heads = 2, .group = group, .head_dim = 32, .page_tokens = 4,
                     .split = {5, 9}, .seed = 3 + group};
      SCOPED_TRACE(testing::describe(mixed_batch, o));
      const auto c = make_case(mixed_batch, o);
      const auto want = naive_attention(c);
      const std::vector<float> want_f(want.begin(), want.end());
      expect_near_all(reference_split(c), want_f, 1e-5f);
      expect_near_all(reference_unsplit(c), want_f, 1e-5f);
    }
}

TEST(attention_reference, sliding_windows_split_or_not_match_a_naive_fp64_attention) {
  // Windows of one position, shorter than a page, than a tile (64) and
  // than the longest context, each cut into items several ways.
  const attention_split splits[] = {{64, 0}, {4, 16}, {7, 5}, {16, 100}};
  for (std::uint32_t window : {1u, 3u, 40u, 64u, 65u, 129u})
    for (const auto& split : splits) {
      case_options o{.t = window % 2 ? dtype::f16 : dtype::bf16, .kv_heads = 2, .group = 2, .head_dim = 16,
                     .page_tokens = 8, .split = split, .seed = 11 + window, .sliding_window = window};
      SCOPED_TRACE(testing::describe(mixed_batch, o));
      const auto c = make_case(mixed_batch, o);
      ASSERT_TRUE(c.plan.rejected.empty());
      ASSERT_EQ(c.plan.sliding_window, window);
      const auto want = naive_attention(c);
      const std::vector<float> want_f(want.begin(), want.end());
      expect_near_all(reference_split(c), want_f, 1e-5f);
      expect_near_all(reference_unsplit(c), want_f, 1e-5f);
      // Items begin no earlier than their tile's first row sees.
      for (const auto& it : c.plan.items) {
        const auto first_pos = static_cast<std::uint32_t>(c.plan.positions[it.q_begin]);
        EXPECT_GE(it.kv_begin + window, first_pos + 1) << "an item reads positions no row of it sees";
      }
    }
}

// Changes K and V of entry `entry`'s position `p` in the tested layer.
void perturb(attention_case& c, std::size_t entry, std::uint32_t p) {
  const auto& e = c.entries[entry];
  const std::uint32_t pt = c.kv.page_tokens;
  for (std::uint32_t which = 0; which < 2; ++which)
    for (std::uint32_t d = 0; d < c.kv.kv_dim(); ++d) {
      auto& x = c.pool[c.kv.offset(e.pages[p / pt], c.layer, which, p % pt) + d];
      x = to_bits(c.t, -3.0f * from_bits(c.t, x) + 0.5f);
    }
}

TEST(attention_reference, a_row_sees_only_its_sliding_window) {
  // One sequence: 9 cached positions, 40 new rows, a window of 6; position
  // 20 is perturbed: rows at positions 20 to 25 see it, no others do.
  const std::vector<seq_spec> seqs{{9, 40}, {30, 1}};
  for (const auto& split : {attention_split{64, 0}, attention_split{8, 8}}) {
    case_options o{.group = 2, .head_dim = 16, .page_tokens = 4, .split = split, .sliding_window = 6};
    auto c = make_case(seqs, o);
    const auto before = reference_split(c);
    const std::uint32_t p = 20;
    perturb(c, 0, p);
    const auto after = reference_split(c);
    const auto after_plain = reference_unsplit(c);
    const std::uint32_t w = c.width();
    for (std::uint32_t r = 0; r < c.plan.rows(); ++r) {
      bool same = true;
      for (std::uint32_t i = 0; i < w; ++i)
        same = same && after[r * w + i] == before[r * w + i];
      const auto pos = static_cast<std::uint32_t>(c.plan.positions[r]);
      const bool sees = c.plan.row_seq[r] == 0 && pos >= p && pos < p + 6;
      EXPECT_EQ(same, !sees) << "row " << r << " at position " << pos;
      for (std::uint32_t i = 0; i < w; ++i)
        ASSERT_NEAR(after[r * w + i], after_plain[r * w + i], 1e-5f) << "row " << r;
    }
  }
}

TEST(attention_reference, a_row_never_sees_later_positions) {
  // One sequence: 9 cached positions, 40 new rows; position 30 is perturbed.
  const std::vector<seq_spec> seqs{{9, 40}, {3, 1}};
  for (const auto& split : {attention_split{64, 0}, attention_split{8, 8}}) {
    case_options o{.group = 2, .head_dim = 16, .page_tokens = 4, .split = split};
    auto c = make_case(seqs, o);
    const auto before = reference_split(c);
    const auto before_plain = reference_unsplit(c);
    const std::uint32_t p = 30;
    perturb(c, 0, p);
    const auto after = reference_split(c);
    const auto after_plain = reference_unsplit(c);
    const std::uint32_t w = c.width();
    std::uint32_t changed_rows = 0;
    for (std::uint32_t r = 0; r < c.plan.rows(); ++r) {
      bool same = true, same_plain = true;
      for (std::uint32_t i = 0; i < w; ++i) {
        same = same && after[r * w + i] == before[r * w + i];
        same_plain = same_plain && after_plain[r * w + i] == before_plain[r * w + i];
      }
      EXPECT_EQ(same, same_plain) << "row " << r;
      const bool sees = c.plan.row_seq[r] == 0 && static_cast<std::uint32_t>(c.plan.positions[r]) >= p;
      if (!sees) {
        EXPECT_TRUE(same) << "row " << r << " at position " << c.plan.positions[r]
                          << " saw position " << p;
      }
      changed_rows += same ? 0 : 1;
    }
    EXPECT_EQ(changed_rows, 9 + 40 - p) << "every row at or after the position sees the change";
  }
}

TEST(attention_reference, an_item_a_row_cannot_see_leaves_it_empty) {
  // Tile rows 0..7 (positions 0..7) in items [0, 4) and [4, 8): rows 0..3
  // see nothing of the second item.
  const auto c = make_case({{0, 8}}, {.head_dim = 16, .split = {8, 4}});
  ASSERT_EQ(c.plan.items.size(), 2u);
  const auto part = attention_item_reference(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q,
                                             c.pool, 1);
  ASSERT_EQ(part.rows, 8u);
  for (std::uint32_t r = 0; r < 8; ++r)
    for (std::uint32_t h = 0; h < c.heads; ++h) {
      const std::size_t at = std::size_t{r} * c.heads + h;
      if (r < 4) {
        EXPECT_EQ(part.m[at], -std::numeric_limits<float>::infinity());
        EXPECT_EQ(part.l[at], 0.0f);
        for (std::uint32_t d = 0; d < 16; ++d)
          EXPECT_EQ(part.o[at * 16 + d], 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(part.m[at]));
        EXPECT_GE(part.l[at], 1.0f); // the maximum contributes exp(0)
        EXPECT_LE(part.l[at], static_cast<float>(r - 3));
      }
    }
}

TEST(attention_reference, merge_weights_items_by_their_max_and_sum) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<attention_partial> parts(3);
  for (auto& p : parts) {
    p.rows = 1;
    p.heads = 1;
    p.head_dim = 2;
  }
  parts[0].o = {1, 0};
  parts[0].m = {1};
  parts[0].l = {2};
  parts[1].o = {0, 1};
  parts[1].m = {0};
  parts[1].l = {1};
  parts[2].o = {0, 0}; // saw nothing
  parts[2].m = {-inf};
  parts[2].l = {0};
  const auto out = merge_attention_partials(parts);
  const double w0 = 2.0, w1 = std::exp(-1.0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], w0 / (w0 + w1), 1e-6);
  EXPECT_NEAR(out[1], w1 / (w0 + w1), 1e-6);
  parts[1].head_dim = 3;
  EXPECT_THROW(merge_attention_partials(parts), std::invalid_argument);
  EXPECT_THROW(merge_attention_partials({}), std::invalid_argument);
}

TEST(attention_reference, write_kv_puts_each_row_where_kv_layout_offset_says) {
  const std::vector<seq_spec> seqs{{0, 11}, {13, 1}, {6, 5}, {16, 1}};
  case_options o{.num_layers = 3, .layer = 1, .kv_heads = 2, .head_dim = 8, .page_tokens = 4};
  auto c = make_case(seqs, o);
  const std::uint32_t kvd = c.kv.kv_dim();
  const std::uint16_t sentinel = 0xabcd;
  std::vector<std::uint16_t> pool(c.pool.size(), sentinel);
  std::vector<std::uint16_t> k(std::size_t{c.plan.rows()} * kvd), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<std::uint16_t>(i * 2 + 1); // distinct, never the sentinel
    v[i] = static_cast<std::uint16_t>(i * 2 + 2);
  }
  write_kv_reference(c.t, c.plan, c.kv, c.layer, k, v, pool);
  std::size_t written = 0;
  for (std::uint32_t s = 0; s < c.plan.seqs(); ++s) {
    const auto& e = c.entries[c.plan.order[s]];
    for (std::uint32_t i = 0; i < e.new_tokens; ++i) {
      const std::uint32_t row = c.plan.qo_indptr[s] + i, pos = e.context_tokens + i;
      const std::uint32_t page = e.pages[pos / 4], slot = pos % 4;
      for (std::uint32_t d = 0; d < kvd; ++d) {
        EXPECT_EQ(pool[c.kv.offset(page, 1, 0, slot) + d], k[row * kvd + d]);
        EXPECT_EQ(pool[c.kv.offset(page, 1, 1, slot) + d], v[row * kvd + d]);
      }
      written += 2 * kvd;
    }
  }
  EXPECT_EQ(std::count_if(pool.begin(), pool.end(), [&](std::uint16_t x) { return x != sentinel; }),
            static_cast<std::ptrdiff_t>(written))
    << "nothing but the rows' slots of the layer changed";
  EXPECT_THROW(write_kv_reference(c.t, c.plan, c.kv, 3, k, v, pool), std::invalid_argument);
  EXPECT_THROW(write_kv_reference(c.t, c.plan, c.kv, 1, std::span(k).first(kvd), v, pool),
               std::invalid_argument);
  EXPECT_THROW(write_kv_reference(c.t, c.plan, c.kv, 1, k, v, std::span(pool).first(c.kv.page_elems())),
               std::invalid_argument);
}

TEST(attention_reference, bad_shapes_are_refused) {
  auto c = make_case({{4, 3}}, {.group = 2, .head_dim = 16});
  auto call = [&](std::uint32_t layer, std::uint32_t heads, std::size_t q_size) {
    return attention_reference_f32(c.t, c.plan, c.kv, layer, heads, c.scale,
                                   std::span(c.q).first(q_size), c.pool);
  };
  EXPECT_NO_THROW(call(c.layer, c.heads, c.q.size()));
  EXPECT_THROW(call(c.kv.num_layers, c.heads, c.q.size()), std::invalid_argument);
  EXPECT_THROW(call(c.layer, 3, c.q.size()), std::invalid_argument);
  EXPECT_THROW(call(c.layer, c.heads, c.q.size() - 1), std::invalid_argument);
  EXPECT_THROW(attention_item_reference(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool,
                                        static_cast<std::uint32_t>(c.plan.items.size())),
               std::invalid_argument);
  // A pool without the sequence's pages.
  EXPECT_THROW(attention_unsplit_reference_f32(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q,
                                               std::span(c.pool).first(c.kv.page_elems())),
               std::invalid_argument);
}

} // namespace
} // namespace troupe::gpu::cuda
