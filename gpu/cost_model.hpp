// roofline_cost_model: predicts the device time of a continuous-batching step
// and of a host-to-device copy from a model shape, a GPU spec and a few
// efficiency constants. Used by the sim backend, by troupe-sim and by
// benchmarks; the constants are to be fitted to cuda-backend measurements.
#pragma once

#include "gpu/gpu_spec.hpp"
#include "gpu/model_shape.hpp"
#include "gpu/step.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace troupe::gpu {

/// How far real kernels fall short of the datasheet, plus fixed costs. The
/// defaults are typical of fp16 serving stacks on A100/H100-class GPUs; a
/// calibration run of the cuda backend replaces them per deployment.
struct cost_constants {
  /// Fraction of peak_flops a whole step sustains when compute-bound. Large
  /// cuBLAS fp16 GEMMs reach 70-80% of dense peak, but a step also runs
  /// attention, LoRA and elementwise kernels at lower utilisation: 0.6.
  double flops_efficiency = 0.6;
  /// Fraction of HBM bandwidth a step sustains when memory-bound. Streaming
  /// kernels reach 85-90% of peak; decode GEMVs over the weights and paged
  /// KV reads a little less: 0.8.
  double hbm_efficiency = 0.8;
  /// Fraction of gpu_spec::pcie_bytes_per_s a copy sustains. That figure is
  /// already the effective pinned-copy rate, hence 1; lower it for pageable
  /// host memory (roughly half).
  double pcie_efficiency = 1.0;
  /// Seconds every non-empty step costs on top of the roofline: host-side
  /// batch planning, page-table upload, sampling and launch gaps of the ~300
  /// kernels of a 32-40 layer decoder without CUDA graphs; about 1 ms.
  double step_overhead_seconds = 1e-3;
  /// Seconds every non-empty copy costs on top of its bytes: driver call and
  /// DMA setup of one cudaMemcpyAsync, about 10 us.
  double transfer_latency_seconds = 10e-6;
  /// Bytes per second of reading adapter files from disk into host memory:
  /// a datacenter NVMe SSD reads 3-7 GB/s sequentially, less after
  /// filesystem and parsing overhead; 2 GB/s.
  double disk_bytes_per_s = 2e9;
};

/// Why `c` is unusable (an efficiency outside (0, 1], a negative time), or
/// nullopt when it is fine. For config loaders; the model itself does not check.
std::optional<std::string> validate_cost_constants(const cost_constants& c);

/// Σ_{j=0}^{m-1} max(a0 + a1·j, b0 + b1·j), in closed form.
double sum_of_max_affine(double a0, double a1, double b0, double b1, std::uint64_t m) noexcept;

/// Roofline time of a step: fixed overhead + max(compute time, memory time).
/// Immutable after construction; every member is safe to call concurrently.
class roofline_cost_model {
public:
  /// Binds the model to one shape, one GPU and its constants. Expects a
  /// validated shape, positive GPU rates and constants that pass
  /// validate_cost_constants().
  roofline_cost_model(model_shape shape, gpu_spec gpu, cost_constants constants = {});

  // -- step cost ----------------------------------------------------------------

  /// Predicted device seconds of one step over `batch`; 0 for an empty batch.
  double step_seconds(std::span<const step_entry> batch) const noexcept;

  /// FLOPs of the step: 2 * layer matmul parameters per new token, the
  /// lm_head once per entry (only its last position is sampled), attention
  /// QK^T and PV of every new token over its context and the new tokens before
  /// it (causal; within the shape's sliding window where it has one), and
  /// each entry's LoRA FLOPs at its rank.
  double flops(std::span<const step_entry> batch) const noexcept;

  /// HBM bytes the step moves: base weights read once, each entry's context
  /// KV read (what its tokens' sliding windows hold, where the shape has
  /// one), the new tokens' KV written, and the weights of each distinct
  /// adapter (adapter_id != 0) read once; 0 for an empty batch.
  double bytes(std::span<const step_entry> batch) const noexcept;

  /// flops(batch) / (peak_flops * flops_efficiency).
  double compute_seconds(std::span<const step_entry> batch) const noexcept;

  /// bytes(batch) / (hbm_bytes_per_s * hbm_efficiency).
  double memory_seconds(std::span<const step_entry> batch) const noexcept;

  /// A request's latency alone on an idle GPU, its adapter resident: one
  /// prefill step over the prompt (which gives the first token), then one
  /// decode step for each further output token over the growing context.
  /// The denominator of a request's slowdown (Chameleon's, e2e over this).
  /// Constant time: a lone decode step's compute and memory times are both
  /// affine in the context, so their maxima sum in closed form.
  double isolated_seconds(std::uint32_t prompt_tokens, std::uint32_t output_tokens, std::uint32_t adapter_id = 0,
                          std::uint32_t adapter_rank = 0) const noexcept;

  // -- transfers ----------------------------------------------------------------

  /// Seconds a host-to-device copy of `bytes` takes: latency plus bytes over
  /// the effective PCIe rate; 0 for 0 bytes.
  double transfer_seconds(std::uint64_t bytes) const noexcept;
  /// Seconds reading `bytes` of adapter files from disk into host memory.
  double disk_seconds(std::uint64_t bytes) const noexcept;
  /// Tokens a page of `kv_page_tokens` KV tokens holds as a hidden cache
  /// (the QKV input per layer), or 0 where that saves nothing.
  std::uint32_t hidden_tokens_per_page(std::uint32_t kv_page_tokens) const noexcept;
  /// Apt-Serve's ρ: seconds a step spends recomputing K and V for one KV
  /// page's worth of tokens held as a hidden cache.
  double hidden_seconds_per_kv_page(std::uint32_t kv_page_tokens) const noexcept;

  // -- observers ----------------------------------------------------------------

  /// The model shape this cost model prices.
  const model_shape& shape() const noexcept { return shape_; }
  /// The GPU this cost model prices.
  const gpu_spec& gpu() const noexcept { return gpu_; }
  /// The efficiency constants in use.
  const cost_constants& constants() const noexcept { return constants_; }

private:
  model_shape shape_;
  gpu_spec gpu_;
  cost_constants constants_;
};

} // namespace troupe::gpu
