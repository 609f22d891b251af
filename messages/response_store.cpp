#include "messages/response_store.hpp"

#include <utility>

namespace troupe::openai {

bool response_store::put(std::string id, entry e) {
  const auto b = bytes_of(id, e);
  erase(id);
  if (b > capacity_)
    return false;
  while (bytes_ + b > capacity_ && !order_.empty()) {
    bytes_ -= order_.back().bytes;
    index_.erase(order_.back().id);
    order_.pop_back();
  }
  order_.push_front(kept{std::move(id), std::move(e), b});
  index_.emplace(order_.front().id, order_.begin()); // the key views the list's own string
  bytes_ += b;
  return true;
}

const response_store::entry* response_store::find(std::string_view id) {
  const auto it = index_.find(id);
  if (it == index_.end())
    return nullptr;
  order_.splice(order_.begin(), order_, it->second); // iterators (and the key's string) stay valid
  return &order_.front().e;
}

bool response_store::erase(std::string_view id) {
  const auto it = index_.find(id);
  if (it == index_.end())
    return false;
  const auto at = it->second;
  bytes_ -= at->bytes;
  index_.erase(it);
  order_.erase(at);
  return true;
}

std::variant<std::vector<const response_store::entry*>, std::string> response_store::chain(std::string_view id) {
  std::vector<const entry*> turns;
  for (std::string at(id); !at.empty();) {
    const auto* e = find(at);
    if (e == nullptr)
      return at;
    turns.push_back(e);
    at = e->previous;
    if (turns.size() > index_.size())
      return at; // (ids are never reused, so no chain loops; a guard all the same)
  }
  return std::vector<const entry*>(turns.rbegin(), turns.rend());
}

} // namespace troupe::openai
