#include "policies/scheduling_policy.hpp"

namespace troupe::policies {

std::uint64_t pages_for(std::uint32_t prompt_tokens, std::uint32_t max_new_tokens,
                        std::uint32_t page_tokens) noexcept {
  if (page_tokens == 0)
    return 0;
  const std::uint64_t tokens = std::uint64_t{prompt_tokens} + max_new_tokens;
  return (tokens + page_tokens - 1) / page_tokens;
}

} // namespace troupe::policies
