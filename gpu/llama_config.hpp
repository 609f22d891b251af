// The Llama family's hyperparameters as Hugging Face's config.json states
// them, and their parser. Used by the weight loaders, the cpu backend and
// troupe-mkmodel; the sim backend keeps the simpler gpu::model_shape.
#pragma once

#include "gpu/model_shape.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// config.json "rope_scaling"; type "" means none.
struct rope_scaling {
  /// "", "llama3", "longrope" (Phi-3's 128K models, Phi-3.5 and Phi-4
  /// mini; "su" in older configs), "linear" (position interpolation: every
  /// frequency divided by factor) or "yarn" (YaRN: Qwen2.5's and Qwen3's
  /// long-context setting, DeepSeek's distilled Llamas).
  std::string type;
  /// llama3's, linear's and yarn's: how many times the pretrained context
  /// the model reaches.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  /// llama3's, LongRoPE's (config.json's top-level key, else
  /// rope_scaling's) or yarn's (rope_scaling's, else
  /// max_position_embeddings): the context the model was pretrained on.
  std::uint32_t original_max_position_embeddings = 8192;
  /// yarn: the rotations over the pretrained context past which a pair
  /// keeps its frequency (beta_fast, 32) and below which it is divided by
  /// factor (beta_slow, 1); pairs between are blended linearly. With
  /// `truncate` (Hugging Face's default) the blend's ends are rounded out
  /// to whole pairs.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  /// longrope: per rotary pair, what its frequency is divided by for
  /// sequences no longer than original_max_position_embeddings (short) and
  /// for longer ones ([rotary_dim / 2] each).
  std::vector<double> short_factor, long_factor;
  /// longrope and yarn: what cos and sin are multiplied by
  /// ("attention_factor", else as Hugging Face computes it: longrope's
  /// sqrt(1 + ln(max_position_embeddings / original) / ln(original)),
  /// yarn's 0.1 ln(factor) + 1, or with "mscale" and "mscale_all_dim" the
  /// ratio of 0.1 m ln(factor) + 1 for the two).
  double attention_factor = 1.0;
};

struct llama_config {
  /// config.json "model_type": "llama", "mistral" (Llama's architecture,
  /// with or without a sliding window), "phi3" (Llama's, with q, k and v
  /// stored as one tensor and gate and up as one; a window or not), "qwen2" (Llama's with biases on q, k and v) or
  /// "qwen3" (Llama's with q and k RMS-normalised per head).
  std::string model_type = "llama";
  std::uint32_t hidden_size = 0;
  std::uint32_t intermediate_size = 0;
  std::uint32_t num_layers = 0;        ///< num_hidden_layers
  std::uint32_t num_heads = 0;         ///< num_attention_heads
  std::uint32_t num_kv_heads = 0;      ///< num_key_value_heads (default num_heads)
  std::uint32_t head_dim = 0;          ///< head_dim (default hidden / heads)
  std::uint32_t vocab_size = 0;
  std::uint32_t max_position_embeddings = 4096;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  rope_scaling rope;
  /// The leading elements of each head of q and k that the rotary
  /// embeddings turn (head_dim * partial_rotary_factor, Phi-4 mini's 0.75;
  /// the pairs are (i, i + rotary_dim / 2)); the rest pass through. 0: all
  /// of head_dim.
  std::uint32_t rotary_dim = 0;
  /// Mistral's sliding window: a token attends to itself and the
  /// sliding_window - 1 positions before it, in every layer (config.json
  /// "sliding_window", Mistral 7B v0.1's 4,096); 0: to every position before
  /// it (null, or a window no shorter than max_position_embeddings).
  std::uint32_t sliding_window = 0;
  bool tie_word_embeddings = false;
  /// Whether the q, k and v projections add a bias (Qwen2's; Llama's with
  /// attention_bias), and the o projection (Llama's with attention_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  /// Whether the checkpoint stores q, k and v as one tensor
  /// (self_attn.qkv_proj, their rows in that order) and gate and up as one
  /// (mlp.gate_up_proj), as Phi-3 does; its adapters then name qkv_proj and
  /// gate_up_proj.
  bool fused_projections = false;
  /// Whether each head of q and of k is RMS-normalised (weights
  /// [head_dim], eps rms_norm_eps) before the rotary embeddings (Qwen3's).
  bool qk_norm = false;
  std::int32_t bos_token_id = 1;
  /// eos_token_id may be one id or a list in config.json.
  std::vector<std::int32_t> eos_token_ids{2};
  std::string torch_dtype = "float32";

  /// The shape the cost model and the memory pool use.
  model_shape to_shape(const std::string& name) const;
  /// rotary_dim, or head_dim where it is 0.
  std::uint32_t rotary_dims() const noexcept { return rotary_dim != 0 ? rotary_dim : head_dim; }
  /// The longest sequence the server admits: max_position_embeddings,
  /// or where linear or yarn scaling stretches the pretrained context
  /// (yarn's original_max_position_embeddings, else
  /// max_position_embeddings) by factor, the stretched length where it is
  /// longer (as vLLM derives it: Qwen2.5's 32,768 with yarn's factor 4
  /// admits 131,072).
  std::uint32_t context_limit() const noexcept;
  /// LongRoPE: a pass leaving a sequence longer than this turns by the
  /// long factors (rope.original_max_position_embeddings); 0: one set.
  std::uint32_t rope_long_after() const noexcept {
    return rope.type == "longrope" ? rope.original_max_position_embeddings : 0;
  }
};

/// Parses config.json text; the error names `source` and the key.
std::variant<llama_config, std::string> parse_llama_config(std::string_view json_text,
                                                           const std::string& source);
/// Reads and parses a config.json file.
std::variant<llama_config, std::string> load_llama_config(const std::string& path);
/// Hugging Face's LongRoPE attention factor where a config states none:
/// sqrt(1 + ln(factor) / ln(original)), 1 for a factor of at most 1
/// (factor: max_position_embeddings over the pretrained context).
double longrope_attention_factor(double factor, double original);
/// Hugging Face's YaRN attention factor where a config states none:
/// 0.1 ln(factor) + 1, or with mscale and mscale_all_dim (both nonzero)
/// (0.1 mscale ln(factor) + 1) / (0.1 mscale_all_dim ln(factor) + 1); 1
/// for a factor of at most 1.
double yarn_attention_factor(double factor, double mscale = 0, double mscale_all_dim = 0);
/// Serializes as Hugging Face writes it (for troupe-mkmodel).
std::string to_config_json(const llama_config& c);

} // namespace troupe::gpu
