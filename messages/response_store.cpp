#include "messages/response_store.hpp"

#include <utility>

namespace troupe::openai {

std::variant<std::vector<const response_store::entry*>, std::string> response_store::chain(std::string_view id) {
  std::vector<const entry*> turns;
  for (std::string at(id); !at.empty();) {
    const auto* e = find(at);
    if (e == nullptr)
      return at;
    turns.push_back(e);
    at = e->previous;
    if (turns.size() > size())
      return at; // (ids are never reused, so no chain loops; a guard all the same)
  }
  return std::vector<const entry*>(turns.rbegin(), turns.rend());
}

} // namespace troupe::openai
