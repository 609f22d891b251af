// Helpers of the cuda backend's tests (backend_test.cpp,
// device_fault_test.cpp): a tiny random Llama opened as a backend, step
// entries and prompts, one-entry steps.
#pragma once

#include "gpu/cuda/backend.hpp"
#include "gpu/sim_tokenizer.hpp"

#include "tests/gpu/cuda/random_llama.hpp"
#include "tests/support/step_entry.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace troupe::gpu::cuda::backend_testing {

inline constexpr dims tiny{.hidden = 256, .inter = 512, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 64,
                    .vocab = 512};
inline constexpr std::uint32_t page_tokens = 16;

inline cuda_backend_options options_for(dtype t) {
  cuda_backend_options o;
  o.type = t;
  o.page_tokens = page_tokens;
  o.pages = 128;
  o.host_pages = 16;
  o.max_rows = 512;
  o.max_seqs = 16;
  o.max_rank = 16;
  return o;
}

inline std::unique_ptr<cuda_backend> open_backend(const cuda_backend_options& o) {
  auto b = cuda_backend::create(make_weights(tiny, o.type, 7), std::make_unique<sim_tokenizer>(tiny.vocab), o);
  if (auto* err = std::get_if<std::string>(&b)) {
    ADD_FAILURE() << *err;
    return nullptr;
  }
  return std::move(std::get<std::unique_ptr<cuda_backend>>(b));
}
inline std::unique_ptr<cuda_backend> open_backend(dtype t = dtype::f16) { return open_backend(options_for(t)); }
/// Two f16 backends of one model: `direct` launches every step, `graphs`
/// keeps `n` step graphs.
struct step_graph_backends {
  std::unique_ptr<cuda_backend> direct, graphs;
};
inline step_graph_backends open_with_and_without_step_graphs(std::uint32_t n) {
  auto o = options_for(dtype::f16);
  o.step_graphs = n;
  return {open_backend(dtype::f16), open_backend(o)};
}

using troupe::testing::greedy_entry;

inline std::vector<std::int32_t> prompt(std::uint32_t n, std::int32_t salt) {
  std::vector<std::int32_t> p;
  for (std::uint32_t i = 0; i < n; ++i)
    p.push_back(3 + static_cast<std::int32_t>((i * 37 + salt * 11) % (tiny.vocab - 3)));
  return p;
}

inline std::int32_t one(cuda_backend& b, const step_entry& e) {
  const auto r = b.run_step(std::span{&e, 1});
  EXPECT_TRUE(r.failures.empty()) << describe(r.failures);
  return r.tokens.at(0);
}

/// Greedy tokens of `n` steps (a prefill, then decodes) of one sequence.
inline std::vector<std::int32_t> generate(cuda_backend& b, const std::vector<std::int32_t>& p,
                                          const std::vector<std::uint32_t>& pages, std::uint32_t n,
                                          std::uint32_t adapter = 0, std::uint32_t rank = 0) {
  std::vector<std::int32_t> out{one(b, greedy_entry(p, 0, pages, adapter, rank))};
  for (std::uint32_t i = 1; i < n; ++i) {
    auto e = greedy_entry({out.back()}, static_cast<std::uint32_t>(p.size()) + i - 1, pages, adapter, rank);
    e.output_index = i;
    out.push_back(one(b, e));
  }
  return out;
}

} // namespace troupe::gpu::cuda::backend_testing
