// The elementwise references (gpu/cuda/reference_elementwise.hpp) against
// straightforward fp64 formulas, and their rounding points: outputs rounded
// once, add_rmsnorm normalising the rounded residual, rotary angles as HF's
// fp32 products, rope_inv_freq with and without llama3 scaling.
#include "gpu/cuda/reference_elementwise.hpp"

#include "elementwise_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <type_traits>

namespace troupe::gpu::cuda {
namespace {

using namespace elementwise_test;

static_assert(std::is_trivially_copyable_v<rope_cos_sin>);
static_assert(std::is_trivially_copyable_v<rope_pair>);

constexpr float eps = 1e-5f;
const std::uint32_t hiddens[] = {64, 4096, 5120, 37};
const std::uint32_t row_counts[] = {1, 7, 300};

// -- rope_inv_freq ---------------------------------------------------------------

TEST(elementwise_reference, inv_freq_is_hf_default_without_scaling) {
  for (std::uint32_t hd : {64u, 128u}) {
    const auto inv = rope_inv_freq(hd, 10000.0f, rope_scaling{});
    ASSERT_EQ(inv.size(), hd / 2);
    EXPECT_EQ(inv[0], 1.0f);
    for (std::uint32_t i = 0; i < hd / 2; ++i) {
      // transformers' float32 steps (bit for bit: gpu_oracle_test's
      // rope_frequencies) stay within a few ulps of the exact value.
      const double want = std::pow(10000.0, -2.0 * i / hd);
      EXPECT_NEAR(inv[i], want, 8 * 6e-8 * want) << "i " << i;
      if (i > 0) {
        EXPECT_LT(inv[i], inv[i - 1]);
      }
    }
  }
  // A type it does not know (the config reader refuses "dynamic"): unscaled.
  rope_scaling other;
  other.type = "dynamic";
  other.factor = 4.0;
  const auto plain = rope_inv_freq(128, 500000.0f, rope_scaling{});
  EXPECT_EQ(rope_inv_freq(128, 500000.0f, other), plain);
  // Linear: each divided by factor.
  other.type = "linear";
  const auto linear = rope_inv_freq(128, 500000.0f, other);
  ASSERT_EQ(linear.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(linear[i], plain[i] / 4.0f) << i;
  EXPECT_THROW(rope_inv_freq(63, 10000.0f, rope_scaling{}), std::invalid_argument);
  EXPECT_THROW(rope_inv_freq(0, 10000.0f, rope_scaling{}), std::invalid_argument);
}

TEST(elementwise_reference, inv_freq_longrope_divides_each_pair_by_its_factor) {
  rope_scaling s;
  s.type = "longrope";
  for (std::uint32_t i = 0; i < 48; ++i) {
    s.short_factor.push_back(1.0 + 0.01 * i);
    s.long_factor.push_back(1.0 + i);
  }
  const auto plain = rope_inv_freq(96, 10000.0f, rope_scaling{});
  const auto shorter = rope_inv_freq(96, 10000.0f, s);
  const auto longer = rope_inv_freq(96, 10000.0f, s, true);
  ASSERT_EQ(shorter.size(), 48u);
  ASSERT_EQ(longer.size(), 48u);
  for (std::uint32_t i = 0; i < 48; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / 96);
    EXPECT_NEAR(shorter[i], base / s.short_factor[i], 8 * 6e-8 * base / s.short_factor[i]) << i;
    EXPECT_NEAR(longer[i], base / s.long_factor[i], 8 * 6e-8 * base / s.long_factor[i]) << i;
  }
  EXPECT_EQ(shorter[0], plain[0]); // a factor of 1 changes nothing
  EXPECT_THROW(rope_inv_freq(128, 10000.0f, s), std::invalid_argument); // 48 factors, 64 pairs
}

TEST(elementwise_reference, rope_for_turns_a_pass_past_the_pretrained_context_by_the_long_factors) {
  llama_config c;
  c.head_dim = 8;
  c.rotary_dim = 6;
  c.max_position_embeddings = 64;
  c.rope.type = "longrope";
  c.rope.original_max_position_embeddings = 16;
  c.rope.short_factor = {1.0, 2.0, 4.0};
  c.rope.long_factor = {8.0, 16.0, 32.0};
  c.rope.attention_factor = 1.25;
  const auto shorter = rope_inv_freq(6, c.rope_theta, c.rope);
  const auto longer = rope_inv_freq(6, c.rope_theta, c.rope, true);
  ASSERT_NE(shorter, longer);
  const auto t = rope_for(c);
  EXPECT_EQ(t.rotary_dim(), 6u);
  EXPECT_EQ(t.inv_freq, shorter);
  EXPECT_EQ(t.long_inv_freq, longer);
  EXPECT_EQ(t.long_after, 16u);
  EXPECT_EQ(t.scale, 1.25f);
  // Hugging Face's rule: a pass after which the sequence holds 16 tokens
  // turns by the short factors, one after which it holds 17 by the long.
  EXPECT_EQ(t.for_length(1), shorter);
  EXPECT_EQ(t.for_length(16), shorter);
  EXPECT_EQ(t.for_length(17), longer);
  EXPECT_EQ(t.for_length(100000), longer);
  c.rope = rope_scaling{}; // no scaling: one set over the whole head, unscaled
  c.rotary_dim = 0;
  const auto plain = rope_for(c);
  EXPECT_EQ(plain.inv_freq, rope_inv_freq(8, c.rope_theta, rope_scaling{}));
  EXPECT_TRUE(plain.long_inv_freq.empty());
  EXPECT_EQ(plain.for_length(100000), plain.inv_freq);
  EXPECT_EQ(plain.scale, 1.0f);
}

TEST(elementwise_reference, inv_freq_llama3_scales_low_frequencies_and_blends_the_middle) {
  const auto s = llama3_scaling();
  const auto plain = rope_inv_freq(128, 500000.0f, rope_scaling{});
  const auto scaled = rope_inv_freq(128, 500000.0f, s);
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const double freq = plain[i];
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < 8192.0 / 4.0) { // high frequency: unchanged
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++kept;
    } else if (wavelen > 8192.0 / 1.0) { // low frequency: divided by the factor
      EXPECT_EQ(scaled[i], static_cast<float>(freq / 8.0)) << i;
      ++divided;
    } else { // between: (1 - s) f / factor + s f, s = (8192 / wavelen - 1) / (4 - 1)
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_GE(smooth, 0.0);
      EXPECT_LE(smooth, 1.0);
      EXPECT_NEAR(scaled[i], (1 - smooth) * freq / 8.0 + smooth * freq, 1e-7 * freq) << i;
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8.0f);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  EXPECT_EQ(scaled[0], 1.0f); // wavelength 2 pi
}

// -- embedding_gather ---------------------------------------------------------------

TEST(elementwise_reference, embedding_gather_copies_rows_and_checks_ids) {
  const std::uint32_t hidden = 5, vocab = 9;
  std::vector<std::uint16_t> table(vocab * hidden);
  for (std::size_t i = 0; i < table.size(); ++i)
    table[i] = static_cast<std::uint16_t>(1000 + i);
  const std::vector<std::int32_t> ids{8, 0, 3, 3};
  std::vector<std::uint16_t> out(ids.size() * hidden, 0);
  embedding_gather_reference(table, ids, hidden, out);
  for (std::size_t r = 0; r < ids.size(); ++r)
    for (std::uint32_t i = 0; i < hidden; ++i)
      EXPECT_EQ(out[r * hidden + i], table[ids[r] * hidden + i]);
  const std::vector<std::int32_t> bad{9};
  EXPECT_THROW(embedding_gather_reference(table, bad, hidden, out), std::out_of_range);
  const std::vector<std::int32_t> negative{-1};
  EXPECT_THROW(embedding_gather_reference(table, negative, hidden, out), std::out_of_range);
  std::vector<std::uint16_t> short_out(hidden);
  EXPECT_THROW(embedding_gather_reference(table, ids, hidden, short_out), std::invalid_argument);
}

// -- rmsnorm ---------------------------------------------------------------------------

// fp64: w x / sqrt(mean(x^2) + eps), rounded once.
std::vector<std::uint16_t> rmsnorm_fp64(dtype t, std::span<const std::uint16_t> x,
                                        std::span<const std::uint16_t> w, std::uint32_t rows,
                                        std::uint32_t hidden) {
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::uint32_t i = 0; i < hidden; ++i) {
      const double v = from_bits(t, x[r * hidden + i]);
      ss += v * v;
    }
    const double scale = 1.0 / std::sqrt(ss / hidden + eps);
    for (std::uint32_t i = 0; i < hidden; ++i)
      out[r * hidden + i] =
        bits_of(t, from_bits(t, w[i]) * (from_bits(t, x[r * hidden + i]) * scale));
  }
  return out;
}

TEST(elementwise_reference, rmsnorm_matches_fp64_and_rounds_once) {
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : hiddens)
      for (std::uint32_t rows : row_counts) {
        SCOPED_TRACE(std::string(to_string(t)) + " hidden " + std::to_string(hidden) + " rows " +
                     std::to_string(rows));
        const auto x = random_bits(t, std::size_t{rows} * hidden, 11 + hidden + rows, 2.0f);
        const auto w = random_bits(t, hidden, 12 + hidden, 0.2f, 1.0f);
        std::vector<std::uint16_t> out(x.size());
        rmsnorm_reference(t, x, w, eps, rows, hidden, out);
        const auto want = rmsnorm_fp64(t, x, w, rows, hidden);
        const auto c = compare_bits(t, out, want);
        EXPECT_EQ(c.bad, 0u) << c.first;
        EXPECT_EQ(c.nan_mismatch, 0u);
        EXPECT_LE(c.inexact, inexact_allowance(out.size()));
      }
}

TEST(elementwise_reference, rmsnorm_rounds_the_product_once_not_per_factor) {
  // HF rounds x * scale to the dtype before the weight; the kernels do not.
  for (dtype t : both_dtypes) {
    const std::uint32_t hidden = 4096;
    const auto x = random_bits(t, hidden, 21, 1.5f);
    const auto w = random_bits(t, hidden, 22, 0.3f, 1.0f);
    std::vector<std::uint16_t> out(hidden);
    rmsnorm_reference(t, x, w, eps, 1, hidden, out);
    std::vector<float> xf(hidden);
    for (std::uint32_t i = 0; i < hidden; ++i)
      xf[i] = from_bits(t, x[i]);
    const float scale = rms_scale(xf, eps);
    std::size_t twice_differs = 0;
    for (std::uint32_t i = 0; i < hidden; ++i) {
      const float wi = from_bits(t, w[i]);
      const std::uint16_t once = to_bits(t, wi * (xf[i] * scale));
      const std::uint16_t twice = to_bits(t, wi * round_to(t, xf[i] * scale));
      EXPECT_EQ(out[i], once) << i;
      twice_differs += once != twice;
    }
    EXPECT_GT(twice_differs, 0u) << "the data cannot tell the rounding points apart";
  }
}

TEST(elementwise_reference, rmsnorm_nan_poisons_only_its_row_and_zero_rows_stay_zero) {
  for (dtype t : both_dtypes) {
    const std::uint32_t hidden = 64, rows = 3;
    auto x = random_bits(t, rows * hidden, 31);
    const auto w = random_bits(t, hidden, 32, 0.1f, 1.0f);
    x[hidden + 5] = to_bits(t, std::numeric_limits<float>::quiet_NaN());
    for (std::uint32_t i = 0; i < hidden; ++i)
      x[2 * hidden + i] = 0;
    std::vector<std::uint16_t> out(x.size());
    rmsnorm_reference(t, x, w, eps, rows, hidden, out);
    for (std::uint32_t i = 0; i < hidden; ++i) {
      EXPECT_FALSE(is_nan_bits(t, out[i]));
      EXPECT_TRUE(is_nan_bits(t, out[hidden + i]));
      EXPECT_EQ(from_bits(t, out[2 * hidden + i]), 0.0f);
    }
  }
}

TEST(elementwise_reference, rmsnorm_rejects_short_spans) {
  std::vector<std::uint16_t> x(64), w(63), out(64);
  EXPECT_THROW(rmsnorm_reference(dtype::f16, x, w, eps, 1, 64, out), std::invalid_argument);
  std::vector<std::uint16_t> w64(64), out_short(10);
  EXPECT_THROW(rmsnorm_reference(dtype::f16, x, w64, eps, 1, 64, out_short),
               std::invalid_argument);
}

// -- add_rmsnorm -------------------------------------------------------------------------

TEST(elementwise_reference, add_rmsnorm_rounds_the_sum_then_normalises_it) {
  for (dtype t : both_dtypes)
    for (std::uint32_t hidden : hiddens) {
      const std::uint32_t rows = 7;
      SCOPED_TRACE(std::string(to_string(t)) + " hidden " + std::to_string(hidden));
      const auto res0 = random_bits(t, std::size_t{rows} * hidden, 41 + hidden, 4.0f);
      const auto x = random_bits(t, res0.size(), 42 + hidden, 1.0f);
      const auto w = random_bits(t, hidden, 43, 0.2f, 1.0f);
      auto res = res0;
      std::vector<std::uint16_t> out(res.size());
      add_rmsnorm_reference(t, res, x, w, eps, rows, hidden, out);
      // The residual: the fp32 sum rounded once.
      for (std::size_t i = 0; i < res.size(); ++i)
        ASSERT_EQ(res[i], bits_of(t, static_cast<double>(from_bits(t, res0[i])) + from_bits(t, x[i])))
          << i;
      // The output: the plain norm of the rounded residual, bit for bit.
      std::vector<std::uint16_t> normed(res.size());
      rmsnorm_reference(t, res, w, eps, rows, hidden, normed);
      EXPECT_EQ(out, normed);
      // Against fp64 of the rounded residual.
      const auto c = compare_bits(t, out, rmsnorm_fp64(t, res, w, rows, hidden));
      EXPECT_EQ(c.bad, 0u) << c.first;
      // Normalising the unrounded sum would give other values somewhere.
      std::size_t unrounded_differs = 0;
      for (std::size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (std::uint32_t i = 0; i < hidden; ++i) {
          const double s = static_cast<double>(from_bits(t, res0[r * hidden + i])) +
                           from_bits(t, x[r * hidden + i]);
          ss += s * s;
        }
        const double scale = 1.0 / std::sqrt(ss / hidden + eps);
        for (std::uint32_t i = 0; i < hidden; ++i) {
          const double s = static_cast<double>(from_bits(t, res0[r * hidden + i])) +
                           from_bits(t, x[r * hidden + i]);
          unrounded_differs += bits_of(t, from_bits(t, w[i]) * s * scale) != out[r * hidden + i];
        }
      }
      EXPECT_GT(unrounded_differs, 0u);
    }
}

// -- rope ----------------------------------------------------------------------------------

struct rope_case {
  std::uint32_t heads, kv_heads, head_dim;
};

// fp64 rotate-half with HF's fp32 angle.
void rope_fp64(dtype t, std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
               std::span<const std::int32_t> pos, std::span<const float> inv, std::uint32_t rows,
               std::uint32_t heads, std::uint32_t hd) {
  const std::uint32_t half = hd / 2;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t base = (r * heads + h) * hd;
      for (std::uint32_t i = 0; i < half; ++i) {
        const double angle = static_cast<float>(pos[r]) * inv[i];
        const double a = from_bits(t, in[base + i]);
        const double b = from_bits(t, in[base + half + i]);
        out[base + i] = bits_of(t, a * std::cos(angle) - b * std::sin(angle));
        out[base + half + i] = bits_of(t, b * std::cos(angle) + a * std::sin(angle));
      }
    }
}

TEST(elementwise_reference, rope_matches_fp64_rotate_half_for_q_and_k) {
  const rope_case cases[] = {{8, 8, 64}, {32, 8, 128}, {4, 1, 64}, {6, 2, 40}};
  for (bool llama3 : {false, true})
    for (dtype t : both_dtypes)
      for (const auto& rc : cases) {
        SCOPED_TRACE(std::string(to_string(t)) + " heads " + std::to_string(rc.heads) + "/" +
                     std::to_string(rc.kv_heads) + " head_dim " + std::to_string(rc.head_dim) +
                     (llama3 ? " llama3" : ""));
        const std::uint32_t rows = 7;
        const auto inv = rope_inv_freq(rc.head_dim, llama3 ? 500000.0f : 10000.0f,
                                       llama3 ? llama3_scaling() : rope_scaling{});
        const std::vector<std::int32_t> pos{0, 1, 17, 4095, 8191, 65536, 131071};
        const auto q0 = random_bits(t, std::size_t{rows} * rc.heads * rc.head_dim, 51);
        const auto k0 = random_bits(t, std::size_t{rows} * rc.kv_heads * rc.head_dim, 52);
        auto q = q0, k = k0;
        rope_reference(t, q, k, pos, inv, rows, rc.heads, rc.kv_heads, rc.head_dim);
        std::vector<std::uint16_t> qw(q.size()), kw(k.size());
        rope_fp64(t, q0, qw, pos, inv, rows, rc.heads, rc.head_dim);
        rope_fp64(t, k0, kw, pos, inv, rows, rc.kv_heads, rc.head_dim);
        // Where a cos - b sin cancels, fp32 and fp64 differ by a few fp32 ulps of |a| + |b|.
        auto tol_of = [&](const std::vector<std::uint16_t>& in) {
          return [&t, &in, hd = rc.head_dim](std::size_t i) {
            const std::size_t head = i / hd * hd, j = i % hd % (hd / 2);
            return 1e-6 * (std::abs(from_bits(t, in[head + j])) +
                           std::abs(from_bits(t, in[head + hd / 2 + j])));
          };
        };
        const auto cq = compare_bits(t, q, qw, tol_of(q0));
        const auto ck = compare_bits(t, k, kw, tol_of(k0));
        EXPECT_EQ(cq.bad, 0u) << cq.first;
        EXPECT_EQ(ck.bad, 0u) << ck.first;
        EXPECT_LE(cq.inexact, inexact_allowance(q.size()));
        EXPECT_LE(ck.inexact, inexact_allowance(k.size()));
        // Position 0 (row 0) is the identity, exactly.
        for (std::uint32_t i = 0; i < rc.heads * rc.head_dim; ++i)
          EXPECT_EQ(q[i], q0[i]);
        for (std::uint32_t i = 0; i < rc.kv_heads * rc.head_dim; ++i)
          EXPECT_EQ(k[i], k0[i]);
      }
}

TEST(elementwise_reference, rope_pairs_element_i_with_i_plus_half) {
  // A unit vector on element j turns into (cos, sin) on (j, j + half).
  const std::uint32_t hd = 64, half = 32;
  const auto inv = rope_inv_freq(hd, 10000.0f, rope_scaling{});
  for (std::uint32_t j : {0u, 5u, 31u}) {
    std::vector<std::uint16_t> q(hd, 0), k(hd, 0);
    q[j] = to_bits(dtype::f16, 1.0f);
    k[j + half] = to_bits(dtype::f16, 1.0f);
    const std::vector<std::int32_t> pos{3};
    rope_reference(dtype::f16, q, k, pos, inv, 1, 1, 1, hd);
    const double angle = 3.0f * inv[j];
    for (std::uint32_t i = 0; i < hd; ++i) {
      const float qv = from_bits(dtype::f16, q[i]);
      const float kv = from_bits(dtype::f16, k[i]);
      if (i == j) {
        EXPECT_EQ(q[i], bits_of(dtype::f16, std::cos(angle)));
        EXPECT_EQ(k[i], bits_of(dtype::f16, -std::sin(angle)));
      } else if (i == j + half) {
        EXPECT_EQ(q[i], bits_of(dtype::f16, std::sin(angle)));
        EXPECT_EQ(k[i], bits_of(dtype::f16, std::cos(angle)));
      } else {
        EXPECT_EQ(qv, 0.0f) << i;
        EXPECT_EQ(kv, 0.0f) << i;
      }
    }
  }
}

TEST(elementwise_reference, rope_angle_is_the_fp32_product_as_in_hf) {
  // Far out, the fp32 angle and the exact one part by more than an ulp.
  const std::uint32_t hd = 128, rows = 64;
  const auto inv = rope_inv_freq(hd, 10000.0f, rope_scaling{});
  std::vector<std::int32_t> pos(rows);
  for (std::uint32_t r = 0; r < rows; ++r)
    pos[r] = 100003 + 977 * static_cast<std::int32_t>(r);
  const auto q0 = random_bits(dtype::f16, std::size_t{rows} * hd, 61);
  auto q = q0;
  std::vector<std::uint16_t> k;
  rope_reference(dtype::f16, q, k, pos, inv, rows, 1, 0, hd);
  std::size_t exact_angle_differs = 0;
  for (std::uint32_t r = 0; r < rows; ++r)
    for (std::uint32_t i = 0; i < hd / 2; ++i) {
      const float a = from_bits(dtype::f16, q0[r * hd + i]);
      const float b = from_bits(dtype::f16, q0[r * hd + hd / 2 + i]);
      const rope_pair p = rope_rotate(a, b, rope_angle(pos[r], inv[i]));
      EXPECT_EQ(q[r * hd + i], to_bits(dtype::f16, p.a));
      const double exact = static_cast<double>(pos[r]) * inv[i];
      const std::uint16_t other = bits_of(dtype::f16, a * std::cos(exact) - b * std::sin(exact));
      exact_angle_differs += ulps(other, q[r * hd + i]) > 1;
    }
  EXPECT_GT(exact_angle_differs, 0u);
}

TEST(elementwise_reference, partial_rope_turns_the_leading_elements_as_a_head_of_their_own) {
  // 48 of 64 elements turn: they come out as a 48-element head's would,
  // the other 16 as they were; a scale of 2 doubles the turned ones exactly.
  const std::uint32_t hd = 64, rot = 48, rows = 5, heads = 3;
  const auto inv = rope_inv_freq(rot, 10000.0f, rope_scaling{});
  ASSERT_EQ(inv.size(), rot / 2);
  const std::vector<std::int32_t> pos{0, 1, 17, 4095, 70000};
  for (dtype t : {dtype::f16, dtype::bf16}) {
    const auto q0 = random_bits(t, std::size_t{rows} * heads * hd, 71);
    auto q = q0, q2 = q0;
    std::vector<std::uint16_t> none;
    rope_reference(t, q, none, pos, inv, rows, heads, 0, hd);
    rope_reference(t, q2, none, pos, inv, rows, heads, 0, hd, 2.0f);
    std::vector<std::uint16_t> lead;
    for (std::size_t h = 0; h < std::size_t{rows} * heads; ++h)
      lead.insert(lead.end(), q0.begin() + h * hd, q0.begin() + h * hd + rot);
    rope_reference(t, lead, none, pos, inv, rows, heads, 0, rot);
    for (std::size_t h = 0; h < std::size_t{rows} * heads; ++h)
      for (std::uint32_t e = 0; e < hd; ++e) {
        const std::size_t i = h * hd + e;
        if (e >= rot) {
          EXPECT_EQ(q[i], q0[i]) << i;
          EXPECT_EQ(q2[i], q0[i]) << i;
        } else {
          EXPECT_EQ(q[i], lead[h * rot + e]) << i;
          EXPECT_EQ(from_bits(t, q2[i]), 2.0f * from_bits(t, q[i])) << i;
        }
      }
  }
}

TEST(elementwise_reference, rope_rejects_odd_head_dim_and_short_spans) {
  std::vector<std::uint16_t> q(63), k(63);
  const std::vector<std::int32_t> pos{0};
  const std::vector<float> inv(32, 1.0f);
  EXPECT_THROW(rope_reference(dtype::bf16, q, k, pos, inv, 1, 1, 1, 63), std::invalid_argument);
  std::vector<std::uint16_t> q64(64), k64(64);
  for (const std::size_t n : {std::size_t{0}, std::size_t{33}}) // none; more pairs than the head has
    EXPECT_THROW(rope_reference(dtype::bf16, q64, k64, pos, std::vector<float>(n, 1.0f), 1, 1, 1, 64),
                 std::invalid_argument);
  EXPECT_THROW(rope_reference(dtype::bf16, q64, k64, pos, inv, 2, 1, 1, 64),
               std::invalid_argument);
}

// -- swiglu -----------------------------------------------------------------------------------

TEST(elementwise_reference, swiglu_matches_fp64_silu_times_up) {
  for (dtype t : both_dtypes)
    for (std::uint32_t inter : {64u, 14336u, 37u})
      for (std::uint32_t rows : row_counts) {
        SCOPED_TRACE(std::string(to_string(t)) + " inter " + std::to_string(inter) + " rows " +
                     std::to_string(rows));
        const auto gu = random_bits(t, 2ull * rows * inter, 71 + inter + rows, 3.0f);
        std::vector<std::uint16_t> out(std::size_t{rows} * inter);
        swiglu_reference(t, gu, rows, inter, out);
        std::vector<std::uint16_t> want(out.size());
        for (std::size_t r = 0; r < rows; ++r)
          for (std::uint32_t i = 0; i < inter; ++i) {
            const double g = from_bits(t, gu[2 * r * inter + i]);
            const double u = from_bits(t, gu[2 * r * inter + inter + i]);
            want[r * inter + i] = bits_of(t, g / (1.0 + std::exp(-g)) * u);
          }
        const auto c = compare_bits(t, out, want);
        EXPECT_EQ(c.bad, 0u) << c.first;
        EXPECT_LE(c.inexact, inexact_allowance(out.size()));
      }
}

TEST(elementwise_reference, swiglu_reads_gate_then_up_and_handles_extremes) {
  const dtype t = dtype::f16;
  // rows 2, inter 3: [g0 g1 g2 u0 u1 u2] per row.
  const std::vector<float> vals{1, -2, 60000, 3, 5, 2, -60000, 0, 0.5f, 7, 1, -1};
  std::vector<std::uint16_t> gu(vals.size());
  for (std::size_t i = 0; i < vals.size(); ++i)
    gu[i] = to_bits(t, vals[i]);
  gu[11] = to_bits(t, std::numeric_limits<float>::quiet_NaN()); // u of row 1, element 2
  std::vector<std::uint16_t> out(6);
  swiglu_reference(t, gu, 2, 3, out);
  auto silu = [](double g) { return g / (1 + std::exp(-g)); };
  EXPECT_EQ(out[0], bits_of(t, silu(1) * 3));
  EXPECT_EQ(out[1], bits_of(t, silu(-2) * 5));
  EXPECT_TRUE(std::isinf(from_bits(t, out[2]))); // 60000 * 2 overflows fp16
  EXPECT_EQ(from_bits(t, out[3]), 0.0f);         // silu(-60000) is -0
  EXPECT_EQ(from_bits(t, out[4]), 0.0f);         // silu(0) * 1
  EXPECT_TRUE(is_nan_bits(t, out[5]));
  std::vector<std::uint16_t> short_gu(11);
  EXPECT_THROW(swiglu_reference(t, short_gu, 2, 3, out), std::invalid_argument);
}

// -- add_bias ---------------------------------------------------------------------------------

TEST(elementwise_reference, add_bias_adds_each_column_its_bias_rounded_once) {
  for (dtype t : both_dtypes)
    for (std::uint32_t cols : {64u, 37u})
      for (std::uint32_t rows : row_counts) {
        SCOPED_TRACE(std::string(to_string(t)) + " cols " + std::to_string(cols) + " rows " +
                     std::to_string(rows));
        const auto x = random_bits(t, std::size_t{rows} * cols, 81 + cols + rows, 3.0f);
        const auto bias = random_bits(t, cols, 91 + cols, 3.0f);
        std::vector<std::uint16_t> out = x;
        add_bias_reference(t, out, bias, rows, cols);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::uint32_t i = 0; i < cols; ++i) {
            // Two 16-bit values sum exactly in fp64: one rounding, to t.
            const double sum = static_cast<double>(from_bits(t, x[r * cols + i])) + from_bits(t, bias[i]);
            ASSERT_EQ(out[r * cols + i], bits_of(t, sum)) << "row " << r << " column " << i;
          }
      }
  std::vector<std::uint16_t> x(6), bias(2);
  EXPECT_THROW(add_bias_reference(dtype::f16, x, bias, 2, 3), std::invalid_argument) << "bias too short";
  EXPECT_THROW(add_bias_reference(dtype::f16, x, std::vector<std::uint16_t>(3), 3, 3), std::invalid_argument);
}

} // namespace
} // namespace troupe::gpu::cuda
