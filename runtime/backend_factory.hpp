// Builds the executor backend a deployment asks for, and the figures derived
// from it (model shape, pool size, context limit). Used by the deployment
// bootstrap and by troupe-bench/tests that run the cores without actors.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/gpu_spec.hpp"
#include "gpu/llama_config.hpp"
#include "gpu/model_shape.hpp"
#include "runtime/adapter_registry.hpp"
#include "runtime/config.hpp"
#include "runtime/options.hpp"

#include <functional>
#include <memory>
#include <string>
#include <variant>

namespace troupe {

/// What a deployment runs on, resolved from its options.
struct resolved_backend {
  std::shared_ptr<gpu::executor_backend> backend;
  gpu::model_shape shape;
  gpu::gpu_spec gpu;
  /// prompt + max_tokens limit.
  std::uint32_t max_context = 0;
  /// Pages in the unified pool and the bytes one page holds.
  std::uint64_t pool_pages = 0;
  std::uint64_t page_bytes = 0;
  /// Wall seconds per device second for the executor and copy engine.
  double time_scale = 1.0;
  /// The backend computes in run_step (the executor gets its own thread).
  bool computes = false;
  /// Pool bytes an adapter of a rank takes, where the backend lays adapters
  /// out its own way (cuda: whole rows in whole pages); empty: the model
  /// shape's lora_adapter_bytes.
  std::function<std::uint64_t(std::uint32_t rank)> adapter_bytes;
};

/// Resolves the model shape, the GPU and the pool size and builds the
/// backend; an error message naming the option when something is wrong.
std::variant<resolved_backend, std::string> make_backend(const deployment_options& opts);

/// A Hugging Face model in `model.path`: its config, and the resolved
/// shape (cache elements of `dtype_bytes`), GPU preset and context limit.
struct hf_model {
  resolved_backend resolved;
  gpu::llama_config config;
};
std::variant<hf_model, std::string> describe_hf_model(const deployment_options& opts,
                                                     std::uint32_t dtype_bytes);

#if TROUPE_HAVE_CUDA_BACKEND
/// The cuda backend (runtime/backend_factory_cuda.cpp, where nvcc built it).
std::variant<resolved_backend, std::string> make_cuda_backend(const deployment_options& opts);
#endif

/// The adapters a deployment starts with: [[adapters]], [adapters_generate]
/// and the subdirectories of adapter_cache.directories. Adapters with files
/// take their rank from adapter_config.json; the cpu and cuda backends need
/// files for every adapter. An error names the key or file at fault.
std::variant<adapter_catalog, std::string> make_adapter_catalog(const deployment_options& opts,
                                                                const resolved_backend& rb);

/// The names every registry knows now (for config validation).
config_catalog default_catalog();

} // namespace troupe
