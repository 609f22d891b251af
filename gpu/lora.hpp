// A PEFT LoRA adapter in fp32 host memory and its loader: adapter_config.json
// (r, lora_alpha, target_modules, use_rslora) and adapter_model.safetensors
// with PEFT's tensor names. Used by the cpu backend (unmerged LoRA).
#pragma once

#include "gpu/llama_config.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// The projections LoRA may target, in PEFT's module names.
enum class lora_target : std::uint8_t { q, k, v, o, gate, up, down };
inline constexpr std::size_t lora_target_count = 7;

/// "q_proj", "k_proj", ..., "down_proj".
std::string_view to_string(lora_target x) noexcept;

/// One adapted projection: delta(x) = scale * B (A x).
struct lora_matrix {
  std::vector<float> a; ///< [r, in]   lora_A.weight
  std::vector<float> b; ///< [out, r]  lora_B.weight
};

struct lora_adapter {
  std::uint32_t rank = 0;
  float alpha = 0;
  bool use_rslora = false;
  /// alpha / r, or alpha / sqrt(r) with rsLoRA.
  float scale = 0;
  std::array<bool, lora_target_count> targets{};
  /// How target_modules names the projections: "qkv_proj" or
  /// "gate_up_proj" (a model with fused_projections, Phi-3's), or one of
  /// q_proj, k_proj, v_proj, gate_proj, up_proj; neither for o_proj,
  /// down_proj and all-linear alone. The base model must store them so.
  bool names_fused = false;
  bool names_separate = false;
  /// layers[i][t] is set when targets[t]; a fused tensor's parts share A.
  std::vector<std::array<lora_matrix, lora_target_count>> layers;
};

/// Loads a PEFT adapter directory for a base model with config `base`.
/// Errors name the file and the tensor or key (unsupported target modules
/// included).
std::variant<lora_adapter, std::string> load_peft_adapter(const std::string& dir,
                                                          const llama_config& base);

/// Reads only adapter_config.json of a PEFT directory: rank, alpha, targets
/// (no matrices). For registering an adapter without loading it.
std::variant<lora_adapter, std::string> read_peft_config(const std::string& dir);

/// PEFT's tensor name for layer `i`, target `t`, matrix "A" or "B".
std::string peft_tensor_name(std::uint32_t layer, lora_target t, char matrix);
/// The same for a fused projection's adapter (`module` "self_attn.qkv_proj"
/// or "mlp.gate_up_proj").
std::string peft_tensor_name(std::uint32_t layer, std::string_view module, char matrix);

} // namespace troupe::gpu
