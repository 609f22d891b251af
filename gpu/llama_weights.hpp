// A Llama model's weights in fp32 host memory, in Hugging Face's layout
// (every projection row-major [out_features, in_features]), and its loader.
// Used by the cpu backend; the CUDA backend will upload the same structure.
#pragma once

#include "gpu/llama_config.hpp"

#include <string>
#include <variant>
#include <vector>

namespace troupe::gpu {

struct llama_layer_weights {
  std::vector<float> attn_norm;  ///< [hidden]            input_layernorm
  std::vector<float> q;          ///< [heads*hd, hidden]   self_attn.q_proj
  std::vector<float> k;          ///< [kv*hd, hidden]      self_attn.k_proj
  std::vector<float> v;          ///< [kv*hd, hidden]      self_attn.v_proj
  std::vector<float> o;          ///< [hidden, heads*hd]   self_attn.o_proj
  std::vector<float> mlp_norm;   ///< [hidden]            post_attention_layernorm
  std::vector<float> gate;       ///< [inter, hidden]      mlp.gate_proj
  std::vector<float> up;         ///< [inter, hidden]      mlp.up_proj
  std::vector<float> down;       ///< [hidden, inter]      mlp.down_proj
};

struct llama_weights {
  llama_config config;
  std::vector<float> embed;      ///< [vocab, hidden]      model.embed_tokens
  std::vector<llama_layer_weights> layers;
  std::vector<float> final_norm; ///< [hidden]            model.norm
  /// [vocab, hidden] lm_head; empty when tie_word_embeddings (use embed).
  std::vector<float> lm_head;
};

/// Loads config.json and the safetensors weights of `model_dir`. Errors
/// name the file and the tensor.
std::variant<llama_weights, std::string> load_llama(const std::string& model_dir);

/// Hugging Face's tensor name of each weight of layer `i` ("model.layers.3.mlp.up_proj.weight").
std::string llama_tensor_name(std::uint32_t layer, std::string_view module);

} // namespace troupe::gpu
