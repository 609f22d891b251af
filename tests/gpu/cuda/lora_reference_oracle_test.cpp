// The LoRA references against the math they stand for: shrink then expand
// over packed pages equals y0 + scale * B (A x) computed in double from the
// adapter's fp32 matrices (gpu::lora_adapter, as the cpu backend holds
// them), within what rounding A and B to fp16 / bf16 and y once can explain:
// a bound per element and a tighter one on the root mean square. Ranks 8 to
// 128 in one batch, MHA and GQA shapes, q_dim wider than hidden.
#include "gpu/cuda/lora_pack.hpp"
#include "gpu/cuda/reference_lora.hpp"
#include "gpu/lora.hpp"
#include "tests/gpu/cuda/lora_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace troupe::gpu::cuda {
namespace {

using namespace lora_testing;

constexpr shape mha{"mha", {.num_layers = 2, .num_kv_heads = 4, .head_dim = 32, .page_tokens = 4},
                    128, 128};
constexpr shape gqa_small{"gqa", {.num_layers = 2, .num_kv_heads = 2, .head_dim = 32, .page_tokens = 8},
                          256, 256};
constexpr shape wide_q{"q wider than hidden",
                       {.num_layers = 2, .num_kv_heads = 2, .head_dim = 32, .page_tokens = 8}, 256,
                       384};

/// Unit roundoff of t: half an ulp at 1.
constexpr double unit_roundoff(dtype t) { return t == dtype::f16 ? 0x1p-11 : 0x1p-8; }

TEST(lora_reference_oracle, shrink_then_expand_is_scale_b_a_x) {
  std::uint64_t seed = 1;
  for (const shape& s : {mha, gqa_small, wide_q})
    for (dtype t : {dtype::f16, dtype::bf16}) {
      const auto l = s.layout();
      ASSERT_NE(l.page_elems, 0u) << s.name;
      const std::uint32_t ranks[] = {8, 16, 32, 64, 128};
      std::vector<gpu::lora_adapter> adapters;
      for (std::uint32_t i = 0; i < std::size(ranks); ++i)
        adapters.push_back(random_adapter(l, ranks[i], 16.0f / float(ranks[i]) + 0.5f, seed++));
      const auto p = make_pool(l, t, adapters, 9, seed++);
      // Prefills and decodes on every adapter, two on the base model.
      std::vector<step_entry> batch;
      const std::int64_t which[] = {2, -1, 0, 4, 1, 3, 2, -1, 4, 0};
      const std::uint32_t rows[] = {7, 1, 1, 12, 3, 1, 1, 5, 1, 20};
      for (std::uint32_t e = 0; e < std::size(which); ++e)
        batch.push_back(lora_entry(p, e, which[e], rows[e] == 1 ? 6 : 0, rows[e], s.kv.page_tokens));
      const auto plan = plan_for(p, s.kv, batch);
      ASSERT_EQ(plan.slots.size(), 5u);

      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        for (std::uint32_t pi = 0; pi < lora_proj_count; ++pi) {
          const auto proj = static_cast<lora_proj>(pi);
          SCOPED_TRACE(std::string(s.name) + " " + std::string(to_string(t)) + " layer " +
                       std::to_string(layer) + " " +
                       std::string(gpu::to_string(static_cast<gpu::lora_target>(pi))));
          const std::uint32_t in = l.in_dim(proj);
          const std::uint32_t out = l.out_dim(proj);
          const std::uint32_t n = plan.rows();
          const auto x = random_bits(t, std::size_t{n} * in, 1.0f, seed++);
          const auto y0 = random_bits(t, std::size_t{n} * out, 0.5f, seed++);
          std::vector<float> tmp(std::size_t{n} * plan.max_rank, 0.0f);
          lora_shrink_reference(t, plan, l, layer, proj, x, p.data, tmp);
          auto y = y0;
          lora_expand_reference(t, plan, l, layer, proj, tmp, p.data, y);

          const double u = unit_roundoff(t);
          double tmp_err2 = 0, tmp_norm2 = 0, y_err2 = 0, delta2 = 0, ulp2 = 0;
          std::uint64_t bad_tmp = 0, bad_y = 0, base_changed = 0;
          for (std::uint32_t r = 0; r < n; ++r) {
            const std::uint32_t entry = plan.order[plan.row_seq[r]];
            if (batch[entry].adapter_id == 0) {
              for (std::uint32_t o = 0; o < out; ++o)
                base_changed += y[std::size_t{r} * out + o] != y0[std::size_t{r} * out + o];
              continue;
            }
            const gpu::lora_adapter& a = adapters[batch[entry].adapter_id - 1];
            const auto& m = a.layers[layer][pi];
            const std::uint32_t rank = a.rank;
            // t_j = A_j . x in double from the fp32 matrix; S_j = sum |A_jk x_k|.
            std::vector<double> tj(rank), sj(rank);
            for (std::uint32_t j = 0; j < rank; ++j) {
              for (std::uint32_t k = 0; k < in; ++k) {
                const double term =
                  double(m.a[std::size_t{j} * in + k]) * from_bits(t, x[std::size_t{r} * in + k]);
                tj[j] += term;
                sj[j] += std::fabs(term);
              }
              const double got = tmp[std::size_t{r} * plan.max_rank + j];
              const double err = std::fabs(got - tj[j]);
              tmp_err2 += err * err;
              tmp_norm2 += tj[j] * tj[j];
              if (!(err <= 1.01 * u * sj[j] + 1e-6 * sj[j]))
                ++bad_tmp;
            }
            for (std::uint32_t o = 0; o < out; ++o) {
              double delta = 0, mag = 0;
              for (std::uint32_t j = 0; j < rank; ++j) {
                const double b = m.b[std::size_t{o} * rank + j];
                delta += b * tj[j];
                mag += std::fabs(b) * sj[j];
              }
              delta *= a.scale;
              mag *= std::fabs(a.scale);
              const double want = from_bits(t, y0[std::size_t{r} * out + o]) + delta;
              const double got = from_bits(t, y[std::size_t{r} * out + o]);
              const double one_ulp = ulp(t, static_cast<float>(want));
              const double err = std::fabs(got - want);
              // A and B rounded (u each, relative), y rounded once (half an ulp
              // of the value before rounding: one of `want` where they straddle
              // a power of two).
              if (!(err <= one_ulp + 2.02 * u * mag + 1e-6 * (mag + std::fabs(want))))
                ++bad_y;
              y_err2 += err * err;
              delta2 += delta * delta;
              ulp2 += one_ulp * one_ulp;
            }
          }
          EXPECT_EQ(base_changed, 0u);
          EXPECT_EQ(bad_tmp, 0u) << "tmp entries outside the rounding bound";
          EXPECT_EQ(bad_y, 0u) << "y entries outside the rounding bound";
          // On the whole, the error is that of rounding the weights (about u
          // of the result) and y (at most half an ulp), not of a wrong term.
          EXPECT_LE(std::sqrt(tmp_err2), 2.0 * u * std::sqrt(tmp_norm2));
          EXPECT_LE(std::sqrt(y_err2), 3.0 * u * std::sqrt(delta2) + 0.5 * std::sqrt(ulp2));
          EXPECT_GT(delta2, 0.0);
        }
    }
}

} // namespace
} // namespace troupe::gpu::cuda
