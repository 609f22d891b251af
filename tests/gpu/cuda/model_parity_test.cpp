// Whole-model parity: cuda_model against the cpu backend's fp32 model on
// the same weights (rounded to the GPU's type first, so the only difference
// left is fp16/bf16 activations), over a prefill of several prompts and
// decode steps after it: logits within the type's tolerance, greedy tokens
// that are the largest of the step's own logits and the reference's argmax
// wherever its top two logits are further apart than twice the row's
// largest difference.
// Skipped where no CUDA device is visible.
#include "gpu/cpu_model.hpp"
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/llama_upload.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"
#include "tests/gpu/cuda/random_llama.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace troupe::gpu::cuda {
namespace {

struct sequence {
  std::vector<std::int32_t> prompt;
  std::vector<std::uint32_t> pages;
  std::vector<std::int32_t> generated;
};

/// How the model's projections run, and what the model has.
enum class projections {
  batched,         ///< q/k/v as one batched call, decode's linear layers on gemv
  separate_cublas, ///< three calls, all on cuBLAS
  biased,          ///< batched, with biases on q, k, v (Qwen2's) and o
  qk_norm,         ///< batched, q and k normalised per head (Qwen3's), twice the heads
                   ///< (heads * head_dim twice the hidden size)
  sliding_window,  ///< batched, a sliding window of 12 positions (Mistral 7B v0.1's kind)
  partial_longrope, ///< batched, three quarters of each head turning by LongRoPE (Phi-4 mini's kind)
};
// (type, head_dim, query heads per kv head, projections)
using parity_param = std::tuple<dtype, std::uint32_t, std::uint32_t, projections>;
class model_parity : public ::testing::TestWithParam<parity_param> {};

TEST_P(model_parity, logits_and_greedy_tokens_match_the_cpu_model) {
  TROUPE_REQUIRE_GPU();
  const auto [t, head_dim, group, proj] = GetParam();
  const bool batched_qkv = proj != projections::separate_cublas;
  const bool biased = proj == projections::biased;
  const bool qk_norm = proj == projections::qk_norm;
  const std::uint32_t heads = (qk_norm ? 1024 : 512) / head_dim;
  const dims d{.hidden = 512, .inter = 1024, .layers = 3, .heads = heads, .kv_heads = heads / group,
               .head_dim = head_dim, .vocab = 1000, .qkv_bias = biased, .o_bias = biased, .qk_norm = qk_norm,
               .sliding_window = proj == projections::sliding_window ? 12u : 0u,
               .rotary_dim = proj == projections::partial_longrope ? 3 * head_dim / 4 : 0u};
  const std::uint32_t page_tokens = 16, pool_pages = 64;
  auto weights = make_weights(d, t, 11);

  auto mc = model_config_for(weights.config, t);
  mc.batched_qkv = batched_qkv;
  if (!batched_qkv)
    mc.gemv_rows = 0;
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  {
    const kv_layout kv{.num_layers = d.layers, .num_kv_heads = d.kv_heads, .head_dim = d.head_dim,
                       .page_tokens = page_tokens};
    cuda_model gpu{mc, kv, pool_pages, s};
    upload_weights(gpu, weights);
    cpu_model cpu{std::move(weights), pool_pages, page_tokens};

    // Prompts of 5, 40 and 17 tokens in scattered pages, then decode steps.
    std::mt19937_64 rng{5};
    std::vector<sequence> seqs(3);
    const std::uint32_t lens[] = {5, 40, 17};
    std::vector<std::uint32_t> free_pages(pool_pages);
    for (std::uint32_t i = 0; i < pool_pages; ++i)
      free_pages[i] = i;
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      for (std::uint32_t k = 0; k < lens[i]; ++k)
        seqs[i].prompt.push_back(static_cast<std::int32_t>(rng() % d.vocab));
      for (int p = 0; p < 5; ++p) { // room for 80 positions
        seqs[i].pages.push_back(free_pages.back());
        free_pages.pop_back();
      }
    }
    plan_inputs in;
    in.kv = kv;
    in.vocab_size = d.vocab;
    in.pool_pages = pool_pages;
    in.split = {.q_tile = 16, .kv_chunk = 32};
    in.sliding_window = mc.sliding_window;

    const float tol = t == dtype::f16 ? 0.03f : 0.12f;
    std::uint32_t compared = 0;
    for (int step = 0; step < 6; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      std::vector<step_entry> batch;
      std::vector<cpu_sequence> cpu_batch;
      std::vector<std::vector<std::int32_t>> inputs(seqs.size());
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        auto& sq = seqs[i];
        step_entry e;
        e.request_id = i + 1;
        e.temperature = 0;
        e.context_tokens = step == 0 ? 0 : static_cast<std::uint32_t>(sq.prompt.size() + sq.generated.size() - 1);
        inputs[i] = step == 0 ? sq.prompt : std::vector<std::int32_t>{sq.generated.back()};
        e.tokens = inputs[i];
        e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
        e.pages = sq.pages;
        batch.push_back(e);
      }
      for (std::size_t i = 0; i < seqs.size(); ++i)
        cpu_batch.push_back({inputs[i], batch[i].context_tokens, seqs[i].pages, nullptr, false});
      const auto ref = cpu.forward(cpu_batch);
      ASSERT_EQ(ref.size(), seqs.size() * d.vocab);

      const auto plan = plan_batch(batch, in);
      ASSERT_TRUE(plan.rejected.empty()) << plan.rejected.front().second;
      std::vector<std::int32_t> tokens(plan.seqs());
      gpu.forward(plan, tokens);
      std::vector<float> logits(std::size_t{plan.seqs()} * d.vocab);
      TROUPE_CUDA_CHECK(cudaMemcpy(logits.data(), gpu.device_logits(), logits.size() * 4,
                                   cudaMemcpyDeviceToHost));
      for (std::uint32_t k = 0; k < plan.seqs(); ++k) {
        const std::uint32_t i = plan.order[k];
        const float* want = ref.data() + std::size_t{i} * d.vocab;
        const float* got = logits.data() + std::size_t{k} * d.vocab;
        float scale = 0;
        for (std::uint32_t v = 0; v < d.vocab; ++v)
          scale = std::max(scale, std::abs(want[v]));
        float err = 0; // this row's largest difference
        for (std::uint32_t v = 0; v < d.vocab; ++v) {
          ASSERT_FALSE(std::isnan(got[v])) << "seq " << i << " token " << v;
          ASSERT_NEAR(got[v], want[v], tol * std::max(1.0f, scale)) << "seq " << i << " token " << v;
          err = std::max(err, std::abs(got[v] - want[v]));
        }
        // Greedy: the largest of the logits it was given, and the
        // reference's argmax wherever the reference's margin is more than
        // twice the row's difference (so both orders agree on the top).
        const float* top = std::max_element(got, got + d.vocab);
        ASSERT_GE(tokens[k], 0);
        EXPECT_EQ(got[tokens[k]], *top) << "seq " << i << ": token " << tokens[k] << " is not greedy";
        std::vector<std::uint32_t> idx(d.vocab);
        for (std::uint32_t v = 0; v < d.vocab; ++v)
          idx[v] = v;
        std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                          [&](auto a, auto b) { return want[a] > want[b]; });
        if (want[idx[0]] - want[idx[1]] > 2 * err) {
          EXPECT_EQ(tokens[k], static_cast<std::int32_t>(idx[0])) << "seq " << i;
          ++compared;
        }
        // Both continue with the reference's token, so they stay in step.
        seqs[i].generated.push_back(static_cast<std::int32_t>(idx[0]));
      }
    }
    EXPECT_GT(compared, 6u) << "too few clear margins to compare greedy tokens";
    if (mc.sliding_window > 0) {
      // A plan made for no window would attend too far back: refused.
      step_entry e;
      e.request_id = 1;
      e.tokens = {1};
      e.new_tokens = 1;
      e.pages = seqs[0].pages;
      auto other = in;
      other.sliding_window = 0;
      std::vector<std::int32_t> token(1);
      EXPECT_THROW(gpu.forward(plan_batch(std::vector<step_entry>{e}, other), token), cuda_error);
    }
  }
  cudaStreamDestroy(s);
}

// enqueue_step captured into a CUDA graph (as the benchmark replays decode
// steps) gives, replayed, the tokens the step gives launched directly, each
// time; a device plan that was not uploaded for the model's scratch is
// refused.
// The graph tests' model: small, grouped-query heads, 16-token pages.
constexpr dims graph_dims{.hidden = 256, .inter = 512, .layers = 2, .heads = 4, .kv_heads = 2,
                          .head_dim = 64, .vocab = 300};
constexpr kv_layout graph_kv{.num_layers = graph_dims.layers, .num_kv_heads = graph_dims.kv_heads,
                             .head_dim = graph_dims.head_dim, .page_tokens = 16};

/// Two graph-test models of one set of f16 weights: `direct` launches every
/// step on `s`; `graphs` keeps `step_graphs` step graphs on `graphs_stream`.
struct graph_models {
  graph_models(std::uint64_t seed, std::uint64_t pool_pages, std::uint32_t step_graphs, cudaStream_t s,
               cudaStream_t graphs_stream)
      : weights(make_weights(graph_dims, dtype::f16, seed)),
        direct(model_config_for(weights.config, dtype::f16), graph_kv, pool_pages, s),
        graphs(with_graphs(model_config_for(weights.config, dtype::f16), step_graphs), graph_kv, pool_pages,
               graphs_stream) {
    upload_weights(direct, weights);
    upload_weights(graphs, weights);
    in.kv = graph_kv;
    in.vocab_size = graph_dims.vocab;
    in.pool_pages = pool_pages;
  }
  static model_config with_graphs(model_config mc, std::uint32_t n) {
    mc.step_graphs = n;
    return mc;
  }
  llama_weights weights;
  cuda_model direct;
  cuda_model graphs;
  plan_inputs in;
};

TEST(model_graph, a_captured_step_replays_to_the_tokens_of_the_step) {
  TROUPE_REQUIRE_GPU();
  const dims d = graph_dims;
  const kv_layout kv = graph_kv;
  const auto weights = make_weights(d, dtype::f16, 3);
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    cuda_model gpu{model_config_for(weights.config, dtype::f16), kv, 16, s};
    upload_weights(gpu, weights);
    plan_inputs in;
    in.kv = kv;
    in.vocab_size = d.vocab;
    in.pool_pages = 16;
    const auto make = [&](std::uint32_t context, std::uint32_t n, std::uint32_t page, std::int32_t salt) {
      step_entry e;
      e.request_id = page + 1;
      e.temperature = 0;
      e.context_tokens = context;
      for (std::uint32_t i = 0; i < n; ++i)
        e.tokens.push_back(static_cast<std::int32_t>((salt * 31 + i * 7) % d.vocab));
      e.new_tokens = n;
      e.pages = {page};
      return e;
    };
    // Prefill two prompts, then the decode step that is captured.
    std::vector<std::int32_t> tokens(2);
    gpu.forward(plan_batch(std::vector<step_entry>{make(0, 9, 0, 1), make(0, 5, 1, 2)}, in), tokens);
    const auto decode = plan_batch(std::vector<step_entry>{make(9, 1, 0, 3), make(5, 1, 1, 4)}, in);
    ASSERT_TRUE(decode.rejected.empty());
    std::vector<std::int32_t> direct(2);
    gpu.forward(decode, direct); // writes the same cache slots the replays write again

    const auto dp = gpu.upload_plan(decode);
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    TROUPE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    gpu.enqueue_step(dp);
    TROUPE_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    TROUPE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int replay = 0; replay < 2; ++replay) {
      TROUPE_CUDA_CHECK(cudaMemsetAsync(const_cast<std::int32_t*>(gpu.device_tokens()), 0xff, 2 * sizeof(std::int32_t), s));
      TROUPE_CUDA_CHECK(cudaGraphLaunch(exec, s));
      std::vector<std::int32_t> replayed(2, -2);
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(replayed.data(), gpu.device_tokens(), 2 * sizeof(std::int32_t),
                                        cudaMemcpyDeviceToHost, s));
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
      EXPECT_EQ(replayed, direct) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    device_plan too_big = dp;
    too_big.rows = 1u << 20;
    EXPECT_THROW(gpu.enqueue_step(too_big), cuda_error);
  }
  cudaStreamDestroy(s);
}

// model_config::step_graphs: a decode batch repeated step after step is
// captured on its second step and replayed after, giving the tokens and
// logits (bit for bit) of a model that launches every step; switching a
// form, or scratch that grows, forgets the graphs.
TEST(model_graph, steps_replayed_from_step_graphs_match_steps_launched_directly) {
  TROUPE_REQUIRE_GPU();
  const dims d = graph_dims;
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    graph_models m{5, 32, 2, s, s};
    auto& [weights, direct, graphs, in] = m;
    in.split = {.q_tile = 16, .kv_chunk = 1024}; // one attention item per sequence throughout
    // Three sequences, 4 pages each: prompts of 3, 14 and 30 tokens (they
    // cross page boundaries as they decode), then decode steps.
    std::vector<std::vector<std::int32_t>> seqs = {{5, 7, 9}, {}, {}};
    for (std::int32_t i = 0; i < 14; ++i)
      seqs[1].push_back((i * 13 + 1) % 300);
    for (std::int32_t i = 0; i < 30; ++i)
      seqs[2].push_back((i * 29 + 2) % 300);
    std::vector<std::uint32_t> prompt_len;
    for (const auto& q : seqs)
      prompt_len.push_back(static_cast<std::uint32_t>(q.size()));
    const auto batch_of = [&](bool prefill) {
      std::vector<step_entry> batch;
      for (std::uint32_t i = 0; i < seqs.size(); ++i) {
        step_entry e;
        e.request_id = i + 1;
        e.temperature = 0;
        e.tokens = prefill ? seqs[i] : std::vector<std::int32_t>{seqs[i].back()};
        e.context_tokens = prefill ? 0 : static_cast<std::uint32_t>(seqs[i].size() - 1);
        e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
        for (std::uint32_t p = 0; p < 4; ++p)
          e.pages.push_back(i * 4 + p);
        batch.push_back(std::move(e));
      }
      return plan_batch(batch, in);
    };
    const auto step = [&](bool prefill) {
      const auto plan = batch_of(prefill);
      EXPECT_TRUE(plan.rejected.empty());
      std::vector<std::int32_t> a(plan.seqs()), b(plan.seqs());
      direct.forward(plan, a);
      graphs.forward(plan, b);
      EXPECT_EQ(a, b);
      std::vector<float> la(std::size_t{plan.seqs()} * d.vocab), lb(la.size());
      TROUPE_CUDA_CHECK(cudaMemcpy(la.data(), direct.device_logits(), la.size() * 4, cudaMemcpyDeviceToHost));
      TROUPE_CUDA_CHECK(cudaMemcpy(lb.data(), graphs.device_logits(), lb.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(la, lb);
      for (std::uint32_t k = 0; k < plan.seqs(); ++k)
        seqs[plan.order[k]].push_back(a[k]);
    };
    step(true);
    EXPECT_EQ(graphs.step_graphs_kept(), 0u);
    const int decode_steps = 8;
    for (int i = 0; i < decode_steps; ++i)
      step(false);
    // Launched directly once, captured on the second step, replayed after.
    EXPECT_EQ(graphs.step_graphs_kept(), 1u);
    EXPECT_EQ(graphs.steps_replayed(), static_cast<std::uint64_t>(decode_steps - 1));
    EXPECT_TRUE(graphs.step_graphs_error().empty()) << graphs.step_graphs_error();

    graphs.set_gemv_rows(0); // another form: the graph goes, the steps still agree
    EXPECT_EQ(graphs.step_graphs_kept(), 0u);
    direct.set_gemv_rows(0);
    for (int i = 0; i < 3; ++i)
      step(false);
    EXPECT_EQ(graphs.step_graphs_kept(), 1u);
    EXPECT_EQ(graphs.steps_replayed(), static_cast<std::uint64_t>(decode_steps - 1 + 2));

    graphs.reserve_scratch(512, 64, 64); // scratch reallocated: its graphs go
    EXPECT_EQ(graphs.step_graphs_kept(), 0u);
    step(false);
    EXPECT_EQ(graphs.step_graphs_kept(), 0u); // launched directly, captured next time
    EXPECT_GT(seqs[0].size(), prompt_len[0]);

    // Inside the caller's own capture, the step's launches join that graph.
    const auto dp = graphs.upload_plan(batch_of(false));
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t outer = nullptr;
    TROUPE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    graphs.enqueue_step(dp);
    EXPECT_EQ(cudaStreamEndCapture(s, &outer), cudaSuccess);
    EXPECT_NE(outer, nullptr);
    EXPECT_TRUE(graphs.step_graphs_error().empty()) << graphs.step_graphs_error();
    if (outer != nullptr)
      cudaGraphDestroy(outer);
  }
  cudaStreamDestroy(s);
}

// A capture CUDA refuses (the legacy default stream cannot be captured)
// turns step graphs off, saying why, and every step launches directly with
// the tokens of a model that never tried; a new setting tries again.
TEST(model_graph, a_capture_cuda_refuses_turns_step_graphs_off_and_steps_launch_directly) {
  TROUPE_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    graph_models m{6, 8, 2, s, cudaStream_t{}};
    auto& [weights, direct, legacy, in] = m;
    std::vector<std::int32_t> seq = {3, 1, 4, 1, 5};
    const auto step = [&](bool prefill) {
      step_entry e;
      e.request_id = 1;
      e.temperature = 0;
      e.tokens = prefill ? seq : std::vector<std::int32_t>{seq.back()};
      e.context_tokens = prefill ? 0 : static_cast<std::uint32_t>(seq.size() - 1);
      e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
      e.pages = {0, 1};
      const auto plan = plan_batch(std::span{&e, 1}, in);
      ASSERT_TRUE(plan.rejected.empty());
      std::vector<std::int32_t> a(1, -1), b(1, -2);
      direct.forward(plan, a);
      legacy.forward(plan, b);
      EXPECT_EQ(a, b);
      seq.push_back(a[0]);
    };
    step(true);
    for (int i = 0; i < 4; ++i)
      step(false);
    EXPECT_NE(legacy.step_graphs_error().find("cudaStreamBeginCapture"), std::string::npos)
        << legacy.step_graphs_error();
    EXPECT_EQ(legacy.step_graphs_kept(), 0u);
    EXPECT_EQ(legacy.steps_replayed(), 0u);

    legacy.set_step_graphs(2);
    EXPECT_TRUE(legacy.step_graphs_error().empty());
    for (int i = 0; i < 2; ++i)
      step(false);
    EXPECT_FALSE(legacy.step_graphs_error().empty());
    EXPECT_EQ(legacy.steps_replayed(), 0u);
  }
  cudaStreamDestroy(s);
}

std::string parity_name(const ::testing::TestParamInfo<parity_param>& i) {
  const auto [t, hd, group, proj] = i.param;
  return std::string{to_string(t)} + "_hd" + std::to_string(hd) + (group == 1 ? "_mha" : "_gqa") +
         (proj == projections::separate_cublas ? "_separate_qkv_cublas"
          : proj == projections::biased        ? "_biases"
          : proj == projections::qk_norm       ? "_qk_norm_wide_heads"
          : proj == projections::sliding_window ? "_sliding_window"
          : proj == projections::partial_longrope ? "_partial_longrope"
                                               : "");
}

// q, k and v in one strided-batched call with every head its own K and V
// (mha), in two with grouped-query heads (gqa: q, then k and v).
INSTANTIATE_TEST_SUITE_P(types_and_heads, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16),
                                            ::testing::Values(64u, 128u), ::testing::Values(1u, 2u),
                                            ::testing::Values(projections::batched)),
                         parity_name);
// ... and as three calls, every linear layer on cuBLAS.
INSTANTIATE_TEST_SUITE_P(separate_qkv, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16), ::testing::Values(128u),
                                            ::testing::Values(1u, 2u), ::testing::Values(projections::separate_cublas)),
                         parity_name);
// ... and with biases on q, k, v and o, added before the adapters.
INSTANTIATE_TEST_SUITE_P(biases, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16), ::testing::Values(64u),
                                            ::testing::Values(2u), ::testing::Values(projections::biased)),
                         parity_name);
// ... and with q and k normalised per head, heads * head_dim twice the hidden size.
INSTANTIATE_TEST_SUITE_P(qk_norm, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16), ::testing::Values(64u),
                                            ::testing::Values(2u), ::testing::Values(projections::qk_norm)),
                         parity_name);
// ... and with a sliding window shorter than two of the prompts (5, 40, 17
// tokens, then decode steps): prefill tiles of 16 rows start mid-cache.
INSTANTIATE_TEST_SUITE_P(sliding_window, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16), ::testing::Values(64u),
                                            ::testing::Values(2u), ::testing::Values(projections::sliding_window)),
                         parity_name);
// ... and with 48 of each head's 64 elements turning, by LongRoPE's long
// factors and attention factor.
INSTANTIATE_TEST_SUITE_P(partial_longrope, model_parity,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16), ::testing::Values(64u),
                                            ::testing::Values(2u), ::testing::Values(projections::partial_longrope)),
                         parity_name);

} // namespace
} // namespace troupe::gpu::cuda
