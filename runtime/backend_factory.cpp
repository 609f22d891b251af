#include "runtime/backend_factory.hpp"

#include "gpu/cost_fit.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/llama_config.hpp"
#include "gpu/sim_backend.hpp"
#include "policies/output_predictor.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/registry.hpp"

namespace troupe {

config_catalog default_catalog() {
  config_catalog c;
  c.backends = {"cpu", "sim"};
#if TROUPE_HAVE_CUDA_BACKEND
  c.backends.push_back("cuda");
#endif
  c.gpus = gpu::gpu_spec_names();
  c.model_presets = gpu::model_preset_names();
  c.scheduling_policies = policies::scheduling_policy_names();
  c.classifier_policies = policies::classifier_policy_names();
  c.eviction_policies = policies::eviction_policy_names();
  c.prefetch_policies = policies::prefetch_policy_names();
  c.output_predictors = policies::output_predictor_names();
  return c;
}

std::variant<hf_model, std::string> describe_hf_model(const deployment_options& opts,
                                                     std::uint32_t dtype_bytes) {
  hf_model m;
  auto& out = m.resolved;
  if (opts.model.path.empty())
    return "model.path: required when backend.kind is \"" + opts.backend.kind + "\"";
  auto config = gpu::load_llama_config(opts.model.path + "/config.json");
  if (auto* err = std::get_if<std::string>(&config))
    return "model.path: " + *err;
  m.config = std::get<gpu::llama_config>(config);
  out.shape = m.config.to_shape(opts.model.path);
  out.shape.dtype_bytes = dtype_bytes;
  out.max_context = opts.model.max_context ? opts.model.max_context : m.config.context_limit();
  return m;
}

namespace {

/// The cpu backend: a real model from `model.path`, KV pages in host memory.
std::variant<resolved_backend, std::string> make_cpu_backend(const deployment_options& opts) {
  auto described = describe_hf_model(opts, 4); // the cpu backend computes and caches in fp32
  if (auto* err = std::get_if<std::string>(&described))
    return *err;
  auto& out = std::get<hf_model>(described).resolved;
  out.page_bytes = std::uint64_t{opts.memory_pool.page_tokens} * out.shape.kv_bytes_per_token();
  if (opts.memory_pool.pages > 0) {
    out.pool_pages = opts.memory_pool.pages;
  } else {
    // Enough for every running request at full context, within 2 GiB of host memory.
    const std::uint64_t per_request =
      (out.max_context + opts.memory_pool.page_tokens - 1) / opts.memory_pool.page_tokens;
    const std::uint64_t cap = (std::uint64_t{2} << 30) / std::max<std::uint64_t>(out.page_bytes, 1);
    out.pool_pages = std::max<std::uint64_t>(1, std::min(per_request * opts.scheduler.max_running, cap));
  }
  auto backend = gpu::cpu_backend::open(opts.model.path, out.pool_pages,
                                        opts.memory_pool.page_tokens, opts.adapter_cache.host_bytes);
  if (auto* err = std::get_if<std::string>(&backend))
    return *err;
  out.backend = std::shared_ptr<gpu::executor_backend>(
    std::move(std::get<std::unique_ptr<gpu::cpu_backend>>(backend)));
  out.gpu.name = "the host's CPU"; // for the logs: no GPU is priced or used
  out.time_scale = 0; // steps take the time the math takes
  out.computes = true;
  return out;
}

} // namespace

std::variant<resolved_backend, std::string> make_backend(const deployment_options& opts) {
  if (opts.backend.kind == "cpu")
    return make_cpu_backend(opts);
#if TROUPE_HAVE_CUDA_BACKEND
  if (opts.backend.kind == "cuda")
    return make_cuda_backend(opts);
#endif
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
    gpu::cost_constants constants;
    if (auto error = gpu::apply_cost_overrides(opts.backend.cost, constants, out.gpu))
      return "backend.cost: " + *error;
    out.backend = std::make_shared<gpu::sim_backend>(out.shape, out.gpu, opts.backend.seed,
                                                     constants, opts.adapter_cache.host_bytes);
    out.time_scale = opts.backend.time_scale;
    return out;
  }
  std::string have;
  for (const auto& k : default_catalog().backends)
    have += (have.empty() ? "" : ", ") + k;
  return "backend.kind: \"" + opts.backend.kind + "\" is not built into this binary (have: " + have + ")";
}

std::variant<adapter_catalog, std::string> make_adapter_catalog(const deployment_options& opts,
                                                                const resolved_backend& rb) {
  const auto shape = rb.shape;
  adapter_catalog::bytes_fn bytes = rb.adapter_bytes;
  if (!bytes)
    bytes = [shape](std::uint32_t rank) { return shape.lora_adapter_bytes(rank); };
  adapter_catalog catalog{{}, {}, std::move(bytes), rb.page_bytes};
  const bool needs_files = opts.backend.kind == "cpu" || opts.backend.kind == "cuda";
  auto add = [&](adapter_spec spec, const std::string& where) -> std::string {
    if (!spec.path.empty()) {
      auto described = describe_adapter(spec.name, spec.path);
      if (auto* err = std::get_if<std::string>(&described))
        return where + ": " + *err;
      spec.rank = std::get<adapter_spec>(described).rank;
    } else if (needs_files) {
      return where + ": the " + opts.backend.kind + " backend loads PEFT files, but adapter \"" + spec.name
             + "\" has no path";
    }
    auto added = catalog.add(spec);
    if (auto* err = std::get_if<std::string>(&added))
      return where + ": " + *err;
    return {};
  };
  const auto specs = expand_adapters(opts);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto where = i < opts.adapters.size() ? "adapters[" + std::to_string(i) + "]"
                                                : std::string{"adapters_generate"};
    if (auto err = add(specs[i], where); !err.empty())
      return err;
  }
  for (std::size_t d = 0; d < opts.adapter_cache.directories.size(); ++d) {
    const auto where = "adapter_cache.directories[" + std::to_string(d) + "]";
    auto found = scan_adapter_directory(opts.adapter_cache.directories[d]);
    if (auto* err = std::get_if<std::string>(&found))
      return where + ": " + *err;
    for (auto& spec : std::get<std::vector<adapter_spec>>(found))
      if (auto err = add(std::move(spec), where); !err.empty())
        return err;
  }
  return catalog;
}

} // namespace troupe
