#include "messages/response_store.hpp"

#include <nlohmann/json.hpp>

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

std::string response_store::to_text(const entry& e) {
  return nlohmann::json{{"previous", e.previous},
                        {"input_items", e.input_items},
                        {"body", e.body},
                        {"session", e.session},
                        {"events", e.events}}
    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<response_store::entry> response_store::from_text(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    return std::nullopt;
  entry e;
  for (auto [key, field] : {std::pair{"previous", &e.previous}, {"input_items", &e.input_items}, {"body", &e.body},
                            {"session", &e.session}, {"events", &e.events}}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string())
      return std::nullopt;
    *field = it->get<std::string>();
  }
  // The texts kept as JSON must read as what they are.
  const auto items = nlohmann::json::parse(e.input_items, nullptr, false);
  const auto body = nlohmann::json::parse(e.body, nullptr, false);
  if (!items.is_array() || !body.is_object() || !body.contains("output") || !body["output"].is_array())
    return std::nullopt;
  return e;
}

} // namespace troupe::openai
