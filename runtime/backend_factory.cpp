#include "runtime/backend_factory.hpp"

#include "gpu/sim_backend.hpp"
#include "policies/registry.hpp"

namespace troupe {

config_catalog default_catalog() {
  config_catalog c;
  c.backends = {"sim"};
  c.gpus = gpu::gpu_spec_names();
  c.model_presets = gpu::model_preset_names();
  c.scheduling_policies = policies::scheduling_policy_names();
  c.classifier_policies = policies::classifier_policy_names();
  c.eviction_policies = policies::eviction_policy_names();
  return c;
}

std::variant<resolved_backend, std::string> make_backend(const deployment_options& opts) {
  resolved_backend out;
  if (!opts.model.shape_file.empty()) {
    auto shape = gpu::load_model_shape(opts.model.shape_file);
    if (auto* err = std::get_if<std::string>(&shape))
      return "model.shape_file: " + *err;
    out.shape = std::get<gpu::model_shape>(shape);
  } else if (auto shape = gpu::find_model_preset(opts.model.preset)) {
    out.shape = *shape;
  } else {
    return "model.preset: no model shape named \"" + opts.model.preset + "\"";
  }
  auto gpu = gpu::find_gpu_spec(opts.backend.gpu);
  if (!gpu)
    return "backend.gpu: no GPU preset named \"" + opts.backend.gpu + "\"";
  out.gpu = *gpu;
  out.max_context = opts.model.max_context ? opts.model.max_context : out.shape.max_context;
  out.page_bytes = std::uint64_t{opts.memory_pool.page_tokens} * out.shape.kv_bytes_per_token();
  if (opts.memory_pool.pages > 0) {
    out.pool_pages = opts.memory_pool.pages;
  } else {
    const double budget = static_cast<double>(out.gpu.memory_bytes) * opts.memory_pool.gpu_memory_fraction
                          - static_cast<double>(out.shape.weight_bytes());
    if (budget < static_cast<double>(out.page_bytes))
      return "memory_pool.gpu_memory_fraction: " + std::to_string(opts.memory_pool.gpu_memory_fraction)
             + " of " + out.gpu.name + " leaves no room for the KV cache after "
             + std::to_string(out.shape.weight_bytes() >> 20) + " MiB of weights";
    out.pool_pages = static_cast<std::uint64_t>(budget / static_cast<double>(out.page_bytes));
  }
  if (opts.backend.kind == "sim") {
    out.backend = std::make_shared<gpu::sim_backend>(out.shape, out.gpu, opts.backend.seed);
    out.time_scale = opts.backend.time_scale;
    return out;
  }
  return "backend.kind: \"" + opts.backend.kind + "\" is not built into this binary (have: sim)";
}

} // namespace troupe
