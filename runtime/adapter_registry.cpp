#include "runtime/adapter_registry.hpp"

namespace troupe {

// -- adapter_catalog ------------------------------------------------------------

adapter_catalog::adapter_catalog(const std::vector<adapter_spec>& specs,
                                 const adapter_generate_options& generate,
                                 const std::function<std::uint64_t(std::uint32_t)>& bytes_of_rank,
                                 std::uint64_t page_bytes) {
  auto add = [&](const std::string& name, std::uint32_t rank) {
    adapter_entry e;
    e.id = static_cast<std::uint32_t>(entries_.size() + 1);
    e.name = name;
    e.rank = rank;
    e.bytes = bytes_of_rank(rank);
    e.pages = page_bytes == 0 ? 0 : (e.bytes + page_bytes - 1) / page_bytes;
    by_name_.emplace(e.name, e.id);
    entries_.push_back(std::move(e));
  };
  for (const auto& s : specs)
    add(s.name, s.rank);
  for (std::uint32_t i = 0; i < generate.count && !generate.ranks.empty(); ++i)
    add(generate.prefix + std::to_string(i), generate.ranks[i % generate.ranks.size()]);
}

const adapter_entry* adapter_catalog::find(const std::string& name) const {
  auto i = by_name_.find(name);
  return i == by_name_.end() ? nullptr : &entries_[i->second - 1];
}

const adapter_entry* adapter_catalog::by_id(std::uint32_t id) const {
  if (id == 0 || id > entries_.size())
    return nullptr;
  return &entries_[id - 1];
}

} // namespace troupe
