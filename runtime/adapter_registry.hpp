// The adapter catalog: every adapter the deployment knows, with its rank and
// its size in pages. Used by the adapter cache actor and the intake.
#pragma once

#include "runtime/options.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

struct adapter_entry {
  std::uint32_t id = 0; ///< 1-based; 0 is the base model
  std::string name;
  std::uint32_t rank = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pages = 0;
};

/// Every adapter of a deployment, immutable after construction; safe to
/// share read-only between actors.
class adapter_catalog {
public:
  /// `bytes_of_rank(r)` gives an adapter's weight size; pages round up.
  adapter_catalog(const std::vector<adapter_spec>& specs,
                  const adapter_generate_options& generate,
                  const std::function<std::uint64_t(std::uint32_t)>& bytes_of_rank,
                  std::uint64_t page_bytes);
  adapter_catalog() = default;

  /// Looks up by name; nullptr if unknown.
  const adapter_entry* find(const std::string& name) const;
  /// Looks up by id; nullptr if unknown (and for id 0).
  const adapter_entry* by_id(std::uint32_t id) const;
  const std::vector<adapter_entry>& all() const noexcept { return entries_; }

private:
  std::vector<adapter_entry> entries_; // entries_[id - 1]
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

} // namespace troupe
