// model_shape: the dimensions of a decoder-only transformer (Llama family) and
// the sizes derived from them (parameters, weight and KV bytes, LoRA cost).
// Used by the roofline cost model and the sim backend, and by runtime/ to size
// the KV cache; shapes come from built-in presets or a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// Shape of a Llama-style model: RMSNorm, grouped-query attention with q,k,v,o
/// projections, a gated MLP (gate, up, down) and an lm_head. Plain data; the
/// derived sizes below are pure functions of it, callable from any thread.
struct model_shape {
  /// Preset name, the config's "name", or the file it came from.
  std::string name;
  /// Decoder layers (num_hidden_layers).
  std::uint32_t num_layers = 0;
  /// Residual stream width.
  std::uint32_t hidden_size = 0;
  /// Width of the gated MLP's inner layer.
  std::uint32_t intermediate_size = 0;
  /// Query heads.
  std::uint32_t num_heads = 0;
  /// Key/value heads; equal to num_heads without GQA, and divides it.
  std::uint32_t num_kv_heads = 0;
  /// Width of one attention head.
  std::uint32_t head_dim = 0;
  /// Token ids the embedding and lm_head cover.
  std::uint32_t vocab_size = 0;
  /// Longest sequence (prompt plus output) the model accepts.
  std::uint32_t max_context = 0;
  /// Bytes per weight and per KV element: 2 for fp16/bf16, 4 for fp32.
  std::uint32_t dtype_bytes = 2;
  /// True when lm_head shares the embedding matrix (stored once).
  bool tie_word_embeddings = false;
  /// A token attends to at most this many positions, its own among them
  /// (llama_config::sliding_window); 0: to every position before it.
  std::uint32_t sliding_window = 0;
  /// LongRoPE's pretrained context (executor_backend::rope_long_after):
  /// a request growing past it is recomputed; 0: none.
  std::uint32_t rope_long_after = 0;

  // -- dimensions ------------------------------------------------------------

  /// Width of the query projection output: num_heads * head_dim.
  std::uint64_t q_dim() const noexcept;
  /// Width of each of the key and value projection outputs: num_kv_heads * head_dim.
  std::uint64_t kv_dim() const noexcept;

  // -- parameters and bytes --------------------------------------------------

  /// Parameters of one layer's q,k,v,o projections.
  std::uint64_t attention_parameters_per_layer() const noexcept;
  /// Parameters of one layer's gated MLP (gate, up and down matrices).
  std::uint64_t mlp_parameters_per_layer() const noexcept;
  /// Parameters of one layer: attention, MLP and its two RMSNorm weights.
  std::uint64_t parameters_per_layer() const noexcept;
  /// Parameters of the token embedding matrix (vocab_size * hidden_size).
  std::uint64_t embedding_parameters() const noexcept;
  /// All parameters: embeddings, every layer, the final norm and lm_head
  /// (lm_head counted once more unless tie_word_embeddings).
  std::uint64_t parameter_count() const noexcept;
  /// Parameters that take part in a matrix multiply for every token fed to
  /// the decoder layers (all layer projections; no embeddings, norms or lm_head).
  std::uint64_t layer_matmul_parameters() const noexcept;
  /// Bytes of all weights at dtype_bytes each.
  std::uint64_t weight_bytes() const noexcept;
  /// KV cache bytes one token occupies: 2 * layers * kv_heads * head_dim * dtype_bytes.
  std::uint64_t kv_bytes_per_token() const noexcept;

  // -- LoRA -------------------------------------------------------------------

  /// Parameters of a rank-`rank` LoRA adapter with A and B matrices on the
  /// q,k,v,o projections of every layer (k and v use kv_dim as output width).
  std::uint64_t lora_parameters(std::uint32_t rank) const noexcept;
  /// Bytes of such an adapter at dtype_bytes per element.
  std::uint64_t lora_adapter_bytes(std::uint32_t rank) const noexcept;
  /// FLOPs such an adapter adds per token (a multiply-add counts as 2).
  double lora_flops_per_token(std::uint32_t rank) const noexcept;
};

// -- presets -------------------------------------------------------------------

/// The built-in shape called `name` ("llama-2-7b", "llama-2-13b"), if any.
std::optional<model_shape> find_model_preset(std::string_view name);

/// Names of all built-in shapes, in a stable order.
std::vector<std::string> model_preset_names();

// -- config files ----------------------------------------------------------------

/// Either a parsed shape or an error message naming the file and the key.
using model_shape_result = std::variant<model_shape, std::string>;

/// The longest sequence a model whose rope scaling of `type` stretches a
/// pretrained context of `original` positions by `factor` admits:
/// `max_positions` (config.json's max_position_embeddings), or for
/// "linear" and "yarn" original * factor where that is longer (as vLLM
/// derives it), at most 2^32 - 1.
std::uint32_t stretched_context(std::uint32_t max_positions, std::string_view type, double original, double factor);

/// Parses a Hugging Face config.json text. Keys: num_hidden_layers,
/// hidden_size, intermediate_size, num_attention_heads, vocab_size,
/// max_position_embeddings (required); num_key_value_heads (default: heads),
/// head_dim (default: hidden / heads), torch_dtype or dtype (float16/bfloat16
/// -> 2, float32 -> 4; default 2), tie_word_embeddings, name (default:
/// `source`). Integers must be positive and fit 32 bits; hidden_size must be
/// divisible by the heads when head_dim is derived, and the heads by the KV
/// heads. `source` names the text in error messages. Never throws.
model_shape_result parse_model_shape(std::string_view json_text, const std::string& source);

/// Reads and parses the config.json at `path` as parse_model_shape does.
/// Never throws; an unreadable file is an error naming `path`.
model_shape_result load_model_shape(const std::string& path);

} // namespace troupe::gpu
