#include "runtime/transfer_queue.hpp"

#include <algorithm>

namespace troupe {

std::string_view to_string(transfer_class c) noexcept {
  switch (c) {
    case transfer_class::demand_load:
      return "demand_load";
    case transfer_class::swap_in:
      return "swap_in";
    case transfer_class::prefetch:
      return "prefetch";
    case transfer_class::swap_out:
      return "swap_out";
  }
  return "unknown";
}

transfer_queue::transfer_queue(std::uint32_t max_inflight)
  : max_inflight_(std::max<std::uint32_t>(max_inflight, 1)) {}

transfer_queue::family_key transfer_queue::family_of(transfer_class c, std::uint64_t key) noexcept {
  // Two families of direction, in (demand_load, prefetch, swap_in) and out
  // (swap_out); adapter loads and KV swap-ins never share keys (adapter vs
  // request ids), so they are kept apart too.
  switch (c) {
    case transfer_class::demand_load:
    case transfer_class::prefetch:
      return {0, key};
    case transfer_class::swap_in:
      return {1, key};
    case transfer_class::swap_out:
      break;
  }
  return {2, key};
}

std::uint64_t transfer_queue::enqueue(transfer_class c, std::uint64_t key, std::uint64_t bytes,
                                      double now_s) {
  const auto fk = family_of(c, key);
  if (auto i = by_key_.find(fk); i != by_key_.end()) {
    const auto id = i->second;
    auto& it = items_.at(id);
    if (c == transfer_class::demand_load && it.cls == transfer_class::prefetch
        && !running_.contains(id)) {
      // Raise a queued prefetch to a demand load, keeping its place in time.
      auto& q = queues_[static_cast<std::size_t>(transfer_class::prefetch)];
      q.erase(std::find(q.begin(), q.end(), id));
      it.cls = transfer_class::demand_load;
      auto& d = queues_[static_cast<std::size_t>(transfer_class::demand_load)];
      d.push_back(id);
    }
    return id;
  }
  const auto id = next_id_++;
  items_.emplace(id, item{c, key, bytes, now_s});
  by_key_.emplace(fk, id);
  queues_[static_cast<std::size_t>(c)].push_back(id);
  return id;
}

bool transfer_queue::cancel(std::uint64_t id) {
  auto i = items_.find(id);
  if (i == items_.end() || running_.contains(id))
    return false;
  auto& q = queues_[static_cast<std::size_t>(i->second.cls)];
  q.erase(std::find(q.begin(), q.end(), id));
  by_key_.erase(family_of(i->second.cls, i->second.key));
  items_.erase(i);
  return true;
}

std::vector<transfer_queue::started> transfer_queue::start_ready(double now_s) {
  std::vector<started> out;
  for (auto& q : queues_) {
    while (running_.size() < max_inflight_ && !q.empty()) {
      const auto id = q.front();
      q.pop_front();
      auto& it = items_.at(id);
      it.started_s = now_s;
      running_.emplace(id, true);
      stats_[static_cast<std::size_t>(it.cls)].queue_seconds += now_s - it.enqueued_s;
      out.push_back({id, it.cls, it.key, it.bytes});
    }
  }
  return out;
}

bool transfer_queue::finished(std::uint64_t id, double now_s, bool ok) {
  if (running_.erase(id) == 0)
    return false;
  auto i = items_.find(id);
  auto& s = stats_[static_cast<std::size_t>(i->second.cls)];
  s.busy_seconds += now_s - i->second.started_s;
  if (ok) {
    ++s.transfers;
    s.bytes += i->second.bytes;
  } else {
    ++s.failures;
  }
  by_key_.erase(family_of(i->second.cls, i->second.key));
  items_.erase(i);
  return true;
}

std::size_t transfer_queue::queued() const noexcept {
  std::size_t n = 0;
  for (const auto& q : queues_)
    n += q.size();
  return n;
}

} // namespace troupe
