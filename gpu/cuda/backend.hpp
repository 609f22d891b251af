// The `cuda` executor backend: cuda_model behind the executor_backend calls.
// One device pool (one cudaMalloc) holds KV pages and adapter weights in the
// pages the memory pool actor hands out; a pinned host pool holds swapped
// and offloaded caches; adapters are parsed and packed once into pinned host
// copies (the host tier) and copied into their pool pages on the copy
// engine's host-to-device stream. Steps run on the compute stream; copies
// run on their own streams while a step computes, and a step over a cache
// still streaming in waits, on the GPU, for each layer's event only.
//
// Threads: run_step on the executor's; the copy calls on the copy engine's
// workers, several at once. Built by runtime/backend_factory_cuda.cpp.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/model.hpp"
#include "gpu/host_tier.hpp"
#include "gpu/llama_weights.hpp"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace troupe::gpu::cuda {

/// What opening the backend answers where no CUDA device is visible.
inline constexpr std::string_view no_device_message =
  "no CUDA device is visible to this process (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)";

struct cuda_backend_options {
  /// CUDA device ordinal.
  int device = 0;
  dtype type = dtype::f16;
  /// Tokens of KV cache per page.
  std::uint32_t page_tokens = 16;
  /// Pages in the device pool; 0: `memory_fraction` of the device memory
  /// left after the weights and the scratch of the largest step.
  std::uint64_t pages = 0;
  double memory_fraction = 0.9;
  /// Pages of pinned host memory for swapped and offloaded caches.
  std::uint64_t host_pages = 0;
  /// Bytes of packed adapters kept in pinned host memory; 0: unbounded.
  std::uint64_t host_adapter_bytes = 0;
  /// The largest step: token rows (the scheduler's token budget), sequences
  /// (max_running) and adapter rank; its scratch is reserved at start.
  std::uint32_t max_rows = 8192;
  std::uint32_t max_seqs = 256;
  std::uint32_t max_rank = 64;
  /// model_config::step_graphs: CUDA graphs of repeated steps kept; 0 off.
  std::uint32_t step_graphs = 0;
  /// Rows of logits a prompt's log-probabilities are read in at a time (a
  /// buffer on the device and one on the host); 0: 8 MiB's worth.
  std::uint32_t prompt_logits_rows = 0;
};

class cuda_backend final : public executor_backend {
public:
  /// Loads the Llama in `model_dir` (config.json and safetensors) onto
  /// device `opts.device`; `tok` is its tokenizer. Errors say what was
  /// wrong: no device visible, a file at fault, dimensions the kernels do
  /// not take (unsupported_model), a pool that does not fit.
  static std::variant<std::unique_ptr<cuda_backend>, std::string>
  open(const std::string& model_dir, std::unique_ptr<tokenizer> tok, const cuda_backend_options& opts);
  /// The same from weights already in host memory (tests, tools). open()
  /// reads the checkpoint tensor by tensor instead, so a model never sits in
  /// host memory whole.
  static std::variant<std::unique_ptr<cuda_backend>, std::string>
  create(const llama_weights& w, std::unique_ptr<tokenizer> tok, const cuda_backend_options& opts);

  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  /// Plans the batch (gpu/cuda/plan), runs it on the compute stream and
  /// returns when the tokens are on the host. An entry the planner rejects
  /// (bad token, too few pages, adapter not resident, hidden cache) or whose
  /// stream failed gets -1; a CUDA error (or a launcher's refusal) fails the
  /// whole step. Each -1 has a failure naming why. device_seconds is the
  /// step's GPU time.
  /// Whatever the outcome, it returns only once nothing of the step and no
  /// copy of a stream it names (a rejected entry's too) is still running:
  /// the runtime frees the entries' pages on the answer.
  step_result run_step(std::span<const step_entry> batch) override;
  /// From the host-to-device bandwidth measured at start (pinned memory).
  double transfer_seconds(std::uint64_t bytes) const override;
  /// Parses and packs the PEFT files into a pinned host copy on a host-tier
  /// miss (timed as disk), then copies it into the first pages of
  /// `device_pages` it needs (lora_layout::pages(rank)) on the copy stream
  /// and waits for that copy only. Refused, naming the reason: too few
  /// pages, a target outside q/k/v/o, a file at fault.
  adapter_load load_adapter(std::uint32_t id, const std::string& path, std::uint64_t bytes,
                            std::span<const std::uint32_t> device_pages) override;
  void drop_adapter(std::uint32_t id) override;
  std::uint32_t rope_long_after() const override { return model_->config().rope_long_after; }
  void forget_adapter(std::uint32_t id) override;
  /// Whole pages between the device pool and the pinned host pool, on the
  /// device-to-host or host-to-device stream.
  swap_result swap_pages(swap_direction dir, std::span<const std::uint32_t> device_pages,
                         std::span<const std::uint32_t> host_pages, std::uint64_t bytes) override;
  page_blob read_pages(bool host_pool, std::span<const std::uint32_t> pages, std::uint64_t bytes) override;
  swap_result write_host_pages(std::span<const std::uint32_t> host_pages, const std::string& data,
                               std::uint64_t bytes) override;
  bool streams_layers() const override { return true; }
  /// Enqueues every page's layer l, then records layer l's event, layer
  /// after layer, publishing each event as it is recorded; a step naming
  /// the stream makes the compute stream wait for layer l's event before
  /// layer l's work. Returns when the last layer has landed.
  swap_result stream_in(std::uint64_t stream, std::span<const std::uint32_t> device_pages,
                        std::span<const std::uint32_t> host_pages, std::uint64_t bytes) override;
  void end_stream(std::uint64_t stream) const override;
  const tokenizer& vocab() const override { return *tokenizer_; }
  /// The rows of the entries that ask are copied back with the tokens and
  /// read by gpu::logprobs_of, the cpu backend's function.
  bool computes_logprobs() const override { return true; }
  /// Through the LM head again over each asking entry's rows, a chunk of
  /// rows at a time (cuda_backend_options::prompt_logits_rows, allocated
  /// with the backend).
  bool computes_prompt_logprobs() const override { return true; }
  std::string name() const override { return "cuda"; }
  /// Set when a failed step or copy finds the context poisoned (an illegal
  /// address, a kernel fault): every later call would fail too.
  std::string broken() const override;
  /// Step graphs turned off by a capture CUDA refused (steps then launch
  /// directly): once for each reason.
  std::string notice() override;
  /// cuda_steps_replayed, cuda_step_graphs_kept, cuda_step_graphs_off (1
  /// after a refused capture), cuda_device_adapters, cuda_host_adapters,
  /// cuda_h2d_gb_per_s.
  std::vector<std::pair<std::string, double>> counters() const override;
  std::vector<std::pair<std::string, double>> gauges() const override;

  // -- observers (the factory, stats and tests) -----------------------------
  /// The device's name and ordinal, "NVIDIA H100 80GB HBM3 (CUDA device 0)".
  const std::string& device_name() const noexcept { return device_name_; }
  const model_config& config() const noexcept { return model_->config(); }
  const lora_layout& lora() const noexcept { return model_->lora(); }
  std::uint64_t pool_pages() const noexcept { return model_->pool_pages(); }
  std::uint64_t host_pages() const noexcept { return host_pages_; }
  std::uint64_t page_bytes() const noexcept { return model_->page_bytes(); }
  /// Steps replayed from step graphs so far (cuda_backend_options::step_graphs).
  std::uint64_t steps_replayed() const noexcept { return model_->steps_replayed(); }
  /// Pool bytes an adapter of rank `r` takes: whole pages of lora().
  std::uint64_t adapter_bytes(std::uint32_t r) const noexcept { return lora().pages(r) * page_bytes(); }
  /// Measured host-to-device bandwidth, bytes per second.
  double h2d_bandwidth() const noexcept { return h2d_bytes_per_s_; }
  std::size_t device_adapters() const;
  std::size_t host_adapters() const;
  /// Streams known: in flight, or landed and not yet used by a step.
  std::size_t streams() const;

private:
  /// open and create: the backend for `config` with the model's weights
  /// written by `upload` (its error, if any, is the answer).
  static std::variant<std::unique_ptr<cuda_backend>, std::string>
  build(const llama_config& config, std::unique_ptr<tokenizer> tok, const cuda_backend_options& opts,
        const std::function<std::optional<std::string>(cuda_model&)>& upload);

  struct host_adapter;
  struct layer_stream;

  cuda_backend() = default;
  void bind() const;
  /// After a copy or step failed part-way: lets what it had enqueued on
  /// `stream` finish (or fail) before the caller answers, since the runtime
  /// reuses the pages (and may free the host buffer) on that answer. A
  /// fault that poisoned the context is kept for broken().
  void drain(cudaStream_t stream) const noexcept;
  std::shared_ptr<layer_stream> stream_state(std::uint64_t id) const;
  /// Blocks until stream_in has enqueued every layer of `s` and the last
  /// has landed, or it failed (having drained its copies first).
  void settle(const layer_stream& s) const;
  /// Copies pages one after the other between the pools on `stream`, then
  /// waits for that copy; an error names the page at fault.
  /// Entry `e`'s prompt log-probabilities from the last step's rows
  /// [first_row, first_row + e.new_tokens) (step_result::prompt_logprobs).
  std::vector<token_logprobs> prompt_logprobs(std::uint32_t first_row, const step_entry& e);
  std::string copy_pages(bool to_host, std::span<const std::uint32_t> device_pages,
                         std::span<const std::uint32_t> host_pages, cudaStream_t stream);

  int device_ = 0;
  llama_config llama_;
  std::unique_ptr<tokenizer> tokenizer_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaEvent_t step_begin_ = nullptr;
  cudaEvent_t step_end_ = nullptr;
  std::unique_ptr<cuda_model> model_;
  pinned_buffer<std::int32_t> tokens_;
  pinned_buffer<float> logits_; ///< rows of the entries that ask for log-probabilities
  /// A chunk of a prompt's logits (prompt log-probabilities), on the device
  /// and its copy on the host: prompt_chunk_rows() rows of the vocabulary.
  device_buffer<float> prompt_logits_;
  pinned_buffer<float> prompt_logits_host_;
  double h2d_bytes_per_s_ = 0;

  // Pinned host pool: page i at host_pool_ + i * page_bytes().
  std::uint64_t host_pages_ = 0;
  pinned_buffer<std::uint8_t> host_pool_;

  // Adapters: host copies (packed, pinned) and those resident in the pool.
  mutable std::mutex adapters_mtx_;
  host_tier host_;
  std::unordered_map<std::uint32_t, std::shared_ptr<const host_adapter>> host_copies_;
  std::unordered_map<std::uint32_t, resident_adapter> resident_;

  // Layer-wise streams by id.
  std::uint32_t sms_ = 1; ///< the device's multiprocessors, for split_for
  std::string device_name_;
  /// The step-graph refusal notice() last gave.
  std::string graphs_noticed_;
  mutable std::mutex broken_mtx_;
  mutable std::string broken_;
  mutable std::mutex streams_mtx_;
  mutable std::condition_variable streams_cv_;
  mutable std::unordered_map<std::uint64_t, std::shared_ptr<layer_stream>> streams_;

};

} // namespace troupe::gpu::cuda
