// A greedy step entry for the backends' tests (cpu and cuda): request 1,
// `tokens` after `context` cached tokens in `pages`, with an adapter or none.
#pragma once

#include "gpu/step.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace troupe::testing {

inline gpu::step_entry greedy_entry(std::vector<std::int32_t> tokens, std::uint32_t context,
                                    std::vector<std::uint32_t> pages, std::uint32_t adapter = 0,
                                    std::uint32_t rank = 0) {
  gpu::step_entry e;
  e.request_id = 1;
  e.tokens = std::move(tokens);
  e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
  e.context_tokens = context;
  e.temperature = 0;
  e.pages = std::move(pages);
  e.adapter_id = adapter;
  e.adapter_rank = rank;
  return e;
}

} // namespace troupe::testing
