#include "gpu/sim_backend.hpp"

#include "gpu/random.hpp"

#include <utility>

namespace troupe::gpu {

sim_backend::sim_backend(model_shape shape, gpu_spec gpu, std::uint64_t seed,
                         cost_constants constants, std::uint64_t host_adapter_bytes)
  : cost_model_(std::move(shape), std::move(gpu), constants),
    tokenizer_(cost_model_.shape().vocab_size),
    seed_(seed),
    host_(host_adapter_bytes) {}

std::int32_t sim_backend::token_for(const step_entry& entry) const noexcept {
  std::uint64_t h = splitmix64(seed_);
  h = splitmix64(h ^ entry.seed);
  h = splitmix64(h ^ entry.output_index);
  const auto first = static_cast<std::uint64_t>(sim_tokenizer::first_word_token);
  const auto span = static_cast<std::uint64_t>(tokenizer_.vocab_size()) - first;
  // The modulo bias is below span / 2^64: irrelevant for a simulation.
  return static_cast<std::int32_t>(first + h % span);
}

step_result sim_backend::run_step(std::span<const step_entry> batch) {
  step_result result;
  result.tokens.reserve(batch.size());
  for (const auto& entry : batch)
    result.tokens.push_back(token_for(entry));
  result.device_seconds = cost_model_.step_seconds(batch);
  return result;
}

double sim_backend::transfer_seconds(std::uint64_t bytes) const {
  return cost_model_.transfer_seconds(bytes);
}

adapter_load sim_backend::load_adapter(std::uint32_t id, const std::string&, std::uint64_t bytes,
                                       std::span<const std::uint32_t>) {
  adapter_load out;
  {
    std::lock_guard guard{host_mtx_};
    out.host_hit = host_.touch(id);
    if (!out.host_hit)
      host_.insert(id, bytes);
  }
  out.disk_seconds = out.host_hit ? 0.0 : cost_model_.disk_seconds(bytes);
  out.copy_seconds = cost_model_.transfer_seconds(bytes);
  return out;
}

void sim_backend::forget_adapter(std::uint32_t id) {
  std::lock_guard guard{host_mtx_};
  host_.erase(id);
}

} // namespace troupe::gpu
