// The elementwise kernels (gpu/cuda/elementwise.cu) against their CPU
// references over grids of element types, widths and row counts, on the
// 16-byte path and on the scalar one (odd widths, misaligned pointers), with
// guard bands around every output and explicit NaN checks. Skips without a
// GPU.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/reference_elementwise.hpp"

#include "elementwise_test_support.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace troupe::gpu::cuda {
namespace {

using namespace gpu_testing;

using namespace elementwise_test;

static_assert(std::is_nothrow_move_constructible_v<device_buffer<std::uint16_t>>);

constexpr float eps = 1e-5f;
const std::uint32_t hiddens[] = {64, 4096, 5120, 37};
const std::uint32_t row_counts[] = {1, 7, 300};
constexpr std::size_t guard = 64;            // sentinel elements on each side of an array
constexpr std::uint16_t sentinel = 0x5a5bu;  // a finite value in both types

// Host bits on the device between guard bands; `offset` elements more in
// front move the data off 16-byte alignment.
class guarded {
public:
  explicit guarded(std::span<const std::uint16_t> host, std::size_t offset = 0)
    : n_(host.size()), offset_(offset), buf_(host.size() + 2 * guard + offset) {
    std::vector<std::uint16_t> all(buf_.size(), sentinel);
    std::copy(host.begin(), host.end(), all.begin() + static_cast<std::ptrdiff_t>(guard + offset));
    buf_.upload(all);
  }
  void* data() const { return buf_.data() + guard + offset_; }

  struct contents {
    std::vector<std::uint16_t> data;
    bool guards_intact = true;
  };
  contents read() const {
    std::vector<std::uint16_t> all(buf_.size());
    buf_.download(all);
    contents c;
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(guard + offset_);
    c.data.assign(first, first + static_cast<std::ptrdiff_t>(n_));
    for (std::size_t i = 0; i < all.size(); ++i)
      if ((i < guard + offset_ || i >= guard + offset_ + n_) && all[i] != sentinel)
        c.guards_intact = false;
    return c;
  }

private:
  std::size_t n_;
  std::size_t offset_;
  device_buffer<std::uint16_t> buf_;
};

// The norms' rule: every element within an ulp of the reference, NaN where
// it has NaN, and at most inexact_allowance of them not exact.
void expect_within_an_ulp(dtype t, const std::vector<std::uint16_t>& got,
                          const std::vector<std::uint16_t>& want) {
  const auto c = compare_bits(t, got, want);
  EXPECT_EQ(c.bad, 0u) << c.first;
  EXPECT_EQ(c.nan_mismatch, 0u) << c.first;
  EXPECT_LE(c.inexact, inexact_allowance(want.size()));
}

std::string label(dtype t, const char* what, std::uint32_t n, std::uint32_t rows,
                  std::size_t offset = 0) {
  return std::string(to_string(t)) + " " + what + " " + std::to_string(n) + " rows " +
         std::to_string(rows) + (offset != 0 ? " misaligned" : "");
}

// -- embedding_gather -----------------------------------------------------------------

TEST(elementwise_kernel, embedding_gather_copies_rows_exactly) {
  TROUPE_REQUIRE_GPU();
  const std::uint32_t vocab = 1000;
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : hiddens)
      for (std::uint32_t rows : row_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(label(t, "hidden", hidden, rows, offset));
          const auto table = random_bits(t, std::size_t{vocab} * hidden, 101 + hidden);
          std::mt19937 rng{rows + hidden};
          std::uniform_int_distribution<std::int32_t> id{0, vocab - 1};
          std::vector<std::int32_t> ids(rows);
          for (auto& i : ids)
            i = id(rng);
          ids[0] = vocab - 1;
          if (rows > 2)
            ids[rows - 1] = 0;
          std::vector<std::uint16_t> want(std::size_t{rows} * hidden);
          embedding_gather_reference(table, ids, hidden, want);

          const guarded d_table(table);
          const auto d_ids = to_device(ids);
          const guarded d_out(std::vector<std::uint16_t>(want.size(), 0), offset);
          embedding_gather(t, d_table.data(), d_ids.data(), rows, hidden, d_out.data(), nullptr);
          finish();
          const auto got = d_out.read();
          EXPECT_TRUE(got.guards_intact);
          EXPECT_EQ(got.data, want);
        }
}

// -- rmsnorm and add_rmsnorm ------------------------------------------------------------

TEST(elementwise_kernel, rmsnorm_matches_reference) {
  TROUPE_REQUIRE_GPU();
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : hiddens)
      for (std::uint32_t rows : row_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(label(t, "hidden", hidden, rows, offset));
          const auto x = random_bits(t, std::size_t{rows} * hidden, 201 + hidden + rows, 3.0f);
          const auto w = random_bits(t, hidden, 202 + hidden, 0.2f, 1.0f);
          std::vector<std::uint16_t> want(x.size());
          rmsnorm_reference(t, x, w, eps, rows, hidden, want);

          const guarded d_x(x, offset), d_w(w);
          const guarded d_out(std::vector<std::uint16_t>(x.size(), 0));
          rmsnorm(t, d_x.data(), d_w.data(), eps, rows, hidden, d_out.data(), nullptr);
          finish();
          const auto got = d_out.read();
          EXPECT_TRUE(got.guards_intact);
          EXPECT_TRUE(d_x.read().guards_intact);
          EXPECT_EQ(d_x.read().data, x); // the input is not touched
          expect_within_an_ulp(t, got.data, want);
        }
}

TEST(elementwise_kernel, add_rmsnorm_matches_reference_and_rounds_the_residual_exactly) {
  TROUPE_REQUIRE_GPU();
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : hiddens)
      for (std::uint32_t rows : row_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(label(t, "hidden", hidden, rows, offset));
          const auto res0 = random_bits(t, std::size_t{rows} * hidden, 301 + hidden + rows, 8.0f);
          const auto x = random_bits(t, res0.size(), 302 + hidden + rows, 1.0f);
          const auto w = random_bits(t, hidden, 303 + hidden, 0.2f, 1.0f);
          auto res_want = res0;
          std::vector<std::uint16_t> want(x.size());
          add_rmsnorm_reference(t, res_want, x, w, eps, rows, hidden, want);

          const guarded d_res(res0, offset), d_x(x), d_w(w);
          const guarded d_out(std::vector<std::uint16_t>(x.size(), 0));
          add_rmsnorm(t, d_res.data(), d_x.data(), d_w.data(), eps, rows, hidden, d_out.data(),
                      nullptr);
          finish();
          const auto res = d_res.read();
          EXPECT_TRUE(res.guards_intact);
          EXPECT_EQ(res.data, res_want); // round(residual + x), bit for bit
          const auto got = d_out.read();
          EXPECT_TRUE(got.guards_intact);
          expect_within_an_ulp(t, got.data, want);
        }
}

TEST(elementwise_kernel, norms_turn_a_row_with_nan_into_nan_and_leave_the_others) {
  TROUPE_REQUIRE_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : {64u, 4096u, 37u}) {
      SCOPED_TRACE(label(t, "hidden", hidden, 5));
      const std::uint32_t rows = 5;
      auto x = random_bits(t, std::size_t{rows} * hidden, 401 + hidden);
      x[2 * hidden + hidden / 2] = to_bits(t, nan);
      const auto w = random_bits(t, hidden, 402, 0.1f, 1.0f);
      const auto res0 = random_bits(t, x.size(), 403 + hidden);
      std::vector<std::uint16_t> want(x.size()), res_want = res0, add_want(x.size());
      rmsnorm_reference(t, x, w, eps, rows, hidden, want);
      add_rmsnorm_reference(t, res_want, x, w, eps, rows, hidden, add_want);

      const guarded d_x(x), d_w(w), d_res(res0);
      const guarded d_out(std::vector<std::uint16_t>(x.size(), 0));
      const guarded d_add(std::vector<std::uint16_t>(x.size(), 0));
      rmsnorm(t, d_x.data(), d_w.data(), eps, rows, hidden, d_out.data(), nullptr);
      add_rmsnorm(t, d_res.data(), d_x.data(), d_w.data(), eps, rows, hidden, d_add.data(),
                  nullptr);
      finish();
      for (const auto& got : {d_out.read().data, d_add.read().data})
        for (std::uint32_t r = 0; r < rows; ++r)
          for (std::uint32_t i = 0; i < hidden; ++i)
            EXPECT_EQ(is_nan_bits(t, got[r * hidden + i]), r == 2) << "row " << r << " i " << i;
      const auto res = d_res.read().data;
      for (std::size_t i = 0; i < res.size(); ++i) // only the NaN element's sum is NaN
        EXPECT_EQ(is_nan_bits(t, res[i]), i == 2 * hidden + hidden / 2) << i;
      const auto c = compare_bits(t, d_out.read().data, want);
      EXPECT_EQ(c.bad + c.nan_mismatch, 0u) << c.first;
      const auto ca = compare_bits(t, d_add.read().data, add_want);
      EXPECT_EQ(ca.bad + ca.nan_mismatch, 0u) << ca.first;
    }
}

// -- rope ---------------------------------------------------------------------------------------

struct rope_case {
  std::uint32_t heads, kv_heads, head_dim;
};

// Within an ulp, or (where a cos - b sin cancels) within a few fp32 ulps of
// scale (|a| + |b|): the device's sincosf is not the reference's fp64 cos
// and sin. Elements past the `rotary` ones of a head must not move.
comparison compare_rope(dtype t, const std::vector<std::uint16_t>& got,
                        const std::vector<std::uint16_t>& want,
                        const std::vector<std::uint16_t>& in, std::uint32_t hd, std::uint32_t rotary,
                        float scale) {
  return compare_bits(t, got, want, [&](std::size_t i) {
    const std::size_t head = i / hd * hd, e = i % hd;
    if (e >= rotary)
      return 0.0;
    const std::size_t j = e % (rotary / 2);
    return 2e-6 * scale * (std::abs(from_bits(t, in[head + j])) +
                           std::abs(from_bits(t, in[head + rotary / 2 + j])));
  });
}

// `rotary` elements of each head turn (0: all), cos and sin times `scale`.
void check_rope(dtype t, const rope_case& rc, std::uint32_t rows, bool llama3, std::size_t offset,
                std::uint64_t seed, std::uint32_t rotary = 0, float scale = 1.0f) {
  const std::uint32_t rot = rotary == 0 ? rc.head_dim : rotary;
  SCOPED_TRACE(std::string(to_string(t)) + " heads " + std::to_string(rc.heads) + "/" +
               std::to_string(rc.kv_heads) + " head_dim " + std::to_string(rc.head_dim) +
               " rows " + std::to_string(rows) + (llama3 ? " llama3" : "") +
               (offset != 0 ? " misaligned" : "") + " rotary " + std::to_string(rot) + " scale " +
               std::to_string(scale));
  const auto inv = rope_inv_freq(rot, llama3 ? 500000.0f : 10000.0f,
                                 llama3 ? llama3_scaling() : rope_scaling{});
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::uniform_int_distribution<std::int32_t> position{0, 131071};
  std::vector<std::int32_t> pos(rows);
  for (auto& p : pos)
    p = position(rng);
  pos[0] = 0;
  const auto q0 = random_bits(t, std::size_t{rows} * rc.heads * rc.head_dim, seed + 1);
  const auto k0 = random_bits(t, std::size_t{rows} * rc.kv_heads * rc.head_dim, seed + 2);
  auto q_want = q0, k_want = k0;
  rope_reference(t, q_want, k_want, pos, inv, rows, rc.heads, rc.kv_heads, rc.head_dim, scale);

  const guarded d_q(q0, offset), d_k(k0, offset);
  const auto d_pos = to_device(pos);
  const auto d_inv = to_device(inv);
  rope(t, d_q.data(), d_k.data(), d_pos.data(), rope_freqs{d_inv.data(), rotary, scale}, rows, rc.heads,
       rc.kv_heads, rc.head_dim, nullptr);
  finish();
  const auto q = d_q.read(), k = d_k.read();
  EXPECT_TRUE(q.guards_intact);
  EXPECT_TRUE(k.guards_intact);
  const auto cq = compare_rope(t, q.data, q_want, q0, rc.head_dim, rot, scale);
  const auto ck = compare_rope(t, k.data, k_want, k0, rc.head_dim, rot, scale);
  EXPECT_EQ(cq.bad + cq.nan_mismatch, 0u) << "q " << cq.first;
  EXPECT_EQ(ck.bad + ck.nan_mismatch, 0u) << "k " << ck.first;
  EXPECT_LE(cq.inexact, inexact_allowance(q0.size()));
  EXPECT_LE(ck.inexact, inexact_allowance(k0.size()));
  // Position 0 (row 0) is the identity, exactly, unscaled; past `rotary`
  // every row is.
  for (std::size_t i = 0; i < std::size_t{rc.heads} * rc.head_dim; ++i) {
    if (scale == 1.0f || i % rc.head_dim >= rot) {
      ASSERT_EQ(q.data[i], q0[i]) << i;
    }
  }
  for (std::size_t i = 0; i < std::size_t{rc.kv_heads} * rc.head_dim; ++i) {
    if (scale == 1.0f || i % rc.head_dim >= rot) {
      ASSERT_EQ(k.data[i], k0[i]) << i;
    }
  }
  for (std::size_t i = 0; i < q0.size(); ++i) {
    if (i % rc.head_dim >= rot) {
      ASSERT_EQ(q.data[i], q0[i]) << i;
    }
  }
}

TEST(elementwise_kernel, rope_matches_reference_with_and_without_llama3_scaling) {
  TROUPE_REQUIRE_GPU();
  const std::pair<std::uint32_t, std::uint32_t> head_counts[] = {{8, 8}, {32, 8}, {40, 8}, {4, 1}};
  std::uint64_t seed = 500;
  for (bool llama3 : {false, true})
    for (dtype t : both_dtypes)
      for (std::uint32_t hd : {64u, 128u})
        for (const auto& [heads, kv_heads] : head_counts)
          for (std::uint32_t rows : row_counts)
            check_rope(t, {heads, kv_heads, hd}, rows, llama3, 0, seed += 10);
}

TEST(elementwise_kernel, rope_scalar_path_for_narrow_heads_and_misaligned_arrays) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (dtype t : both_dtypes) {
    check_rope(t, {6, 2, 40}, 7, false, 0, seed += 10);  // half 20: no 16-byte packs
    check_rope(t, {8, 2, 64}, 7, true, 1, seed += 10);   // arrays off alignment
    check_rope(t, {2, 1, 256}, 300, false, 0, seed += 10);
    check_rope(t, {3, 3, 2}, 7, false, 0, seed += 10);   // one pair per head
  }
}

TEST(elementwise_kernel, rope_partial_rotary_and_scale_match_reference) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 1300;
  for (dtype t : both_dtypes) {
    check_rope(t, {24, 8, 128}, 37, false, 0, seed += 10, 96, 1.19f); // Phi-4 mini: packs of 8
    check_rope(t, {4, 2, 64}, 7, true, 0, seed += 10, 48);             // 24 pairs, 16 pass through
    check_rope(t, {4, 2, 64}, 7, false, 1, seed += 10, 32, 0.75f);     // misaligned
    check_rope(t, {3, 1, 40}, 9, false, 0, seed += 10, 20, 1.5f);      // 10 pairs: no packs
    check_rope(t, {2, 2, 128}, 5, false, 0, seed += 10, 128, 1.19f);   // the whole head, scaled
  }
}

TEST(elementwise_kernel, rope_nan_stays_in_its_pair_and_bad_shapes_throw) {
  TROUPE_REQUIRE_GPU();
  const std::uint32_t hd = 128, heads = 4, rows = 3;
  for (dtype t : both_dtypes) {
    auto q0 = random_bits(t, std::size_t{rows} * heads * hd, 1001);
    const std::size_t poisoned = (1 * heads + 2) * hd + 10; // row 1, head 2, i 10
    q0[poisoned] = to_bits(t, std::numeric_limits<float>::quiet_NaN());
    const std::vector<std::int32_t> pos{0, 5, 9};
    const auto inv = rope_inv_freq(hd, 10000.0f, rope_scaling{});
    const guarded d_q(q0), d_k(std::vector<std::uint16_t>(std::size_t{rows} * hd, 0));
    const auto d_pos = to_device(pos);
    const auto d_inv = to_device(inv);
    rope(t, d_q.data(), d_k.data(), d_pos.data(), rope_freqs{d_inv.data()}, rows, heads, 1, hd, nullptr);
    finish();
    const auto q = d_q.read().data;
    for (std::size_t i = 0; i < q.size(); ++i)
      EXPECT_EQ(is_nan_bits(t, q[i]), i == poisoned || i == poisoned + hd / 2) << i;
  }
  EXPECT_THROW(rope(dtype::f16, nullptr, nullptr, nullptr, rope_freqs{}, 1, 1, 1, 63, nullptr),
               std::invalid_argument);
  EXPECT_THROW(rope(static_cast<dtype>(7), nullptr, nullptr, nullptr, rope_freqs{}, 1, 1, 1, 64,
                    nullptr),
               std::invalid_argument);
  for (std::uint32_t rotary : {31u, 66u}) // odd; past the head
    EXPECT_THROW(rope(dtype::f16, nullptr, nullptr, nullptr, rope_freqs{nullptr, rotary, 1.0f}, 1, 1, 1, 64,
                      nullptr),
                 std::invalid_argument);
}

// -- swiglu -------------------------------------------------------------------------------------

TEST(elementwise_kernel, swiglu_matches_reference) {
  TROUPE_REQUIRE_GPU();
  for (dtype t : both_dtypes)
    for (std::uint32_t inter : {64u, 14336u, 5120u, 37u})
      for (std::uint32_t rows : row_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(label(t, "inter", inter, rows, offset));
          const auto gu = random_bits(t, 2ull * rows * inter, 1101 + inter + rows, 4.0f);
          std::vector<std::uint16_t> want(std::size_t{rows} * inter);
          swiglu_reference(t, gu, rows, inter, want);
          const guarded d_gu(gu, offset);
          const guarded d_out(std::vector<std::uint16_t>(want.size(), 0));
          swiglu(t, d_gu.data(), rows, inter, d_out.data(), nullptr);
          finish();
          const auto got = d_out.read();
          EXPECT_TRUE(got.guards_intact);
          const auto c = compare_bits(t, got.data, want);
          EXPECT_EQ(c.bad + c.nan_mismatch, 0u) << c.first;
          EXPECT_LE(c.inexact, inexact_allowance(want.size()));
        }
}

TEST(elementwise_kernel, swiglu_extremes_and_nan) {
  TROUPE_REQUIRE_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // inter 8 (one 16-byte pack): gates, then ups.
  const std::vector<float> gate{1.0f, -60000.0f, 60000.0f, nan, 0.0f, -20.0f, 20.0f, -inf};
  const std::vector<float> up{3.0f, 7.0f, 2.0f, 1.0f, nan, 1.0f, 0.5f, 1.0f};
  for (dtype t : both_dtypes) {
    std::vector<std::uint16_t> gu;
    for (float g : gate)
      gu.push_back(to_bits(t, g));
    for (float u : up)
      gu.push_back(to_bits(t, u));
    std::vector<std::uint16_t> want(8);
    swiglu_reference(t, gu, 1, 8, want);
    const guarded d_gu(gu), d_out(std::vector<std::uint16_t>(8, 0));
    swiglu(t, d_gu.data(), 1, 8, d_out.data(), nullptr);
    finish();
    const auto got = d_out.read().data;
    for (std::size_t i = 0; i < 8; ++i) {
      SCOPED_TRACE(std::string(to_string(t)) + " element " + std::to_string(i));
      EXPECT_EQ(is_nan_bits(t, got[i]), is_nan_bits(t, want[i]));
      if (!is_nan_bits(t, want[i])) {
        EXPECT_LE(ulps(got[i], want[i]), 1);
      }
    }
    EXPECT_TRUE(is_nan_bits(t, got[3]));
    EXPECT_TRUE(is_nan_bits(t, got[4]));
    EXPECT_EQ(from_bits(t, got[1]), 0.0f);
  }
}

// -- add_bias -----------------------------------------------------------------------------------

TEST(elementwise_kernel, add_bias_matches_reference) {
  TROUPE_REQUIRE_GPU();
  for (dtype t : both_dtypes)
    for (std::uint32_t cols : {64u, 896u, 128u, 37u})
      for (std::uint32_t rows : row_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(label(t, "cols", cols, rows, offset));
          const auto x = random_bits(t, std::size_t{rows} * cols, 1201 + cols + rows, 4.0f);
          const auto bias = random_bits(t, cols, 1301 + cols, 2.0f);
          std::vector<std::uint16_t> want = x;
          add_bias_reference(t, want, bias, rows, cols);
          const guarded d_x(x, offset);
          const guarded d_bias(bias, offset);
          add_bias(t, d_x.data(), d_bias.data(), rows, cols, nullptr);
          finish();
          const auto got = d_x.read();
          EXPECT_TRUE(got.guards_intact);
          // One fp32 add rounded once: the same bits.
          const auto c = compare_bits(t, got.data, want);
          EXPECT_EQ(c.bad + c.nan_mismatch + c.inexact, 0u) << c.first;
        }
}

TEST(elementwise_kernel, no_rows_launch_nothing) {
  TROUPE_REQUIRE_GPU();
  embedding_gather(dtype::f16, nullptr, nullptr, 0, 64, nullptr, nullptr);
  rmsnorm(dtype::f16, nullptr, nullptr, eps, 0, 64, nullptr, nullptr);
  add_rmsnorm(dtype::bf16, nullptr, nullptr, nullptr, eps, 0, 64, nullptr, nullptr);
  rope(dtype::bf16, nullptr, nullptr, nullptr, rope_freqs{}, 0, 8, 8, 64, nullptr);
  swiglu(dtype::f16, nullptr, 0, 64, nullptr, nullptr);
  add_bias(dtype::bf16, nullptr, nullptr, 0, 64, nullptr);
  finish();
}

} // namespace
} // namespace troupe::gpu::cuda
