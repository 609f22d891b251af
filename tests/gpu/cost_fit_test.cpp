// Tests for cost_fit: the cost model's constants set by name, and fitted to
// measured steps (here, steps priced by a cost model with known constants,
// which the fit must recover).
#include "gpu/cost_fit.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace troupe::gpu {
namespace {

std::vector<step_entry> uniform_batch(std::uint32_t seqs, std::uint32_t context, std::uint32_t new_tokens,
                                      std::uint32_t rank) {
  std::vector<step_entry> b(seqs);
  for (std::uint32_t i = 0; i < seqs; ++i) {
    b[i].new_tokens = new_tokens;
    b[i].context_tokens = context;
    if (rank > 0) {
      b[i].adapter_id = i + 1;
      b[i].adapter_rank = rank;
    }
  }
  return b;
}

// troupe-gpu-bench's steps, timed by `truth` (times `noise` per step).
std::vector<measured_step> bench_steps(const roofline_cost_model& truth, std::vector<double> noise = {}) {
  const std::vector<std::vector<step_entry>> batches = {
    uniform_batch(1, 128, 1, 0), uniform_batch(64, 128, 1, 0), uniform_batch(64, 128, 1, 16),
    uniform_batch(8, 0, 1024, 0)};
  std::vector<measured_step> out;
  for (std::size_t i = 0; i < batches.size(); ++i)
    out.push_back({batches[i], truth.step_seconds(batches[i]) * (i < noise.size() ? noise[i] : 1.0)});
  return out;
}

struct fit_fixture : ::testing::Test {
  model_shape shape = *find_model_preset("llama-2-7b");
  gpu_spec gpu = *find_gpu_spec("H100-80GB");
};

TEST_F(fit_fixture, recovers_the_constants_that_priced_the_steps) {
  const cost_constants truth{.flops_efficiency = 0.55, .hbm_efficiency = 0.87, .step_overhead_seconds = 4e-4};
  const auto steps = bench_steps(roofline_cost_model{shape, gpu, truth});
  // Started from the defaults, which price the steps differently.
  const auto fit = fit_cost_constants(shape, gpu, steps);
  EXPECT_NEAR(fit.constants.hbm_efficiency, 0.87, 1e-9);
  EXPECT_NEAR(fit.constants.flops_efficiency, 0.55, 1e-9);
  EXPECT_NEAR(fit.constants.step_overhead_seconds, 4e-4, 1e-12);
  EXPECT_EQ(fit.compute_bound, (std::vector<bool>{false, false, false, true}));
  ASSERT_EQ(fit.predicted.size(), steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i)
    EXPECT_NEAR(fit.predicted[i], steps[i].seconds, 1e-9 * steps[i].seconds) << i;
  // What it did not fit is kept from the start.
  EXPECT_EQ(fit.constants.transfer_latency_seconds, cost_constants{}.transfer_latency_seconds);
}

TEST_F(fit_fixture, noisy_times_give_nearby_constants_and_no_negative_overhead) {
  const cost_constants truth{.flops_efficiency = 0.6, .hbm_efficiency = 0.8, .step_overhead_seconds = 0};
  // The small step slower than its line, the large ones faster: an
  // intercept below zero, which the fit does not accept.
  const auto steps = bench_steps(roofline_cost_model{shape, gpu, truth}, {0.9, 1.01, 1.0, 1.0});
  const auto fit = fit_cost_constants(shape, gpu, steps);
  EXPECT_GE(fit.constants.step_overhead_seconds, 0.0);
  EXPECT_NEAR(fit.constants.hbm_efficiency, 0.8, 0.02);
  EXPECT_NEAR(fit.constants.flops_efficiency, 0.6, 0.01);
}

TEST_F(fit_fixture, says_what_is_missing) {
  const auto steps = bench_steps(roofline_cost_model{shape, gpu, {}});
  const auto without = [&](std::vector<std::size_t> keep) {
    std::vector<measured_step> out;
    for (auto i : keep)
      out.push_back(steps[i]);
    return out;
  };
  const auto message = [&](const std::vector<measured_step>& s) {
    try {
      fit_cost_constants(shape, gpu, s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(without({0, 3})).find("two memory-bound steps"), std::string::npos);
  EXPECT_NE(message(without({0, 1, 2})).find("compute-bound step"), std::string::npos);
  auto zero = steps;
  zero[1].seconds = 0;
  EXPECT_NE(message(zero).find("time > 0"), std::string::npos);
  // Faster than the preset's bandwidth allows: the preset is wrong.
  auto fast = steps;
  for (auto& s : fast)
    s.seconds /= 3;
  EXPECT_NE(message(fast).find("hbm_bytes_per_s is below"), std::string::npos);
}

TEST(cost_overrides, set_constants_and_rates_by_name) {
  cost_constants c;
  auto g = *find_gpu_spec("H100-80GB");
  const auto error = apply_cost_overrides(
    {{"hbm_efficiency", 0.9}, {"step_overhead_seconds", 2e-4}, {"pcie_bytes_per_s", 5.0e10}}, c, g);
  EXPECT_FALSE(error.has_value()) << *error;
  EXPECT_EQ(c.hbm_efficiency, 0.9);
  EXPECT_EQ(c.step_overhead_seconds, 2e-4);
  EXPECT_EQ(g.pcie_bytes_per_s, 5.0e10);
  EXPECT_EQ(c.flops_efficiency, cost_constants{}.flops_efficiency);
  EXPECT_EQ(cost_override_names().size(), 9u);
}

TEST(cost_overrides, refuse_unknown_names_and_bad_values_leaving_both_unchanged) {
  cost_constants c;
  const auto g0 = *find_gpu_spec("H100-80GB");
  auto g = g0;
  auto error = apply_cost_overrides({{"hbm_eficiency", 0.9}}, c, g);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("unknown cost constant \"hbm_eficiency\""), std::string::npos);
  EXPECT_NE(error->find("hbm_efficiency"), std::string::npos); // the known names
  error = apply_cost_overrides({{"pcie_bytes_per_s", 1e9}, {"flops_efficiency", 1.5}}, c, g);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("flops_efficiency must be in (0, 1]"), std::string::npos);
  EXPECT_EQ(g.pcie_bytes_per_s, g0.pcie_bytes_per_s);
  error = apply_cost_overrides({{"peak_flops", 0}}, c, g);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("peak_flops must be > 0"), std::string::npos);
  EXPECT_EQ(c.flops_efficiency, cost_constants{}.flops_efficiency);
}

} // namespace
} // namespace troupe::gpu
