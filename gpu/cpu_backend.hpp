// The `cpu` executor backend: a real Llama model from Hugging Face files,
// fp32 math on the CPU (gpu/cpu_model), PEFT adapters kept unmerged, a
// model's tokenizer (gpu/model_tokenizer) and per-request seeded sampling. Built by
// runtime/backend_factory.cpp; owned and called by the executor actor.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/cpu_model.hpp"
#include "gpu/host_tier.hpp"
#include "gpu/lora.hpp"

#include <cstdint>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::gpu {

class cpu_backend final : public executor_backend {
public:
  /// Loads the model in `model_dir` (config.json, safetensors,
  /// tokenizer.model or tokenizer.json) with a KV store of `pages` pages of `page_tokens`
  /// tokens. Adapters come later, one load_adapter() each, through a host
  /// tier of parsed adapters bounded by `host_adapter_bytes` (0: unbounded).
  /// Errors name the file at fault.
  static std::variant<std::unique_ptr<cpu_backend>, std::string>
  open(const std::string& model_dir, std::uint64_t pages, std::uint32_t page_tokens,
       std::uint64_t host_adapter_bytes = 0);

  /// Runs the batch; an entry the model cannot run (bad token id, missing
  /// pages, unknown adapter, its cache stream failed) gets token -1 and a
  /// failure naming why, which ends that request only. Returns once every
  /// stream the batch names has landed or failed.
  step_result run_step(std::span<const step_entry> batch) override;
  /// A host-to-host copy at 10 GB/s (the device is host memory here).
  double transfer_seconds(std::uint64_t bytes) const override;
  /// Parses the PEFT files into the host tier on a miss (timed as disk),
  /// then copies the weights to the "device" set run_step reads (timed as
  /// the copy). A corrupt or missing file fails this adapter only. The
  /// weights stay fp32 beside the pool: `device_pages` go unused.
  adapter_load load_adapter(std::uint32_t id, const std::string& path, std::uint64_t bytes,
                            std::span<const std::uint32_t> device_pages) override;
  void drop_adapter(std::uint32_t id) override;
  /// Copies whole pages of the model's store to and from host pages kept
  /// here (a host page's memory is freed when it is swapped back in); timed.
  gpu::swap_result swap_pages(swap_direction dir, std::span<const std::uint32_t> device_pages,
                              std::span<const std::uint32_t> host_pages, std::uint64_t bytes) override;
  gpu::page_blob read_pages(bool host_pool, std::span<const std::uint32_t> pages,
                            std::uint64_t bytes) override;
  gpu::swap_result write_host_pages(std::span<const std::uint32_t> host_pages, const std::string& data,
                                    std::uint64_t bytes) override;
  bool streams_layers() const override { return true; }
  /// Writes layer after layer of every page, publishing each; run_step
  /// waits before layer l of an entry naming the stream until l is in.
  gpu::swap_result stream_in(std::uint64_t stream, std::span<const std::uint32_t> device_pages,
                             std::span<const std::uint32_t> host_pages, std::uint64_t bytes) override;
  void end_stream(std::uint64_t stream) const override;
  /// Streams known (for tests): in flight, or landed and not yet used.
  std::size_t streams() const;
  /// Host pages holding swapped-out caches (for tests).
  std::size_t host_kv_pages() const;
  /// The model's own page size decides (it is the pool's).
  std::uint32_t hidden_cache_tokens_per_page(std::uint32_t) const override {
    return model_->hidden_saves() ? model_->hidden_page_tokens() : 0;
  }
  std::uint32_t rope_long_after() const override { return model_->config().rope_long_after(); }
  void forget_adapter(std::uint32_t id) override;
  /// Adapters on the device and in the host tier (for tests).
  std::size_t device_adapters() const;
  std::size_t host_adapters() const;
  const tokenizer& vocab() const override { return *tokenizer_; }
  bool computes_logprobs() const override { return true; }
  bool computes_prompt_logprobs() const override { return true; }
  std::string name() const override { return "cpu"; }

  const llama_config& config() const noexcept { return model_->config(); }

private:
  cpu_backend() = default;

  std::unique_ptr<cpu_model> model_;
  std::unique_ptr<tokenizer> tokenizer_;
  // Guards the adapter sets: loads run on the copy engine's thread while
  // run_step runs on the executor's. A step holds shared_ptrs, so a drop
  // never frees weights under it.
  mutable std::mutex adapters_mtx_;
  host_tier host_;
  std::unordered_map<std::uint32_t, std::shared_ptr<const lora_adapter>> host_copies_;
  std::unordered_map<std::uint32_t, std::shared_ptr<const lora_adapter>> device_;
  // Swapped-out pages by host page id. Swaps run on the copy engine's thread
  // and touch only pages no step uses.
  mutable std::mutex host_kv_mtx_;
  std::unordered_map<std::uint32_t, std::vector<float>> host_kv_;
  // Layer-wise streams: layers landed so far (or failed), by stream id.
  struct stream_state {
    std::size_t layers_in = 0;
    bool failed = false;
    std::string error; ///< stream_in's, once failed
  };
  mutable std::mutex streams_mtx_;
  std::condition_variable streams_cv_;
  mutable std::unordered_map<std::uint64_t, stream_state> streams_;
};

} // namespace troupe::gpu
