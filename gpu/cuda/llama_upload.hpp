// A Hugging Face Llama (gpu/llama_weights.hpp, fp32 on the host) onto the
// GPU: its cuda_model configuration and its weights, rounded to the model's
// type. Header-only: the weights' loaders are built only where nlohmann-json
// is (troupe_gpu_loaders), the CUDA library everywhere nvcc is.
#pragma once

#include "gpu/cuda/model.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/rope.hpp"

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
  m.inv_freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope);
  m.tied_embeddings = c.tie_word_embeddings;
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
  }
}

} // namespace troupe::gpu::cuda
