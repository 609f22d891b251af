// A Hugging Face Llama onto the GPU: its cuda_model configuration, and its
// weights rounded to the model's type, from fp32 in host memory
// (llama_weights) or tensor by tensor from the checkpoint's mapped files.
// Header-only: the weights' loaders are built only where nlohmann-json is
// (troupe_gpu_loaders), the CUDA library everywhere nvcc is.
#pragma once

#include "gpu/cuda/model.hpp"
#include "gpu/cuda/weight_bits.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/rope.hpp"

#include <optional>
#include <string>

namespace troupe::gpu::cuda {

inline model_config model_config_for(const llama_config& c, dtype t) {
  model_config m;
  m.hidden = c.hidden_size;
  m.intermediate = c.intermediate_size;
  m.layers = c.num_layers;
  m.heads = c.num_heads;
  m.kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.vocab = c.vocab_size;
  m.rms_eps = c.rms_norm_eps;
  auto rope = rope_for(c);
  m.inv_freq = std::move(rope.inv_freq);
  m.long_inv_freq = std::move(rope.long_inv_freq);
  m.rope_long_after = rope.long_after;
  m.rope_scale = rope.scale;
  m.tied_embeddings = c.tie_word_embeddings;
  m.qkv_bias = c.qkv_bias;
  m.o_bias = c.o_bias;
  m.qk_norm = c.qk_norm;
  m.sliding_window = c.sliding_window;
  m.type = t;
  return m;
}

inline void upload_weights(cuda_model& m, const llama_weights& w) {
  m.set_weight(weight::embed, 0, w.embed);
  m.set_weight(weight::final_norm, 0, w.final_norm);
  if (!w.config.tie_word_embeddings)
    m.set_weight(weight::lm_head, 0, w.lm_head);
  for (std::uint32_t l = 0; l < w.layers.size(); ++l) {
    const auto& lw = w.layers[l];
    m.set_weight(weight::attn_norm, l, lw.attn_norm);
    m.set_weight(weight::wq, l, lw.q);
    m.set_weight(weight::wk, l, lw.k);
    m.set_weight(weight::wv, l, lw.v);
    m.set_weight(weight::wo, l, lw.o);
    m.set_weight(weight::mlp_norm, l, lw.mlp_norm);
    m.set_weight(weight::w_gate, l, lw.gate);
    m.set_weight(weight::w_up, l, lw.up);
    m.set_weight(weight::w_down, l, lw.down);
    if (w.config.qkv_bias) {
      m.set_weight(weight::bq, l, lw.q_bias);
      m.set_weight(weight::bk, l, lw.k_bias);
      m.set_weight(weight::bv, l, lw.v_bias);
    }
    if (w.config.o_bias)
      m.set_weight(weight::bo, l, lw.o_bias);
    if (w.config.qk_norm) {
      m.set_weight(weight::q_norm, l, lw.q_norm);
      m.set_weight(weight::k_norm, l, lw.k_norm);
    }
  }
}

/// The cuda_model weight a checkpoint's tensor fills.
constexpr weight weight_of(llama_tensor t) noexcept {
  switch (t) {
    case llama_tensor::embed: return weight::embed;
    case llama_tensor::final_norm: return weight::final_norm;
    case llama_tensor::lm_head: return weight::lm_head;
    case llama_tensor::attn_norm: return weight::attn_norm;
    case llama_tensor::q: return weight::wq;
    case llama_tensor::k: return weight::wk;
    case llama_tensor::v: return weight::wv;
    case llama_tensor::o: return weight::wo;
    case llama_tensor::mlp_norm: return weight::mlp_norm;
    case llama_tensor::gate: return weight::w_gate;
    case llama_tensor::up: return weight::w_up;
    case llama_tensor::down: return weight::w_down;
    case llama_tensor::q_bias: return weight::bq;
    case llama_tensor::k_bias: return weight::bk;
    case llama_tensor::v_bias: return weight::bv;
    case llama_tensor::o_bias: return weight::bo;
    case llama_tensor::q_norm: return weight::q_norm;
    case llama_tensor::k_norm: return weight::k_norm;
  }
  return weight::embed;
}

/// Uploads the checkpoint in `model_dir` (config `c`, which `m` was made
/// for) one tensor at a time: at most one tensor in the model's type sits
/// in host memory at once. Returns the loader's error (a missing tensor, a
/// wrong shape: nothing uploaded then), or nullopt.
inline std::optional<std::string> upload_checkpoint(cuda_model& m, const std::string& model_dir,
                                                    const llama_config& c) {
  return visit_llama_tensors(model_dir, c, [&](llama_tensor which, std::uint32_t layer, const tensor_view& t) {
    m.set_weight_bits(weight_of(which), layer, weight_bits(t, m.config().type));
  });
}

} // namespace troupe::gpu::cuda
