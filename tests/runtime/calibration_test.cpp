// Start-up calibration on the sim backend: prefill times grow with length and
// fit the recompute regression, swap bandwidths are the modelled PCIe link,
// ρ is positive where hidden caches save memory and absent where they do not.
#include "gpu/gpu_spec.hpp"
#include "gpu/model_shape.hpp"
#include "gpu/sim_backend.hpp"
#include "policies/adaptive_preemption.hpp"
#include "runtime/calibration.hpp"

#include <gtest/gtest.h>

namespace troupe {
namespace {

gpu::sim_backend sim(const char* model) {
  return gpu::sim_backend{gpu::find_model_preset(model).value(), gpu::find_gpu_spec("H100-80GB").value(), 1};
}

calibration_setup setup_for(const gpu::sim_backend& b) {
  calibration_setup s;
  s.pool_pages = 4096;
  s.page_tokens = 16;
  s.page_bytes = 16 * b.cost_model().shape().kv_bytes_per_token();
  s.host_pages = 1000;
  s.hidden_page_tokens = b.hidden_cache_tokens_per_page(16);
  s.repeats = 1;
  return s;
}

TEST(calibration, sim_backend_prefills_swaps_and_rho) {
  auto b = sim("llama-2-7b");
  const auto s = setup_for(b);
  const auto c = calibrate_backend(b, s);
  ASSERT_EQ(c.prefill_points.size(), 5u) << "32, 64, 128, 256, 512 tokens";
  for (std::size_t i = 1; i < c.prefill_points.size(); ++i)
    EXPECT_GT(c.prefill_points[i].second, c.prefill_points[i - 1].second);
  // The recompute regression fitted on them predicts them back closely.
  const auto fit = policies::recompute_model::fit(c.prefill_points);
  for (const auto& [n, t] : c.prefill_points)
    EXPECT_NEAR(fit.seconds(n), t, 0.1 * t) << n;
  // Swaps move bytes at the modelled link's rate.
  const double bytes = 64.0 * static_cast<double>(s.page_bytes);
  EXPECT_NEAR(c.d2h_bytes_per_s, bytes / b.transfer_seconds(64 * s.page_bytes), 1e-6 * c.d2h_bytes_per_s);
  EXPECT_NEAR(c.h2d_bytes_per_s, c.d2h_bytes_per_s, 1e-6 * c.d2h_bytes_per_s);
  // Llama-2-7B is multi-head: hidden caches save memory and cost time.
  ASSERT_GT(s.hidden_page_tokens, s.page_tokens);
  EXPECT_GT(c.hidden_page_seconds, 0.0);
}

TEST(calibration, prompts_lengthen_to_the_context_until_one_takes_too_long) {
  auto b = sim("llama-2-7b");
  auto s = setup_for(b);
  s.max_tokens = 4096;
  const auto c = calibrate_backend(b, s);
  ASSERT_EQ(c.prefill_points.size(), 8u) << "32 to 4,096 tokens: each prefill well under the limit";
  EXPECT_EQ(c.prefill_points.back().first, 4096u);
  // A slower backend (or a tighter limit): the first prefill past it is the last.
  s.max_prefill_seconds = 0.99 * c.prefill_points[3].second;
  const auto short_only = calibrate_backend(b, s);
  ASSERT_EQ(short_only.prefill_points.size(), 4u) << "32, 64, 128, then 256 takes too long";
  EXPECT_EQ(short_only.prefill_points.back(), c.prefill_points[3]);
  s.max_prefill_seconds = 0;
  EXPECT_EQ(calibrate_backend(b, s).prefill_points.size(), 1u) << "at least one point";
}

TEST(calibration, no_hidden_caches_no_rho_and_a_small_pool_skips_long_prompts) {
  auto b = sim("llama-2-7b");
  auto s = setup_for(b);
  s.hidden_page_tokens = 0;
  s.pool_pages = 8; // 128 tokens
  const auto c = calibrate_backend(b, s);
  ASSERT_EQ(c.prefill_points.size(), 3u) << "32, 64 and 128 tokens fit in 8 pages";
  EXPECT_EQ(c.hidden_page_seconds, 0.0);
  // The swap times as many pages as both pools hold, up to 64.
  const double bytes = 8.0 * static_cast<double>(s.page_bytes);
  EXPECT_NEAR(c.d2h_bytes_per_s, bytes / b.transfer_seconds(8 * s.page_bytes), 1e-6 * c.d2h_bytes_per_s);
  s.pool_pages = 4096;
  s.host_pages = 4;
  const double four = 4.0 * static_cast<double>(s.page_bytes);
  EXPECT_NEAR(calibrate_backend(b, s).h2d_bytes_per_s, four / b.transfer_seconds(4 * s.page_bytes),
              1e-6 * four / b.transfer_seconds(4 * s.page_bytes));
  s.host_pages = 0;
  EXPECT_EQ(calibrate_backend(b, s).d2h_bytes_per_s, 0.0) << "no host pool: nothing swaps, no swap measured";
  s.host_pages = 4;
  s.page_bytes = 0;
  EXPECT_EQ(calibrate_backend(b, s).d2h_bytes_per_s, 0.0) << "no page size: no swap measured";
}

} // namespace
} // namespace troupe
