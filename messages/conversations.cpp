#include "messages/conversations.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

namespace troupe::openai {

namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

api_error not_kept(std::string_view id, std::string param = {}) {
  return api_error{404, "invalid_request_error", "not_found",
                   "no conversation " + std::string(id.substr(0, 80))
                     + ": it was deleted, or was dropped for room ([http] conversation_store_mb)",
                   std::move(param)};
}

std::string object_of(std::string_view id, const conversation_store::entry& e) {
  return dump(json{{"id", id},
                   {"object", "conversation"},
                   {"created_at", e.created_at},
                   {"metadata", json::parse(e.metadata)}});
}

/// The body as a JSON object of `allowed` keys ("" reads as {}).
std::variant<json, api_error> body_object(std::string_view body, std::initializer_list<std::string_view> allowed,
                                          std::string_view path) {
  json doc = json::object();
  if (body.find_first_not_of(" \t\r\n") != std::string_view::npos) {
    doc = json::parse(body, nullptr, false);
    if (doc.is_discarded())
      return bad_request("the body is not valid JSON");
    if (!doc.is_object())
      return bad_request("the body must be a JSON object, got " + std::string(doc.type_name()));
  }
  for (const auto& [key, value] : doc.items())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string takes;
      for (const auto k : allowed)
        takes += (takes.empty() ? "" : ", ") + std::string(k);
      return bad_request("unknown field \"" + key.substr(0, 40) + "\": " + std::string(path) + " takes " + takes,
                         key.substr(0, 40));
    }
  return doc;
}

} // namespace

std::variant<std::string, api_error> metadata_of(const json& m) {
  if (m.is_null())
    return std::string("{}");
  if (!m.is_object())
    return bad_request("field \"metadata\" must be an object of strings", "metadata");
  if (m.size() > max_metadata_pairs)
    return bad_request("field \"metadata\" has " + std::to_string(m.size()) + " pairs; at most "
                         + std::to_string(max_metadata_pairs) + " are taken",
                       "metadata");
  for (const auto& [key, value] : m.items()) {
    if (key.size() > 64)
      return bad_request("field \"metadata\": key \"" + key.substr(0, 40) + "...\" is longer than 64 characters",
                         "metadata");
    if (!value.is_string() || value.get_ref<const std::string&>().size() > 512)
      return bad_request("field \"metadata." + key + "\" must be a string of at most 512 characters", "metadata");
  }
  return dump(m);
}

namespace {

/// The items a body adds: at most 20, each checked as a response's input
/// item is (an item_reference as the item it names, among `prior`, the
/// conversation's, or before it); at least one where `needed`.
std::variant<json, api_error> items_of(const json& doc, bool needed, std::string_view prior) {
  const auto it = doc.find("items");
  if (it == doc.end() || it->is_null()) {
    if (needed)
      return bad_request("missing field \"items\": an array of 1 to 20 items", "items");
    return json::array();
  }
  if (!it->is_array() || (needed && it->empty()))
    return bad_request(std::string("field \"items\" must be an array of ") + (needed ? "1" : "0") + " to 20 items",
                       "items");
  if (it->size() > max_items_added)
    return bad_request("field \"items\" has " + std::to_string(it->size()) + " items; at most "
                         + std::to_string(max_items_added) + " are added at a time",
                       "items");
  auto resolved = resolve_input_items(prior, dump(*it), "items");
  if (auto* e = std::get_if<api_error>(&resolved))
    return std::move(*e);
  return json::parse(std::get<std::string>(resolved));
}

/// A conversation's items as a JSON array's text.
std::string items_text(const conversation_store::entry& e) {
  std::string all = "[";
  for (const auto& [item_id, item] : e.items)
    all += (all.size() > 1 ? "," : "") + item;
  return all + "]";
}

/// Refuses query keys other than `include` (which is read past).
std::optional<api_error> only_include(std::string_view query, std::string_view path) {
  for (const auto& [key, value] : query_pairs(query))
    if (!key.empty() && key != "include" && key != "include[]")
      return bad_request("query parameter \"" + key.substr(0, 40) + "\" is not served: " + std::string(path)
                           + " takes include",
                         key.substr(0, 40));
  return std::nullopt;
}

} // namespace

std::string_view conversation_methods(std::string_view rest) {
  if (rest.empty())
    return "POST";
  const auto named = named_parts(rest);
  if (!named)
    return "";
  const auto& parts = *named;
  if (parts.size() == 1)
    return "GET, POST, DELETE";
  if (parts.size() == 2 && parts[1] == "items")
    return "GET, POST";
  if (parts.size() == 3 && parts[1] == "items")
    return "GET, DELETE";
  return "";
}

std::size_t conversation_store::bytes_of(std::string_view id, const entry& e) noexcept {
  std::size_t b = id.size() + e.metadata.size() + e.session.size() + 64; // with the bookkeeping's
  for (const auto& [item_id, item] : e.items)
    b += item_id.size() + item.size() + 32;
  return b;
}

bool conversation_store::append(const std::string& id, entry& e, std::string_view listed, bool make_room,
                                bool* trimmed) {
  auto items = json::parse(listed);
  // Ids stay unique: an item whose id the conversation holds already (one
  // sent back as it was listed) is listed under one of its own.
  std::unordered_set<std::string> taken;
  for (const auto& [item_id, item] : e.items)
    taken.insert(item_id);
  std::vector<std::pair<std::string, std::string>> adding;
  std::size_t added = 0;
  for (auto& item : items) {
    std::string item_id = item.contains("id") && item["id"].is_string() ? item["id"].get<std::string>() : "item";
    if (taken.contains(item_id)) {
      std::size_t n = 2;
      while (taken.contains(item_id + "_" + std::to_string(n)))
        ++n;
      item_id += "_" + std::to_string(n);
      item["id"] = item_id;
    }
    taken.insert(item_id);
    adding.emplace_back(item_id, dump(item));
    added += adding.back().first.size() + adding.back().second.size() + 32;
  }
  if (const auto bytes = bytes_of(id, e); bytes + added > capacity()) {
    std::size_t held = 0; // the items' own
    for (const auto& [item_id, item] : e.items)
      held += item_id.size() + item.size() + 32;
    if (!make_room || bytes - held + added > capacity())
      return false;
    std::size_t first = 0; // the oldest items give way
    for (auto left = bytes; left + added > capacity(); ++first)
      left -= e.items[first].first.size() + e.items[first].second.size() + 32;
    e.items.erase(e.items.begin(), e.items.begin() + static_cast<std::ptrdiff_t>(first));
    if (trimmed != nullptr && first > 0)
      *trimmed = true;
  }
  for (auto& item : adding)
    e.items.push_back(std::move(item));
  return kept_.reweigh(id, bytes_of(id, e));
}

std::variant<std::string, api_error> conversation_store::serve(std::string_view method, std::string_view rest,
                                                               std::string_view query, std::string_view body,
                                                               std::int64_t now, const id_maker& fresh) {
  const auto parts = path_parts(rest);
  if (parts.empty()) { // POST /v1/conversations: a new one, with its first items
    if (auto bad = only_include(query, "POST /v1/conversations"))
      return std::move(*bad);
    auto doc = body_object(body, {"items", "metadata"}, "POST /v1/conversations");
    if (auto* e = std::get_if<api_error>(&doc))
      return std::move(*e);
    const auto& d = std::get<json>(doc);
    auto meta = metadata_of(d.value("metadata", json()));
    if (auto* e = std::get_if<api_error>(&meta))
      return std::move(*e);
    auto items = items_of(d, false, "[]");
    if (auto* e = std::get_if<api_error>(&items))
      return std::move(*e);
    const auto id = fresh("conv");
    entry fresh_entry{now, std::get<std::string>(std::move(meta)), {}, id};
    if (!kept_.put(id, fresh_entry, bytes_of(id, fresh_entry)))
      return bad_request("no room to keep a conversation ([http] conversation_store_mb)");
    auto* e = kept_.find(id);
    const auto tail = fresh("item").substr(5) + "_";
    if (!append(id, *e, listed_items(dump(std::get<json>(items)), tail), false)) {
      kept_.erase(id);
      return bad_request("field \"items\" holds more than a conversation may keep ([http] conversation_store_mb)",
                         "items");
    }
    tell(id);
    return object_of(id, *e);
  }
  const auto& id = parts[0];
  auto* e = kept_.find(id);
  if (e == nullptr)
    return not_kept(id);
  if (parts.size() == 1) {
    if (method == "GET") {
      if (auto bad = only_include(query, "GET /v1/conversations/ID"))
        return std::move(*bad);
      return object_of(id, *e);
    }
    if (method == "DELETE") {
      kept_.erase(id);
      return dump(json{{"id", id}, {"object", "conversation.deleted"}, {"deleted", true}});
    }
    // POST: its metadata replaced.
    auto doc = body_object(body, {"metadata"}, "POST /v1/conversations/ID");
    if (auto* bad = std::get_if<api_error>(&doc))
      return std::move(*bad);
    const auto& d = std::get<json>(doc);
    if (!d.contains("metadata"))
      return bad_request("missing field \"metadata\": the conversation's new metadata (an object of strings)",
                         "metadata");
    auto meta = metadata_of(d["metadata"]);
    if (auto* bad = std::get_if<api_error>(&meta))
      return std::move(*bad);
    e->metadata = std::get<std::string>(std::move(meta));
    if (!kept_.reweigh(id, bytes_of(id, *e)))
      return not_kept(id); // (alone larger than the store: a 16-pair bound makes it never so)
    tell(id);
    return object_of(id, *e);
  }
  if (parts.size() == 2) {
    if (method == "GET")
      return items_page(items_text(*e), query, "conversation " + id, "GET /v1/conversations/ID/items");
    if (auto bad = only_include(query, "POST /v1/conversations/ID/items"))
      return std::move(*bad);
    auto doc = body_object(body, {"items"}, "POST /v1/conversations/ID/items");
    if (auto* bad = std::get_if<api_error>(&doc))
      return std::move(*bad);
    auto items = items_of(std::get<json>(doc), true, items_text(*e));
    if (auto* bad = std::get_if<api_error>(&items))
      return std::move(*bad);
    const auto added = listed_items(dump(std::get<json>(items)), fresh("item").substr(5) + "_");
    const auto before = e->items.size();
    if (!append(id, *e, added, false))
      return bad_request("the conversation has no room for these items ([http] conversation_store_mb)", "items");
    tell_added(id, before);
    json data = json::array(); // (as listed: an id made unique shows)
    for (auto k = before; k < e->items.size(); ++k)
      data.push_back(json::parse(e->items[k].second));
    return dump(json{{"object", "list"},
                     {"data", data},
                     {"first_id", data.front()["id"]},
                     {"last_id", data.back()["id"]},
                     {"has_more", false}});
  }
  const auto& item_id = parts[2];
  const auto at = std::find_if(e->items.begin(), e->items.end(), [&](const auto& i) { return i.first == item_id; });
  if (at == e->items.end())
    return api_error{404, "invalid_request_error", "not_found",
                     "no item " + item_id.substr(0, 80) + " in conversation " + id, ""};
  if (method == "GET") {
    if (auto bad = only_include(query, "GET /v1/conversations/ID/items/ITEM"))
      return std::move(*bad);
    return at->second;
  }
  e->items.erase(at);
  kept_.reweigh(id, bytes_of(id, *e)); // (smaller: it stays)
  tell(id);
  return object_of(id, *e);
}

std::variant<conversation, api_error> conversation_store::turns(const std::string& id) {
  const auto* e = kept_.find(id);
  if (e == nullptr)
    return not_kept(id, "conversation");
  return conversation{items_text(*e), e->session};
}

void conversation_store::add_turn(const std::string& id, std::string_view response_id, std::string_view input_items,
                                  std::string_view response_body) {
  auto* e = kept_.find(id);
  if (e == nullptr)
    return;
  const auto tail = std::string(response_id.substr(response_id.find('_') + 1)) + "_in";
  auto items = json::parse(listed_items(input_items, tail));
  const auto body = json::parse(response_body, nullptr, false);
  if (body.is_object())
    if (const auto out = body.find("output"); out != body.end() && out->is_array()) {
      if (!out->empty() && out->front().is_object())
        if (const auto first = out->front().find("id"); first != out->front().end() && first->is_string())
          for (const auto& [item_id, item] : e->items)
            if (item_id == first->get_ref<const std::string&>())
              return; // joined already
      items.insert(items.end(), out->begin(), out->end());
    }
  bool trimmed = false;
  const auto before = e->items.size();
  if (!append(id, *e, dump(items), true, &trimmed)) {
    kept_.erase(id); // its turn alone larger than the store: dropped, as one dropped for room
    return;
  }
  if (trimmed) // older items gave way: not an addition alone
    tell(id);
  else
    tell_added(id, before);
}

void conversation_store::tell(const std::string& id) {
  if (!changed_)
    return;
  if (const auto* e = kept_.find(id))
    changed_(id, *e);
}

void conversation_store::tell_added(const std::string& id, std::size_t first) {
  if (!added_) {
    tell(id);
    return;
  }
  if (const auto* e = kept_.find(id))
    added_(id, *e, first);
}

namespace {

/// A kept item as its text form holds it: [id, the item's JSON object as text].
bool item_pair(const json& pair) {
  return pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string()
         && json::parse(pair[1].get<std::string>(), nullptr, false).is_object();
}

} // namespace

std::string conversation_store::log_record(const entry& e, std::size_t first) {
  json record = json::array();
  for (auto k = first; k < e.items.size(); ++k)
    record.push_back(json::array({e.items[k].first, e.items[k].second}));
  return dump(record) + "\n";
}

std::size_t conversation_store::replay_log(entry& e, std::string_view log) {
  std::unordered_set<std::string> held;
  for (const auto& [item_id, item] : e.items)
    held.insert(item_id);
  std::size_t added = 0;
  while (!log.empty()) {
    const auto end = log.find('\n');
    if (end == std::string_view::npos) // cut short by a crash
      break;
    const auto record = json::parse(log.substr(0, end), nullptr, false);
    log.remove_prefix(end + 1);
    if (!record.is_array())
      break;
    if (!std::all_of(record.begin(), record.end(), item_pair))
      break;
    for (const auto& pair : record)
      if (held.insert(pair[0].get<std::string>()).second) {
        e.items.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
        ++added;
      }
  }
  return added;
}

std::string conversation_store::to_text(const entry& e) {
  json items = json::array();
  for (const auto& [item_id, item] : e.items)
    items.push_back(json::array({item_id, item}));
  return dump(json{{"created_at", e.created_at}, {"metadata", e.metadata}, {"session", e.session}, {"items", items}});
}

std::optional<conversation_store::entry> conversation_store::from_text(std::string_view text) {
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.value("created_at", json()).is_number_integer() || !j.value("metadata", json()).is_string()
      || !j.value("session", json()).is_string() || !j.value("items", json()).is_array())
    return std::nullopt;
  entry e;
  e.created_at = j["created_at"].get<std::int64_t>();
  e.metadata = j["metadata"].get<std::string>();
  e.session = j["session"].get<std::string>();
  if (!json::parse(e.metadata, nullptr, false).is_object())
    return std::nullopt;
  for (const auto& pair : j["items"]) {
    if (!item_pair(pair))
      return std::nullopt;
    e.items.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return e;
}

} // namespace troupe::openai
