// A Llama model's weights in fp32 host memory, in Hugging Face's layout
// (every projection row-major [out_features, in_features]), and its loader.
// Used by the cpu backend. The CUDA backend reads the tensors one at a time
// instead (visit_llama_tensors), straight from the mapped files to the
// device, so a 7B model never sits in host memory in fp32.
#pragma once

#include "gpu/llama_config.hpp"
#include "gpu/safetensors.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// Which weight of a Llama checkpoint (per layer from attn_norm to o_bias).
enum class llama_tensor : std::uint8_t {
  embed, final_norm, lm_head, attn_norm, q, k, v, o, mlp_norm, gate, up, down, q_bias, k_bias, v_bias, o_bias,
  q_norm, k_norm
};

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
  /// The projections' biases, empty where the config has none.
  std::vector<float> q_bias;     ///< [heads*hd]           self_attn.q_proj.bias
  std::vector<float> k_bias;     ///< [kv*hd]
  std::vector<float> v_bias;     ///< [kv*hd]
  std::vector<float> o_bias;     ///< [hidden]
  /// Qwen3's per-head norms of q and k, empty where the config has none.
  std::vector<float> q_norm;     ///< [hd]                 self_attn.q_norm
  std::vector<float> k_norm;     ///< [hd]                 self_attn.k_norm
};

struct llama_weights {
  llama_config config;
  std::vector<float> embed;      ///< [vocab, hidden]      model.embed_tokens
  std::vector<llama_layer_weights> layers;
  std::vector<float> final_norm; ///< [hidden]            model.norm
  /// [vocab, hidden] lm_head; empty when tie_word_embeddings (use embed).
  std::vector<float> lm_head;

  /// The values of tensor `which` (of `layer` for per-layer tensors).
  std::vector<float>& tensor(llama_tensor which, std::uint32_t layer);
  const std::vector<float>& tensor(llama_tensor which, std::uint32_t layer) const;
};

/// One tensor of a checkpoint: which, its layer (0 for the model's own),
/// Hugging Face's name and the shape the config gives it. Where the file
/// stores it inside a larger tensor (fused_projections: Phi-3's q, k and v
/// in self_attn.qkv_proj), `name` is that tensor's, `stored_shape` its
/// shape, and this one its rows from `row_begin`.
struct llama_tensor_ref {
  llama_tensor which;
  std::uint32_t layer = 0;
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint64_t> stored_shape; ///< empty: stored alone, as `shape`
  std::uint64_t row_begin = 0;
};

/// Every tensor of a checkpoint with config `c`, in this order: embed, each
/// layer's attn_norm, q, k, v, o, mlp_norm, gate, up and down, then its
/// q, k and v biases (qkv_bias), o bias (o_bias) and q and k norms
/// (qk_norm), final_norm, and lm_head unless the embeddings are tied.
std::vector<llama_tensor_ref> llama_checkpoint_tensors(const llama_config& c);

/// The checkpoint's tensors as a file holds them, for writers: each
/// tensor's values(ref), those stored in one tensor joined in row order
/// under its name, in llama_checkpoint_tensors' order of their first.
std::vector<named_tensor> llama_checkpoint_named(
  const llama_config& c, const std::function<std::vector<float>(const llama_tensor_ref&)>& values);

struct tensor_view;

/// Loads config.json and the safetensors weights of `model_dir`. Errors
/// name the file and the tensor.
std::variant<llama_weights, std::string> load_llama(const std::string& model_dir);

/// The tensors of the checkpoint in `model_dir` (safetensors, one file or
/// shards) whose config.json says `c`, one at a time: every tensor is
/// checked first (present, of the shape `c` gives it), and only then is
/// visit(which, layer, tensor) called for each, in llama_checkpoint_tensors'
/// order. The tensor's data is mapped from its file, in the file's
/// type, and valid during the call. Returns the first problem, naming the
/// file and the tensor, with nothing visited; an exception thrown by
/// `visit` passes through.
std::optional<std::string>
visit_llama_tensors(const std::string& model_dir, const llama_config& c,
                    const std::function<void(llama_tensor, std::uint32_t layer, const tensor_view&)>& visit);

/// Hugging Face's tensor name of each weight of layer `i` ("model.layers.3.mlp.up_proj.weight"),
/// or of its bias ("model.layers.3.self_attn.q_proj.bias").
std::string llama_tensor_name(std::uint32_t layer, std::string_view module, std::string_view kind = "weight");

} // namespace troupe::gpu
