// The cuda backend for a deployment: the Hugging Face model in model.path on
// a CUDA device (gpu/cuda/backend), its tokenizer (SentencePiece or byte-level BPE), and the pool
// figures the memory pool and the adapter catalog use. Built only where nvcc
// built gpu/cuda (TROUPE_HAVE_CUDA_BACKEND).
#include "runtime/backend_factory.hpp"

#include "gpu/cuda/backend.hpp"
#include "gpu/cuda/check.hpp"
#include "gpu/model_tokenizer.hpp"

namespace troupe {

std::variant<resolved_backend, std::string> make_cuda_backend(const deployment_options& opts) {
  // After the config's own mistakes, before reading any file: the first
  // thing a GPU-less machine should hear.
  if (!opts.model.path.empty() && !gpu::cuda::device_visible())
    return "backend.kind \"cuda\": " + std::string{gpu::cuda::no_device_message};
  auto described = describe_hf_model(opts, 2); // fp16 or bf16 cache elements
  if (auto* err = std::get_if<std::string>(&described))
    return *err;
  auto& [out, config] = std::get<hf_model>(described);
  auto tok = gpu::load_model_tokenizer(opts.model.path, config);
  if (auto* err = std::get_if<std::string>(&tok))
    return "model.path: " + *err;
  gpu::cuda::cuda_backend_options o;
  o.device = static_cast<int>(opts.backend.device);
  o.type = opts.backend.dtype == "bfloat16" ? gpu::cuda::dtype::bf16 : gpu::cuda::dtype::f16;
  o.page_tokens = opts.memory_pool.page_tokens;
  o.pages = opts.memory_pool.pages;
  o.memory_fraction = opts.memory_pool.gpu_memory_fraction;
  o.host_pages = opts.memory_pool.host_pages;
  o.host_adapter_bytes = opts.adapter_cache.host_bytes;
  o.max_rows = opts.scheduler.token_budget;
  o.max_seqs = opts.scheduler.max_running;
  o.step_graphs = opts.backend.step_graphs;
  auto opened = gpu::cuda::cuda_backend::open(opts.model.path,
                                              std::move(std::get<std::unique_ptr<gpu::tokenizer>>(tok)), o);
  if (auto* err = std::get_if<std::string>(&opened))
    return "backend.kind \"cuda\": " + *err;
  std::shared_ptr<gpu::cuda::cuda_backend> b = std::move(std::get<std::unique_ptr<gpu::cuda::cuda_backend>>(opened));
  out.gpu.name = b->device_name(); // for the logs: the device the model runs on
  out.pool_pages = b->pool_pages();
  out.page_bytes = b->page_bytes();
  out.adapter_bytes = [lora = b->lora(), page = b->page_bytes()](std::uint32_t rank) {
    return lora.pages(rank) * page;
  };
  out.backend = std::move(b);
  out.time_scale = 0; // steps take the time the GPU takes
  out.computes = true;
  return out;
}

} // namespace troupe
