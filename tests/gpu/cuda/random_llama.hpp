// Test fixture: a random Llama of given dimensions in host memory, weights
// drawn from normal distributions scaled so activations stay of order one,
// and rounded to the GPU's type (so the cpu model and the GPU see the same
// values). Plain C++.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/llama_weights.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace troupe::gpu::cuda {

struct dims {
  std::uint32_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
  bool qkv_bias = false; ///< Qwen2's biases on q, k and v
  bool o_bias = false;
  bool qk_norm = false; ///< Qwen3's per-head norms of q and k
  std::uint32_t sliding_window = 0; ///< Mistral 7B v0.1's attention window; 0: none
  /// Phi-4 mini's rotation: the leading elements of each head that turn
  /// (0: all), by LongRoPE's long factors with an attention factor of 1.19.
  std::uint32_t rotary_dim = 0;
};

inline std::vector<float> randn(std::mt19937_64& rng, std::size_t n, float scale, float mean, dtype t) {
  std::normal_distribution<float> d{0.0f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v)
    x = round_to(t, mean + scale * d(rng));
  return v;
}

inline llama_weights make_weights(const dims& d, dtype t, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  llama_weights w;
  auto& c = w.config;
  c.hidden_size = d.hidden;
  c.intermediate_size = d.inter;
  c.num_layers = d.layers;
  c.num_heads = d.heads;
  c.num_kv_heads = d.kv_heads;
  c.head_dim = d.head_dim;
  c.vocab_size = d.vocab;
  c.rms_norm_eps = 1e-5f;
  c.qkv_bias = d.qkv_bias;
  c.o_bias = d.o_bias;
  c.qk_norm = d.qk_norm;
  c.sliding_window = d.sliding_window;
  if (d.sliding_window > 0)
    c.model_type = "mistral";
  if (d.rotary_dim > 0) {
    c.model_type = "phi3";
    c.rotary_dim = d.rotary_dim;
    c.rope.type = "longrope";
    c.rope.original_max_position_embeddings = 32; // below max_position_embeddings: the long factors
    for (std::uint32_t i = 0; i < d.rotary_dim / 2; ++i) {
      c.rope.short_factor.push_back(1.0);
      c.rope.long_factor.push_back(1.0 + 0.5 * i);
    }
    c.rope.attention_factor = 1.19;
  }
  const std::size_t h = d.hidden, qd = d.heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  const float s_h = 1.0f / std::sqrt(static_cast<float>(h));
  w.embed = randn(rng, d.vocab * h, 1.0f, 0, t);
  for (std::uint32_t l = 0; l < d.layers; ++l) {
    llama_layer_weights lw;
    lw.attn_norm = randn(rng, h, 0.1f, 1.0f, t);
    lw.q = randn(rng, qd * h, s_h, 0, t);
    lw.k = randn(rng, kd * h, s_h, 0, t);
    lw.v = randn(rng, kd * h, s_h, 0, t);
    lw.o = randn(rng, h * qd, 1.0f / std::sqrt(static_cast<float>(qd)), 0, t);
    lw.mlp_norm = randn(rng, h, 0.1f, 1.0f, t);
    lw.gate = randn(rng, d.inter * h, s_h, 0, t);
    lw.up = randn(rng, d.inter * h, s_h, 0, t);
    lw.down = randn(rng, h * d.inter, 1.0f / std::sqrt(static_cast<float>(d.inter)), 0, t);
    if (d.qkv_bias) { // of the order of the projections' outputs, as Qwen2's are
      lw.q_bias = randn(rng, qd, 0.5f, 0, t);
      lw.k_bias = randn(rng, kd, 0.5f, 0, t);
      lw.v_bias = randn(rng, kd, 0.5f, 0, t);
    }
    if (d.o_bias)
      lw.o_bias = randn(rng, h, 0.5f, 0, t);
    if (d.qk_norm) {
      lw.q_norm = randn(rng, d.head_dim, 0.1f, 1.0f, t);
      lw.k_norm = randn(rng, d.head_dim, 0.1f, 1.0f, t);
    }
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = randn(rng, h, 0.1f, 1.0f, t);
  w.lm_head = randn(rng, d.vocab * h, s_h, 0, t);
  return w;
}

} // namespace troupe::gpu::cuda
