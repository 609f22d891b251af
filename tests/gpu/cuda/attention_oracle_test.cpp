// The attention reference against the cpu backend's model (the oracle).
// cpu_model exposes no hook into its attention, so the test builds a tiny
// random Llama whose logits give that attention back exactly: layer 0 adds
// nothing (o and down are zero, its K and V are still cached), layer 1's
// o_proj is the identity and its MLP adds nothing, the final norm's weight
// is one and the LM head's first rows are the identity, so the last row's
// logits are rmsnorm(e + att) with e its token's embedding; with a large
// rms eps the norm inverts (mean(y^2) = M / (M + eps)) and att = x - e.
// The reference then runs over the model's own pages (converted to fp16 or
// bf16) at layer 1, with q recomputed here from e in fp64 (layer 1's
// attn_norm, q_proj and rotary embedding), for three steps of prefill,
// chunked prefill and decode over shuffled pages, split and unsplit.
#include "gpu/cpu_model.hpp"
#include "gpu/cuda/plan.hpp"
#include "gpu/cuda/reference_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

// kv_layout's offsets are cpu_model's page layout ([page][layer][K, V]
// [slot][kv_dim]): page 1, layer 1, V, slot 2 of 2 layers, 3 slots, kv_dim 2.
static_assert(kv_layout{.num_layers = 2, .num_kv_heads = 1, .head_dim = 2, .page_tokens = 3}
                .offset(1, 1, 1, 2) == ((1 * 2 + 1) * 2 + 1) * 3 * 2 + 2 * 2);

struct model_dims {
  std::uint32_t heads = 4;
  std::uint32_t kv_heads = 2;
  std::uint32_t head_dim = 64;
  std::uint32_t page_tokens = 4;
  std::uint32_t pool_pages = 40;
};

constexpr float rms_eps = 1.0f;

std::vector<float> randn(std::mt19937_64& rng, std::size_t n, float scale, float mean = 0.0f) {
  std::normal_distribution<float> d{0.0f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v)
    x = mean + scale * d(rng);
  return v;
}

std::vector<float> identity(std::size_t rows, std::size_t cols) {
  std::vector<float> m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < std::min(rows, cols); ++i)
    m[i * cols + i] = 1.0f;
  return m;
}

llama_weights make_weights(const model_dims& d, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  llama_weights w;
  auto& c = w.config;
  const std::uint32_t hidden = d.heads * d.head_dim; // o_proj can be the identity
  c.hidden_size = hidden;
  c.intermediate_size = 32;
  c.num_layers = 2;
  c.num_heads = d.heads;
  c.num_kv_heads = d.kv_heads;
  c.head_dim = d.head_dim;
  c.vocab_size = hidden + 16;
  c.rms_norm_eps = rms_eps;
  const std::size_t h = hidden, qd = hidden, kd = std::size_t{d.kv_heads} * d.head_dim;
  const float proj = 1.0f / std::sqrt(static_cast<float>(h));
  w.embed = randn(rng, std::size_t{c.vocab_size} * h, 1.0f);
  for (std::uint32_t l = 0; l < 2; ++l) {
    llama_layer_weights lw;
    lw.attn_norm = randn(rng, h, 0.1f, 1.0f);
    lw.q = randn(rng, qd * h, 1.5f * proj); // scores of a few units: a peaked softmax
    lw.k = randn(rng, kd * h, 1.5f * proj);
    lw.v = randn(rng, kd * h, proj);
    lw.o = l == 0 ? std::vector<float>(h * qd, 0.0f) : identity(h, qd);
    lw.mlp_norm = randn(rng, h, 0.1f, 1.0f);
    lw.gate = randn(rng, 32 * h, proj);
    lw.up = randn(rng, 32 * h, proj);
    lw.down.assign(h * 32, 0.0f);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm.assign(h, 1.0f);
  w.lm_head = identity(c.vocab_size, h);
  return w;
}

// Layer 1's query of token `tok` at position `pos`, as the model computes
// it (HF Llama: rmsnorm, q_proj, rotate-half rotary embedding), in fp64.
std::vector<double> query_of(const llama_weights& w, std::int32_t tok, std::uint32_t pos) {
  const auto& c = w.config;
  const std::size_t h = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const float* e = w.embed.data() + static_cast<std::size_t>(tok) * h;
  double ss = 0;
  for (std::size_t i = 0; i < h; ++i)
    ss += double{e[i]} * e[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(h) + c.rms_norm_eps);
  const auto& lw = w.layers[1];
  std::vector<double> x(h), q(std::size_t{c.num_heads} * hd, 0.0);
  for (std::size_t i = 0; i < h; ++i)
    x[i] = lw.attn_norm[i] * (e[i] * inv);
  for (std::size_t o = 0; o < q.size(); ++o)
    for (std::size_t i = 0; i < h; ++i)
      q[o] += double{lw.q[o * h + i]} * x[i];
  for (std::size_t head = 0; head < c.num_heads; ++head)
    for (std::size_t j = 0; j < half; ++j) {
      // The model's angle: fp32 position times fp32 inverse frequency.
      const auto inv_freq = static_cast<float>(
        1.0 / std::pow(static_cast<double>(c.rope_theta), static_cast<double>(2 * j) / hd));
      const float angle = static_cast<float>(pos) * inv_freq;
      const double cr = static_cast<float>(std::cos(double{angle}));
      const double sr = static_cast<float>(std::sin(double{angle}));
      double& a = q[head * hd + j];
      double& b = q[head * hd + j + half];
      const double a0 = a, b0 = b;
      a = a0 * cr - b0 * sr;
      b = b0 * cr + a0 * sr;
    }
  return q;
}

// Layer 1's attention output of a sequence's last row, read back from its logits.
std::vector<double> attention_from_logits(const llama_weights& w, std::span<const float> logits,
                                          std::int32_t last_token) {
  const std::size_t h = w.config.hidden_size;
  double m = 0;
  for (std::size_t i = 0; i < h; ++i)
    m += double{logits[i]} * logits[i];
  m /= static_cast<double>(h);
  const double mean_x2 = rms_eps * m / (1.0 - m);
  const double scale = std::sqrt(mean_x2 + rms_eps);
  std::vector<double> att(h);
  const float* e = w.embed.data() + static_cast<std::size_t>(last_token) * h;
  for (std::size_t i = 0; i < h; ++i)
    att[i] = logits[i] * scale - e[i];
  return att;
}

struct step_seq {
  std::uint32_t id; // which of the test's sequences
  std::uint32_t new_tokens;
};

void run_oracle(dtype t, const model_dims& d, std::uint64_t seed) {
  const auto weights = make_weights(d, seed);
  cpu_model model(weights, d.pool_pages, d.page_tokens);
  const kv_layout kv{.num_layers = 2, .num_kv_heads = d.kv_heads, .head_dim = d.head_dim,
                     .page_tokens = d.page_tokens};
  ASSERT_EQ(model.page_floats(), kv.page_elems());

  std::mt19937_64 rng{seed + 1};
  std::vector<std::uint32_t> free_pages(d.pool_pages);
  std::iota(free_pages.begin(), free_pages.end(), 0u);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  std::uniform_int_distribution<std::int32_t> token{0, static_cast<std::int32_t>(weights.config.vocab_size) - 1};

  constexpr std::uint32_t seq_count = 3;
  std::vector<std::vector<std::int32_t>> tokens(seq_count); // every token fed so far
  std::vector<std::vector<std::uint32_t>> pages(seq_count);
  const std::vector<std::vector<step_seq>> steps{
    {{0, 23}, {1, 6}},          // two prefills
    {{0, 1}, {1, 9}, {2, 1}},   // decode, chunked prefill with context, a one-token prompt
    {{0, 1}, {1, 1}, {2, 1}},   // decodes
    {{2, 13}, {0, 1}},          // a later chunk of a short sequence and a decode
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  double max_att = 0;
  for (std::size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<step_entry> entries;
    std::vector<std::vector<std::int32_t>> fed;
    for (const auto& s : steps[step]) {
      step_entry e;
      e.request_id = s.id + 1;
      e.context_tokens = static_cast<std::uint32_t>(tokens[s.id].size());
      e.new_tokens = s.new_tokens;
      for (std::uint32_t i = 0; i < s.new_tokens; ++i)
        e.tokens.push_back(token(rng));
      const std::uint32_t need = (e.context_tokens + e.new_tokens + d.page_tokens - 1) / d.page_tokens;
      while (pages[s.id].size() < need) {
        ASSERT_FALSE(free_pages.empty());
        pages[s.id].push_back(free_pages.back());
        free_pages.pop_back();
      }
      e.pages = pages[s.id];
      entries.push_back(e);
    }
    std::vector<cpu_sequence> batch;
    for (const auto& e : entries)
      batch.push_back({e.tokens, e.context_tokens, e.pages, nullptr, false});
    const auto logits = model.forward(batch);
    ASSERT_EQ(logits.size(), entries.size() * weights.config.vocab_size);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto& all = tokens[steps[step][i].id];
      all.insert(all.end(), entries[i].tokens.begin(), entries[i].tokens.end());
    }

    // The model's pages, in the reference's element type.
    std::vector<std::uint16_t> pool(std::size_t{d.pool_pages} * kv.page_elems());
    std::vector<float> page(model.page_floats());
    for (std::uint32_t p = 0; p < d.pool_pages; ++p) {
      ASSERT_TRUE(model.read_page(p, page));
      for (std::size_t i = 0; i < page.size(); ++i)
        pool[p * page.size() + i] = to_bits(t, page[i]);
    }
    for (const auto& split : {attention_split{64, 0}, attention_split{4, 8}}) {
      plan_inputs in;
      in.kv = kv;
      in.vocab_size = weights.config.vocab_size;
      in.pool_pages = d.pool_pages;
      in.split = split;
      const auto plan = plan_batch(entries, in);
      ASSERT_TRUE(plan.rejected.empty());
      const std::uint32_t width = d.heads * d.head_dim;
      std::vector<std::uint16_t> q(std::size_t{plan.rows()} * width);
      for (std::uint32_t r = 0; r < plan.rows(); ++r) {
        const auto qr = query_of(weights, plan.token_ids[r], static_cast<std::uint32_t>(plan.positions[r]));
        for (std::uint32_t i = 0; i < width; ++i)
          q[std::size_t{r} * width + i] = to_bits(t, static_cast<float>(qr[i]));
      }
      const auto out = attention_reference(t, plan, kv, 1, d.heads, scale, q, pool);
      const double tol = t == dtype::f16 ? 2e-3 : 1.5e-2;
      for (std::uint32_t s = 0; s < plan.seqs(); ++s) {
        const std::uint32_t entry = plan.order[s];
        const std::uint32_t row = plan.last_row[s];
        const auto want = attention_from_logits(
          weights, std::span(logits).subspan(std::size_t{entry} * weights.config.vocab_size),
          entries[entry].tokens.back());
        std::size_t bad = 0;
        for (std::uint32_t i = 0; i < width; ++i) {
          const double got = from_bits(t, out[std::size_t{row} * width + i]);
          max_att = std::max(max_att, std::abs(want[i]));
          if (std::abs(got - want[i]) > tol * (1 + std::abs(want[i])) && ++bad <= 3)
            ADD_FAILURE() << "q_tile " << split.q_tile << " chunk " << split.kv_chunk << " entry "
                          << entry << " head " << i / d.head_dim << " dim " << i % d.head_dim
                          << ": reference " << got << ", model " << want[i];
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
  EXPECT_GT(max_att, 0.1) << "the model's attention read back as nearly zero";
}

TEST(attention_oracle, the_reference_reproduces_the_cpu_models_attention) {
  for (dtype t : {dtype::f16, dtype::bf16}) {
    SCOPED_TRACE(std::string(to_string(t)));
    run_oracle(t, {.heads = 4, .kv_heads = 2, .head_dim = 64}, 11);  // GQA 2
    run_oracle(t, {.heads = 4, .kv_heads = 1, .head_dim = 64}, 12);  // GQA 4
    run_oracle(t, {.heads = 2, .kv_heads = 2, .head_dim = 128}, 13); // MHA
  }
}

} // namespace
} // namespace troupe::gpu::cuda
