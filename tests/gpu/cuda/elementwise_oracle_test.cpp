// The elementwise references' fp32 math (gpu/cuda/reference_elementwise.hpp)
// against gpu::cpu_model itself. cpu_model exposes no hook into its norm,
// rotary embeddings or MLP, nor its inv_freq, so the test builds tiny models
// whose outputs show them exactly:
//  - no layers and an identity LM head: the logits are the final RMSNorm;
//  - identity K projection, embeddings of +-1 and eps 0 (the norm's scale is
//    exactly 1): the K the model writes to its pages is attn_norm * x rotated
//    at the sequence's position, with the model's own inv_freq (default and
//    llama3-scaled);
//  - identity gate and down, a permutation as up, a zero o_proj: the logits
//    are the final norm of x + silu(h) * h[perm].
// The references must reproduce each bit for bit in fp32, and, on inputs
// that fp16 and bf16 hold exactly, their element-type versions must equal
// the model's values rounded once.
#include "gpu/cpu_model.hpp"
#include "gpu/cuda/reference_elementwise.hpp"

#include "elementwise_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

using namespace elementwise_test;

std::vector<float> identity(std::size_t rows, std::size_t cols) {
  std::vector<float> m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < std::min(rows, cols); ++i)
    m[i * cols + i] = 1.0f;
  return m;
}

/// Values k / 64 with 0 < |k| < 256: exact in fp16 and bf16 (8 significant bits).
std::vector<float> representable(std::mt19937_64& rng, std::size_t n, int lo = -255,
                                 int hi = 255) {
  std::uniform_int_distribution<int> k{lo, hi};
  std::vector<float> v(n);
  for (auto& x : v) {
    int q = 0;
    while (q == 0)
      q = k(rng);
    x = static_cast<float>(q) / 64.0f;
  }
  return v;
}

std::vector<float> signs(std::mt19937_64& rng, std::size_t n) {
  std::bernoulli_distribution coin{0.5};
  std::vector<float> v(n);
  for (auto& x : v)
    x = coin(rng) ? 1.0f : -1.0f;
  return v;
}

std::vector<float> randn(std::mt19937_64& rng, std::size_t n, float sd) {
  std::normal_distribution<float> d{0.0f, sd};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

std::vector<std::uint16_t> to_bits_all(dtype t, std::span<const float> v) {
  std::vector<std::uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    b[i] = to_bits(t, v[i]);
  return b;
}

/// A one-layer model of `hidden` with kv_dim == hidden (K's projection the
/// identity), a zero o_proj, and vocab == hidden with an identity LM head.
llama_weights one_layer(std::mt19937_64& rng, std::uint32_t hidden, std::uint32_t heads,
                        std::uint32_t kv_heads, float eps) {
  llama_weights w;
  auto& c = w.config;
  c.hidden_size = hidden;
  c.intermediate_size = hidden;
  c.num_layers = 1;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / kv_heads;
  c.vocab_size = hidden;
  c.rms_norm_eps = eps;
  const std::size_t h = hidden, qd = std::size_t{heads} * c.head_dim;
  w.embed = signs(rng, h * h);
  llama_layer_weights lw;
  lw.attn_norm = representable(rng, h);
  lw.q = randn(rng, qd * h, 0.1f);
  lw.k = identity(h, h);
  lw.v = randn(rng, h * h, 0.1f);
  lw.o.assign(h * qd, 0.0f);
  lw.mlp_norm = representable(rng, h, -160, 160);
  lw.gate.assign(h * h, 0.0f);
  lw.up.assign(h * h, 0.0f);
  lw.down.assign(h * h, 0.0f);
  w.layers.push_back(std::move(lw));
  w.final_norm = representable(rng, h, 32, 255);
  w.lm_head = identity(h, h);
  return w;
}

TEST(elementwise_oracle, rmsnorm_is_the_models_final_norm) {
  std::mt19937_64 rng{1};
  for (std::uint32_t hidden : {64u, 96u}) {
    llama_weights w;
    auto& c = w.config;
    c.hidden_size = hidden;
    c.intermediate_size = 8;
    c.num_layers = 0;
    c.num_heads = 2;
    c.num_kv_heads = 2;
    c.head_dim = hidden / 2;
    c.vocab_size = hidden;
    c.rms_norm_eps = 1e-5f;
    w.embed = representable(rng, std::size_t{hidden} * hidden);
    w.final_norm = representable(rng, hidden, 32, 255);
    w.lm_head = identity(hidden, hidden);
    const std::vector<float> embed = w.embed, norm = w.final_norm;
    cpu_model model(std::move(w), 1, 16);

    std::vector<std::int32_t> tokens(hidden);
    std::iota(tokens.begin(), tokens.end(), 0);
    const std::vector<std::uint32_t> page{0};
    std::vector<cpu_sequence> batch;
    for (std::uint32_t t = 0; t < hidden; ++t)
      batch.push_back({std::span(tokens).subspan(t, 1), 0, page, nullptr, false});
    const auto logits = model.forward(batch);
    ASSERT_EQ(logits.size(), std::size_t{hidden} * hidden);

    for (std::uint32_t t = 0; t < hidden; ++t) {
      const std::span<const float> x(embed.data() + std::size_t{t} * hidden, hidden);
      const float scale = rms_scale(x, 1e-5f);
      for (std::uint32_t i = 0; i < hidden; ++i)
        ASSERT_EQ(rms_apply(x[i], scale, norm[i]), logits[std::size_t{t} * hidden + i])
          << "token " << t << " element " << i;
    }
    for (dtype t : both_dtypes) {
      std::vector<std::uint16_t> out(embed.size());
      rmsnorm_reference(t, to_bits_all(t, embed), to_bits_all(t, norm), 1e-5f, hidden, hidden,
                        out);
      EXPECT_EQ(out, to_bits_all(t, logits)) << to_string(t);
    }
  }
}

struct rope_model_case {
  float theta;
  bool llama3;
};

TEST(elementwise_oracle, rope_and_inv_freq_are_the_models_rotary_embedding) {
  const std::int32_t positions[] = {0, 1, 7, 100, 4095, 8191, 20000, 65537};
  const std::uint32_t page_tokens = 64;
  for (const rope_model_case rc : {rope_model_case{10000.0f, false}, {500000.0f, true}}) {
    SCOPED_TRACE(rc.llama3 ? "llama3" : "default");
    std::mt19937_64 rng{rc.llama3 ? 3u : 2u};
    const std::uint32_t hidden = 128, heads = 4, kv_heads = 2, hd = 64;
    auto w = one_layer(rng, hidden, heads, kv_heads, 0.0f);
    w.config.rope_theta = rc.theta;
    if (rc.llama3) {
      w.config.rope.type = "llama3";
      w.config.rope.factor = 8.0;
      w.config.rope.low_freq_factor = 1.0;
      w.config.rope.high_freq_factor = 4.0;
      w.config.rope.original_max_position_embeddings = 8192;
    }
    const auto cfg = w.config;
    const std::vector<float> embed = w.embed, attn_norm = w.layers[0].attn_norm;
    const std::size_t n_seq = std::size(positions);
    cpu_model model(std::move(w), n_seq, page_tokens);

    // Sequence s: token s at positions[s], every page of it page s (the
    // model reads the earlier positions from there; their values do not
    // matter, o_proj is zero).
    std::vector<std::int32_t> tokens(n_seq);
    std::iota(tokens.begin(), tokens.end(), 0);
    std::vector<std::vector<std::uint32_t>> pages(n_seq);
    std::vector<cpu_sequence> batch;
    for (std::size_t s = 0; s < n_seq; ++s) {
      pages[s].assign(positions[s] / page_tokens + 1, static_cast<std::uint32_t>(s));
      batch.push_back({std::span(tokens).subspan(s, 1), static_cast<std::uint32_t>(positions[s]),
                       pages[s], nullptr, false});
    }
    ASSERT_FALSE(model.forward(batch).empty());

    const auto inv = rope_inv_freq(hd, cfg.rope_theta, cfg.rope);
    std::vector<float> page(model.page_floats());
    for (std::size_t s = 0; s < n_seq; ++s) {
      ASSERT_TRUE(model.read_page(static_cast<std::uint32_t>(s), page));
      // [layer 0][K][slot][kv_dim]
      const float* k = page.data() + std::size_t{positions[s] % page_tokens} * hidden;
      // Before the rotation: attn_norm * x, exact (x = +-1, scale 1).
      std::vector<float> pre(hidden);
      for (std::uint32_t i = 0; i < hidden; ++i)
        pre[i] = attn_norm[i] * embed[s * hidden + i];
      for (std::uint32_t head = 0; head < kv_heads; ++head)
        for (std::uint32_t j = 0; j < hd / 2; ++j) {
          const std::size_t a = head * hd + j, b = a + hd / 2;
          const rope_pair p = rope_rotate(pre[a], pre[b], rope_angle(positions[s], inv[j]));
          ASSERT_EQ(p.a, k[a]) << "position " << positions[s] << " element " << a;
          ASSERT_EQ(p.b, k[b]) << "position " << positions[s] << " element " << b;
        }
      // The element-type version: the model's K rounded once.
      for (dtype t : both_dtypes) {
        auto kb = to_bits_all(t, pre);
        std::vector<std::uint16_t> none;
        const std::int32_t pos[] = {positions[s]};
        rope_reference(t, none, kb, pos, inv, 1, 0, kv_heads, hd);
        EXPECT_EQ(kb, to_bits_all(t, std::span<const float>(k, hidden)))
          << to_string(t) << " position " << positions[s];
      }
    }
  }
}

TEST(elementwise_oracle, swiglu_is_the_models_mlp_activation) {
  std::mt19937_64 rng{4};
  const std::uint32_t hidden = 64;
  auto w = one_layer(rng, hidden, 2, 2, 0.0f);
  std::vector<std::uint32_t> perm(hidden);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), rng);
  auto& lw = w.layers[0];
  lw.gate = identity(hidden, hidden);
  lw.down = identity(hidden, hidden);
  for (std::uint32_t i = 0; i < hidden; ++i)
    lw.up[std::size_t{i} * hidden + perm[i]] = 1.0f; // u[i] = h[perm[i]]
  const std::vector<float> embed = w.embed, mlp_norm = lw.mlp_norm, final_norm = w.final_norm;
  cpu_model model(std::move(w), 1, 16);

  std::vector<std::int32_t> tokens(hidden);
  std::iota(tokens.begin(), tokens.end(), 0);
  const std::vector<std::uint32_t> page{0};
  for (std::uint32_t tok = 0; tok < hidden; ++tok) {
    const std::vector<cpu_sequence> batch{{std::span(tokens).subspan(tok, 1), 0, page, nullptr, false}};
    const auto logits = model.forward(batch);
    ASSERT_EQ(logits.size(), hidden);
    // h = mlp_norm * x exactly (x = +-1, eps 0); g = h, u = h[perm].
    std::vector<float> g(hidden), u(hidden), x1(hidden);
    for (std::uint32_t i = 0; i < hidden; ++i)
      g[i] = mlp_norm[i] * embed[tok * hidden + i];
    for (std::uint32_t i = 0; i < hidden; ++i) {
      u[i] = g[perm[i]];
      x1[i] = embed[tok * hidden + i] + silu_mul(g[i], u[i]);
    }
    const float scale = rms_scale(x1, 0.0f);
    for (std::uint32_t i = 0; i < hidden; ++i)
      ASSERT_EQ(rms_apply(x1[i], scale, final_norm[i]), logits[i]) << "token " << tok << " " << i;
    // The element-type version on these exact inputs: silu_mul rounded once.
    for (dtype t : both_dtypes) {
      std::vector<float> gu(g);
      gu.insert(gu.end(), u.begin(), u.end());
      std::vector<std::uint16_t> out(hidden);
      swiglu_reference(t, to_bits_all(t, gu), 1, hidden, out);
      for (std::uint32_t i = 0; i < hidden; ++i)
        ASSERT_EQ(out[i], to_bits(t, silu_mul(g[i], u[i]))) << to_string(t) << " " << i;
    }
  }
}

} // namespace
} // namespace troupe::gpu::cuda
