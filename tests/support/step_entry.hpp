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

/// The tokens of a vocabulary of `vocab` that entry `e` leaves samplable:
/// those its logit_adjust does not ban (a delta of -1e30, as the scheduler
/// bans), ascending.
inline std::vector<std::int32_t> samplable(const gpu::step_entry& e, std::int32_t vocab) {
  std::vector<std::int32_t> out;
  auto a = e.logit_adjust.begin();
  for (std::int32_t t = 0; t < vocab; ++t) {
    for (; a != e.logit_adjust.end() && a->token < t; ++a) {
    }
    if (a == e.logit_adjust.end() || a->token != t || a->delta > -1e29f)
      out.push_back(t);
  }
  return out;
}

} // namespace troupe::testing
