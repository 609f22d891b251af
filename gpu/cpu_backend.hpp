// The `cpu` executor backend: a real Llama model from Hugging Face files,
// fp32 math on the CPU (gpu/cpu_model), PEFT adapters kept unmerged, a
// sentencepiece tokenizer and per-request seeded sampling. Built by
// runtime/backend_factory.cpp; owned and called by the executor actor.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/cpu_model.hpp"
#include "gpu/lora.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::gpu {

class cpu_backend final : public executor_backend {
public:
  /// Loads the model in `model_dir` (config.json, safetensors,
  /// tokenizer.model) and every adapter in `adapters` (id, PEFT directory),
  /// with a KV store of `pages` pages of `page_tokens` tokens. Errors name
  /// the file at fault.
  static std::variant<std::unique_ptr<cpu_backend>, std::string>
  open(const std::string& model_dir, std::uint64_t pages, std::uint32_t page_tokens,
       const std::vector<std::pair<std::uint32_t, std::string>>& adapters);

  /// Runs the batch; an entry the model cannot run (bad token id, missing
  /// pages, unknown adapter) gets token -1, which ends that request only.
  step_result run_step(std::span<const step_entry> batch) override;
  /// Adapters are already in host memory: a load costs a host copy.
  double transfer_seconds(std::uint64_t bytes) const override;
  const tokenizer& vocab() const override { return *tokenizer_; }
  std::string name() const override { return "cpu"; }

  const llama_config& config() const noexcept { return model_->config(); }

private:
  cpu_backend() = default;

  std::unique_ptr<cpu_model> model_;
  std::unique_ptr<tokenizer> tokenizer_;
  std::unordered_map<std::uint32_t, lora_adapter> adapters_;
};

} // namespace troupe::gpu
