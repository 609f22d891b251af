#include "gpu/host_tier.hpp"

namespace troupe::gpu {

bool host_tier::touch(std::uint32_t id) {
  auto i = index_.find(id);
  if (i == index_.end())
    return false;
  order_.splice(order_.begin(), order_, i->second);
  return true;
}

std::vector<std::uint32_t> host_tier::insert(std::uint32_t id, std::uint64_t bytes) {
  if (auto i = index_.find(id); i != index_.end()) {
    bytes_ -= i->second->bytes;
    order_.erase(i->second);
    index_.erase(i);
  }
  order_.push_front({id, bytes});
  index_[id] = order_.begin();
  bytes_ += bytes;
  std::vector<std::uint32_t> dropped;
  while (capacity_ > 0 && bytes_ > capacity_ && order_.size() > 1) {
    const auto victim = order_.back();
    bytes_ -= victim.bytes;
    index_.erase(victim.id);
    order_.pop_back();
    dropped.push_back(victim.id);
  }
  return dropped;
}

bool host_tier::erase(std::uint32_t id) {
  auto i = index_.find(id);
  if (i == index_.end())
    return false;
  bytes_ -= i->second->bytes;
  order_.erase(i->second);
  index_.erase(i);
  return true;
}

} // namespace troupe::gpu
