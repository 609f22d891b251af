// Tests for roofline_cost_model and the GPU presets: which resource bounds a
// step, monotonicity in batch size and context, adapter costs, GPU ordering
// and PCIe transfers.
#include "gpu/cost_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

namespace troupe::gpu {
namespace {

static_assert(std::is_trivially_copyable_v<cost_constants>);
static_assert(std::is_nothrow_move_constructible_v<roofline_cost_model>);

roofline_cost_model make_model(std::string_view model, std::string_view gpu, cost_constants c = {}) {
  auto shape = find_model_preset(model);
  auto spec = find_gpu_spec(gpu);
  EXPECT_TRUE(shape && spec) << model << " on " << gpu;
  return roofline_cost_model{shape.value_or(model_shape{}), spec.value_or(gpu_spec{}), c};
}

step_entry decode(std::uint32_t context, std::uint32_t adapter_id = 0, std::uint32_t rank = 0) {
  step_entry e;
  e.adapter_id = adapter_id;
  e.adapter_rank = rank;
  e.new_tokens = 1;
  e.context_tokens = context;
  return e;
}

step_entry prefill_chunk(std::uint32_t tokens, std::uint32_t context) {
  step_entry e;
  e.new_tokens = tokens;
  e.context_tokens = context;
  return e;
}

step_entry prefill(std::uint32_t prompt) {
  step_entry e;
  e.new_tokens = prompt;
  return e;
}

std::vector<step_entry> decode_batch(std::size_t size, std::uint32_t context) {
  return std::vector<step_entry>(size, decode(context));
}

// -- GPU presets ------------------------------------------------------------------

TEST(gpu_spec, presets_match_datasheets) {
  const auto names = gpu_spec_names();
  ASSERT_EQ(names.size(), 4u);
  const auto a100 = find_gpu_spec("A100-80GB").value();
  const auto a40 = find_gpu_spec("A40").value();
  EXPECT_DOUBLE_EQ(a40.hbm_bytes_per_s, 696e9);
  EXPECT_DOUBLE_EQ(a40.peak_flops, 149.7e12);
  const auto h100 = find_gpu_spec("H100-80GB").value();
  const auto h200 = find_gpu_spec("H200").value();
  EXPECT_DOUBLE_EQ(a100.peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(h100.hbm_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(h200.hbm_bytes_per_s, 4.8e12);
  EXPECT_GT(h200.memory_bytes, 140e9);
  EXPECT_GT(h100.memory_bytes, 80e9);
  EXPECT_GT(h100.pcie_bytes_per_s, a100.pcie_bytes_per_s);
  for (const auto& name : names)
    EXPECT_EQ(find_gpu_spec(name)->name, name);
  EXPECT_FALSE(find_gpu_spec("V100").has_value());
}

// -- constants --------------------------------------------------------------------

TEST(cost_constants, defaults_are_valid_and_bad_values_are_named) {
  EXPECT_FALSE(validate_cost_constants(cost_constants{}).has_value());
  const auto error = validate_cost_constants(cost_constants{.flops_efficiency = 0.0});
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("flops_efficiency"), std::string::npos);
  EXPECT_TRUE(validate_cost_constants(cost_constants{.hbm_efficiency = 1.5}).has_value());
  EXPECT_TRUE(validate_cost_constants(cost_constants{.step_overhead_seconds = -1.0}).has_value());
}

// -- step cost ---------------------------------------------------------------------

TEST(roofline_cost_model, empty_batch_costs_nothing) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  EXPECT_EQ(model.step_seconds({}), 0.0);
  EXPECT_EQ(model.flops({}), 0.0);
  EXPECT_EQ(model.bytes({}), 0.0);
}

TEST(roofline_cost_model, flops_of_one_token_add_up) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  const auto& s = model.shape();
  const std::vector<step_entry> one{decode(0)};
  const double expected = 2.0 * static_cast<double>(s.layer_matmul_parameters()) +
                          2.0 * static_cast<double>(s.embedding_parameters()) +  // lm_head
                          4.0 * s.num_layers * static_cast<double>(s.q_dim()) * 1.0;
  EXPECT_DOUBLE_EQ(model.flops(one), expected);
}

TEST(roofline_cost_model, attention_flops_are_causal_within_new_tokens) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  const auto& s = model.shape();
  const double per_pair = 4.0 * s.num_layers * static_cast<double>(s.q_dim());
  const double per_token = 2.0 * static_cast<double>(s.layer_matmul_parameters());
  const double lm_head = 2.0 * static_cast<double>(s.embedding_parameters());
  // 100 new tokens after 50 cached: 100 * 50 + 100 * 101 / 2 query-key pairs.
  const std::vector<step_entry> chunk{prefill_chunk(100, 50)};
  EXPECT_NEAR(model.flops(chunk), 100 * per_token + lm_head + per_pair * (100 * 50 + 5050), 1e3);
}

TEST(roofline_cost_model, single_decode_of_7b_on_h100_is_memory_bound) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  const std::vector<step_entry> batch{decode(128)};
  EXPECT_LT(model.compute_seconds(batch), 0.01 * model.memory_seconds(batch));
  const auto& c = model.constants();
  const double weights_only = static_cast<double>(model.shape().weight_bytes()) /
                              (model.gpu().hbm_bytes_per_s * c.hbm_efficiency);
  const double t = model.step_seconds(batch);
  EXPECT_GT(t, weights_only + c.step_overhead_seconds);
  EXPECT_NEAR(t, weights_only + c.step_overhead_seconds, 0.01 * t);
  // About 6 ms: 13.5 GB over 80% of 3.35 TB/s, plus 1 ms overhead.
  EXPECT_GT(t, 5e-3);
  EXPECT_LT(t, 7e-3);
}

TEST(roofline_cost_model, prefill_of_2048_tokens_is_compute_bound) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  const std::vector<step_entry> batch{prefill(2048)};
  EXPECT_GT(model.compute_seconds(batch), 3.0 * model.memory_seconds(batch));
  EXPECT_DOUBLE_EQ(model.step_seconds(batch),
                   model.constants().step_overhead_seconds + model.compute_seconds(batch));
}

TEST(roofline_cost_model, time_grows_with_batch_size) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  double previous = 0.0;
  for (std::size_t size : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}) {
    const auto batch = decode_batch(size, 512);
    const double t = model.step_seconds(batch);
    EXPECT_GT(t, previous) << "batch size " << size;
    previous = t;
  }
  // Large decode batches cross the ridge point and become compute-bound.
  const auto big = std::vector<step_entry>(1024, decode(0));
  EXPECT_GT(model.compute_seconds(big), model.memory_seconds(big));
}

TEST(roofline_cost_model, time_grows_with_context) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  double decode_previous = 0.0;
  double prefill_previous = 0.0;
  for (std::uint32_t context = 0; context <= 4096; context += 256) {
    const double d = model.step_seconds(decode_batch(16, context));
    const std::vector<step_entry> chunk{prefill_chunk(512, context)};
    const double p = model.step_seconds(chunk);
    EXPECT_GT(d, decode_previous) << "context " << context;
    EXPECT_GT(p, prefill_previous) << "context " << context;
    decode_previous = d;
    prefill_previous = p;
  }
}

TEST(roofline_cost_model, adapters_cost_more_and_distinct_ones_most) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  std::vector<step_entry> base, shared, distinct;
  for (std::uint32_t i = 0; i < 8; ++i) {
    base.push_back(decode(256));
    shared.push_back(decode(256, 7, 16));
    distinct.push_back(decode(256, 100 + i, 16));
  }
  EXPECT_GT(model.step_seconds(shared), model.step_seconds(base));
  EXPECT_GT(model.step_seconds(distinct), model.step_seconds(shared));
  const double adapter = static_cast<double>(model.shape().lora_adapter_bytes(16));
  EXPECT_DOUBLE_EQ(model.bytes(shared), model.bytes(base) + adapter);
  EXPECT_DOUBLE_EQ(model.bytes(distinct), model.bytes(base) + 8 * adapter);
  EXPECT_DOUBLE_EQ(model.flops(shared), model.flops(distinct));
  EXPECT_GT(model.flops(shared), model.flops(base));
  // A larger rank costs more than a smaller one.
  auto big_rank = distinct;
  for (auto& e : big_rank)
    e.adapter_rank = 64;
  EXPECT_GT(model.step_seconds(big_rank), model.step_seconds(distinct));
}

TEST(roofline_cost_model, newer_gpus_decode_faster) {
  const auto batch = decode_batch(8, 1024);
  const double a100 = make_model("llama-2-7b", "A100-80GB").step_seconds(batch);
  const double h100 = make_model("llama-2-7b", "H100-80GB").step_seconds(batch);
  const double h200 = make_model("llama-2-7b", "H200").step_seconds(batch);
  EXPECT_LT(h200, h100);
  EXPECT_LT(h100, a100);
  const std::vector<step_entry> long_prompt{prefill(2048)};
  EXPECT_LT(make_model("llama-2-7b", "H100-80GB").step_seconds(long_prompt),
            make_model("llama-2-7b", "A100-80GB").step_seconds(long_prompt));
}

TEST(roofline_cost_model, bigger_model_is_slower) {
  const auto batch = decode_batch(4, 256);
  EXPECT_GT(make_model("llama-2-13b", "H100-80GB").step_seconds(batch),
            make_model("llama-2-7b", "H100-80GB").step_seconds(batch));
}

TEST(roofline_cost_model, constants_scale_the_bound_they_govern) {
  const std::vector<step_entry> decode_step{decode(128)};
  const std::vector<step_entry> prefill_step{prefill(2048)};
  const auto base = make_model("llama-2-7b", "H100-80GB");
  const auto slow_hbm = make_model("llama-2-7b", "H100-80GB", {.hbm_efficiency = 0.4});
  const auto slow_alu = make_model("llama-2-7b", "H100-80GB", {.flops_efficiency = 0.3});
  EXPECT_DOUBLE_EQ(slow_hbm.memory_seconds(decode_step), 2.0 * base.memory_seconds(decode_step));
  EXPECT_DOUBLE_EQ(slow_alu.compute_seconds(prefill_step), 2.0 * base.compute_seconds(prefill_step));
  EXPECT_DOUBLE_EQ(slow_hbm.step_seconds(prefill_step), base.step_seconds(prefill_step));
}

// -- transfers -------------------------------------------------------------------

// -- a request alone -----------------------------------------------------------------

TEST(sum_of_max_affine, matches_the_sum_term_by_term) {
  struct row {
    double a0, a1, b0, b1;
    std::uint64_t m;
  };
  const std::vector<row> table{
    {1, 1, 0, 0.5, 10},     // a leads and grows faster: a throughout
    {0, 0.5, 1, 1, 10},     // the same, the lines swapped
    {5, 0.1, 0, 1, 20},     // b overtakes a between j = 5 and 6
    {5, 0.1, 0, 1, 3},      // ... but only after the last term
    {4, 0, 0, 1, 10},       // they meet at j = 4 exactly
    {2, 1, 2, 3, 7},        // equal at 0, b faster
    {3, 2, 3, 2, 9},        // the same line
    {1e-3, 1e-7, 9e-4, 3e-7, 4000},
    {1, 1, 0, 2, 0},
    {1, 1, 0, 2, 1},
  };
  for (const auto& r : table) {
    double expected = 0;
    for (std::uint64_t j = 0; j < r.m; ++j)
      expected += std::max(r.a0 + r.a1 * static_cast<double>(j), r.b0 + r.b1 * static_cast<double>(j));
    EXPECT_NEAR(sum_of_max_affine(r.a0, r.a1, r.b0, r.b1, r.m), expected, 1e-9 * std::max(1.0, expected))
      << r.a0 << " + " << r.a1 << "j vs " << r.b0 << " + " << r.b1 << "j over " << r.m;
  }
}

/// A request alone, step by step: the prefill, then a decode per further token.
double isolated_by_steps(const roofline_cost_model& model, std::uint32_t prompt, std::uint32_t output,
                         std::uint32_t adapter = 0, std::uint32_t rank = 0) {
  step_entry first = prefill(prompt);
  first.adapter_id = adapter;
  first.adapter_rank = rank;
  double total = model.step_seconds(std::vector<step_entry>{first});
  for (std::uint32_t k = 0; k + 1 < output; ++k)
    total += model.step_seconds(std::vector<step_entry>{decode(prompt + k, adapter, rank)});
  return total;
}

TEST(roofline_cost_model, a_request_alone_costs_its_prefill_and_one_decode_per_further_token) {
  const auto model = make_model("llama-2-7b", "A100-80GB");
  for (const auto& [prompt, output, adapter, rank] :
       std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t>>{
         {1000, 200, 0, 0}, {1000, 200, 3, 16}, {7, 1, 0, 0}, {4000, 600, 9, 128}, {1, 2, 0, 0}}) {
    const double steps = isolated_by_steps(model, prompt, output, adapter, rank);
    EXPECT_NEAR(model.isolated_seconds(prompt, output, adapter, rank), steps, 1e-9 * steps)
      << prompt << " + " << output << " rank " << rank;
  }
  EXPECT_LT(model.isolated_seconds(1000, 200), model.isolated_seconds(1000, 201));
  EXPECT_LT(model.isolated_seconds(1000, 200), model.isolated_seconds(1000, 200, 3, 64));
  EXPECT_DOUBLE_EQ(model.isolated_seconds(500, 1), model.step_seconds(std::vector<step_entry>{prefill(500)}));
}

TEST(roofline_cost_model, a_request_alone_is_summed_exactly_where_the_bound_changes) {
  // A GPU whose lone decode is bound by one resource at a 1,000-token
  // context and by the other at 40,000: FLOP/s set so both times are equal
  // at 20,000 (attention's FLOPs grow faster with the context than its KV
  // bytes, relative to the weights).
  const auto a100 = make_model("llama-2-7b", "A100-80GB");
  const std::vector<step_entry> mid{decode(20000)};
  auto spec = a100.gpu();
  spec.peak_flops *= a100.compute_seconds(mid) / a100.memory_seconds(mid);
  const roofline_cost_model model{a100.shape(), spec};
  const std::vector<step_entry> early{decode(1000)}, late{decode(40000)};
  ASSERT_LT(model.compute_seconds(early), model.memory_seconds(early));
  ASSERT_GT(model.compute_seconds(late), model.memory_seconds(late));
  const double steps = isolated_by_steps(model, 1000, 39001);
  EXPECT_NEAR(model.isolated_seconds(1000, 39001), steps, 1e-9 * steps);
}

TEST(roofline_cost_model, a_sliding_window_bounds_what_a_token_attends_to_and_reads) {
  // Mistral 7B v0.1's shape, its window of 4,096.
  const auto plain = make_model("llama-2-7b", "A100-80GB");
  auto shape = plain.shape();
  shape.sliding_window = 4096;
  const roofline_cost_model model{shape, plain.gpu()};
  // Within the window, the same; past it, a decode costs what the window's does.
  for (const auto c : {0u, 100u, 4095u}) {
    const std::vector<step_entry> b{decode(c)};
    EXPECT_DOUBLE_EQ(model.flops(b), plain.flops(b)) << c;
    EXPECT_DOUBLE_EQ(model.bytes(b), plain.bytes(b)) << c;
  }
  const std::vector<step_entry> at{decode(4095)}, past{decode(30000)};
  EXPECT_DOUBLE_EQ(model.flops(past), model.flops(at));
  EXPECT_DOUBLE_EQ(model.bytes(past), model.bytes(at));
  EXPECT_LT(model.step_seconds(past), plain.step_seconds(past));
  // A prefill of 10,000 tokens: token t attends to min(t, 4,096) of them,
  // summed term by term.
  const std::vector<step_entry> long_prefill{prefill_chunk(10000, 0)};
  double pairs = 0;
  for (std::uint32_t t = 1; t <= 10000; ++t)
    pairs += std::min<std::uint32_t>(t, 4096);
  const double full_pairs = 10000.0 * 10001.0 / 2.0;
  const double attention_per_pair = 4.0 * shape.num_layers * static_cast<double>(shape.q_dim());
  EXPECT_NEAR(plain.flops(long_prefill) - model.flops(long_prefill), attention_per_pair * (full_pairs - pairs),
              1e-9 * plain.flops(long_prefill));
  // A request alone, summed exactly: prompts below, at and past the window,
  // outputs that cross it or not.
  for (const auto& [prompt, output] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{
         {1000, 200}, {1000, 5000}, {4094, 3}, {4095, 10}, {9000, 50}, {1, 6000}}) {
    const double steps = isolated_by_steps(model, prompt, output);
    EXPECT_NEAR(model.isolated_seconds(prompt, output), steps, 1e-9 * steps) << prompt << " + " << output;
  }
}

TEST(roofline_cost_model, transfer_time_is_linear_in_bytes) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  EXPECT_EQ(model.transfer_seconds(0), 0.0);
  const std::uint64_t b = 64ull << 20;
  const double t1 = model.transfer_seconds(b);
  const double t2 = model.transfer_seconds(2 * b);
  const double t4 = model.transfer_seconds(4 * b);
  EXPECT_NEAR(t2 - t1, t1 - model.constants().transfer_latency_seconds, 1e-12);
  EXPECT_NEAR(t4 - t2, 2.0 * (t2 - t1), 1e-12);
  EXPECT_NEAR(t1, 10e-6 + static_cast<double>(b) / 50e9, 1e-12);
  // A rank-16 7B adapter (32 MiB) loads in well under a millisecond on gen5
  // and takes about twice as long on an A100's gen4 link.
  const auto adapter = model.shape().lora_adapter_bytes(16);
  const double a100 = make_model("llama-2-7b", "A100-80GB").transfer_seconds(adapter);
  EXPECT_LT(model.transfer_seconds(adapter), 1e-3);
  EXPECT_NEAR(a100 / model.transfer_seconds(adapter), 2.0, 0.05);
}

} // namespace
} // namespace troupe::gpu

namespace troupe::gpu {
namespace {

TEST(roofline_cost_model, a_hidden_cache_halves_cache_bytes_and_adds_the_kv_recompute) {
  const auto model = make_model("llama-2-7b", "H100-80GB");
  auto kv = decode(1000);
  auto hidden = kv;
  hidden.hidden = true;
  const auto& s = model.shape();
  // Llama-2-7B is multi-head: hidden states take half the bytes of K and V.
  const double cache_bytes = static_cast<double>(s.kv_bytes_per_token()) * 1001;
  EXPECT_DOUBLE_EQ(model.bytes(std::span{&kv, 1}) - model.bytes(std::span{&hidden, 1}), cache_bytes / 2);
  // K and V of the 1000 cached tokens are recomputed: 2 matrices of
  // hidden × kv_dim per layer, 2 flops per multiply-add.
  const double recompute = 2.0 * 1000 * s.hidden_size * 2.0 * static_cast<double>(s.kv_dim()) * s.num_layers;
  EXPECT_DOUBLE_EQ(model.flops(std::span{&hidden, 1}) - model.flops(std::span{&kv, 1}), recompute);
  EXPECT_EQ(model.hidden_tokens_per_page(16), 32u);
  EXPECT_NEAR(model.hidden_seconds_per_kv_page(16),
              recompute / 1000 * 16 / (model.gpu().peak_flops * cost_constants{}.flops_efficiency), 1e-15);
  // No hidden caches where they would save nothing.
  auto gqa_shape = s;
  gqa_shape.num_kv_heads = s.num_heads / 4;
  const roofline_cost_model gqa{gqa_shape, model.gpu(), {}};
  EXPECT_EQ(gqa.hidden_tokens_per_page(16), 0u);
}

} // namespace
} // namespace troupe::gpu
