// sim_backend: an executor backend with no model math. Tokens are a pure hash
// of (backend seed, request seed, output index); step time is what the roofline
// cost model predicts. Lets runtime/ and troupe-sim run 7B/13B-shaped loads on a CPU.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/cost_model.hpp"
#include "gpu/gpu_spec.hpp"
#include "gpu/host_tier.hpp"
#include "gpu/model_shape.hpp"
#include "gpu/sim_tokenizer.hpp"

#include <cstdint>
#include <mutex>
#include <span>
#include <string>

namespace troupe::gpu {

/// Simulated backend. Called by one thread at a time (the executor's), like
/// every executor_backend; the const members are safe from any thread.
class sim_backend final : public executor_backend {
public:
  /// Simulates `shape` on `gpu`; `seed` perturbs every generated token.
  /// `host_adapter_bytes` bounds the modelled host tier (0: unbounded).
  sim_backend(model_shape shape, gpu_spec gpu, std::uint64_t seed, cost_constants constants = {},
              std::uint64_t host_adapter_bytes = 0);

  /// One token per entry in [sim_tokenizer::first_word_token, vocab_size()),
  /// never EOS or a special; depends only on the backend seed, entry.seed and
  /// entry.output_index, not on the rest of the batch. device_seconds is the
  /// cost model's prediction; nothing sleeps (the caller scales time).
  step_result run_step(std::span<const step_entry> batch) override;
  /// The cost model's transfer_seconds(bytes).
  double transfer_seconds(std::uint64_t bytes) const override;
  /// Never fails: models a disk read into the host tier on a host miss and
  /// the PCIe copy; nothing moves. Safe beside run_step.
  adapter_load load_adapter(std::uint32_t id, const std::string& path, std::uint64_t bytes,
                            std::span<const std::uint32_t> device_pages) override;
  /// Nothing to free on a simulated device.
  void drop_adapter(std::uint32_t) override {}
  /// Moves nothing: the cost model's PCIe time for `bytes`.
  swap_result swap_pages(swap_direction, std::span<const std::uint32_t>,
                         std::span<const std::uint32_t>, std::uint64_t bytes) override {
    return {{}, transfer_seconds(bytes)};
  }
  /// Nothing to read: the modelled copy's time only.
  page_blob read_pages(bool, std::span<const std::uint32_t>, std::uint64_t bytes) override {
    return {{}, {}, transfer_seconds(bytes)};
  }
  swap_result write_host_pages(std::span<const std::uint32_t>, const std::string&,
                               std::uint64_t bytes) override {
    return {{}, transfer_seconds(bytes)};
  }
  /// Drops it from the modelled host tier.
  void forget_adapter(std::uint32_t id) override;
  /// From the shape: twice the tokens on multi-head models, none with
  /// grouped-query attention; steps with hidden entries cost their recompute.
  std::uint32_t hidden_cache_tokens_per_page(std::uint32_t kv_page_tokens) const override {
    return cost_model_.hidden_tokens_per_page(kv_page_tokens);
  }
  /// The shape's: a request growing past it is recomputed, as on a GPU.
  std::uint32_t rope_long_after() const override { return cost_model_.shape().rope_long_after; }
  /// A sim_tokenizer over the shape's vocab_size.
  const tokenizer& vocab() const override { return tokenizer_; }
  /// Always "sim".
  std::string name() const override { return "sim"; }

  /// The token run_step emits for `entry`; a pure function of the arguments.
  std::int32_t token_for(const step_entry& entry) const noexcept;
  /// The cost model that prices steps and transfers.
  const roofline_cost_model& cost_model() const noexcept { return cost_model_; }

private:
  roofline_cost_model cost_model_;
  sim_tokenizer tokenizer_;
  std::uint64_t seed_;
  std::mutex host_mtx_;
  host_tier host_;
};

} // namespace troupe::gpu
