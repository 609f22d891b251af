#include "runtime/json_trigger.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace troupe {

mark_matcher::mark_matcher(std::string_view mark) : mark_(mark), border_(mark.size(), 0) {
  for (std::size_t i = 1, k = 0; i < mark_.size(); ++i) {
    while (k > 0 && mark_[i] != mark_[k])
      k = border_[k - 1];
    if (mark_[i] == mark_[k])
      ++k;
    border_[i] = k;
  }
}

std::size_t mark_matcher::next(std::size_t matched, unsigned char c) const noexcept {
  while (matched > 0 && static_cast<unsigned char>(mark_[matched]) != c)
    matched = border_[matched - 1];
  return static_cast<unsigned char>(mark_[matched]) == c ? matched + 1 : 0;
}

std::vector<trigger_head> trigger_heads(const std::string& schema_text, std::string_view mark,
                                        json_schema_cache& cache) {
  const auto doc = nlohmann::json::parse(schema_text, nullptr, false);
  const auto props = doc.is_object() ? doc.find("properties") : doc.end();
  if (!doc.is_object() || props == doc.end() || !props->is_object() || props->empty())
    throw std::invalid_argument("a headed trigger's schema is an object whose \"properties\" hold, by name, the "
                                "schema of the value after each name");
  std::vector<trigger_head> out;
  for (const auto& [name, schema] : props->items()) {
    const auto at = "property \"" + name + "\"";
    if (name.empty())
      throw std::invalid_argument("a headed trigger's names are not empty");
    if (name.find(mark) != std::string::npos)
      throw std::invalid_argument(at + " holds the head's mark \"" + std::string(mark) + "\"");
    for (const auto& o : out)
      if ((name + std::string(mark)).starts_with(o.name + std::string(mark))
          || (o.name + std::string(mark)).starts_with(name + std::string(mark)))
        throw std::invalid_argument(at + " and property \"" + o.name + "\" cannot be told apart before the mark");
    auto own = schema;
    if (own.is_object())
      for (const char* key : {"$defs", "definitions"})
        if (const auto d = doc.find(key); d != doc.end() && !own.contains(key))
          own[key] = *d;
    try {
      out.push_back({name, cache.get(own.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(at + ": " + e.what());
    }
  }
  return out;
}

json_trigger::json_trigger(json_vocab& vocab, std::string trigger, std::shared_ptr<const json_schema> schema,
                           std::shared_ptr<const json_schema> answer)
  : vocab_(vocab), trigger_(std::move(trigger)), match_(trigger_), schema_(std::move(schema)),
    answer_(std::move(answer)) {
  if (trigger_.empty() || trigger_.size() > max_bytes)
    throw std::invalid_argument("a JSON trigger is 1 to " + std::to_string(max_bytes) + " bytes, got "
                                + std::to_string(trigger_.size()));
  special_ = vocab_.special(trigger_);
  make_free_splits();
}

json_trigger::json_trigger(json_vocab& vocab, std::string trigger, std::string mark, std::vector<trigger_head> heads,
                           std::shared_ptr<const json_schema> answer)
  : vocab_(vocab), trigger_(std::move(trigger)), match_(trigger_), answer_(std::move(answer)), mark_(std::move(mark)),
    heads_(std::move(heads)) {
  if (trigger_.empty() || trigger_.size() > max_bytes)
    throw std::invalid_argument("a JSON trigger is 1 to " + std::to_string(max_bytes) + " bytes, got "
                                + std::to_string(trigger_.size()));
  if (mark_.empty() || mark_.size() > max_bytes)
    throw std::invalid_argument("a JSON trigger's head mark is 1 to " + std::to_string(max_bytes) + " bytes, got "
                                + std::to_string(mark_.size()));
  if (heads_.empty())
    throw std::invalid_argument("a headed JSON trigger has at least one head");
  special_ = vocab_.special(trigger_);
  mark_special_ = vocab_.special(mark_);
  nodes_.emplace_back();
  for (std::uint32_t h = 0; h < heads_.size(); ++h) {
    const auto& name = heads_[h].name;
    if (name.empty() || name.find(mark_) != std::string::npos || !heads_[h].schema)
      throw std::invalid_argument("a headed JSON trigger's names are not empty, do not hold the mark, and have "
                                  "schemas");
    const auto bytes = name + mark_;
    std::uint32_t at = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (nodes_[at].ends != no_head)
        throw std::invalid_argument("heads \"" + heads_[nodes_[at].ends].name + "\" and \"" + name
                                    + "\" cannot be told apart before the mark");
      if (i == name.size())
        nodes_[at].name_ends = h;
      const auto c = static_cast<unsigned char>(bytes[i]);
      auto& next = nodes_[at].next;
      auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& e, unsigned char b) { return e.first < b; });
      if (it != next.end() && it->first == c) {
        at = it->second;
        continue;
      }
      const auto made = static_cast<std::uint32_t>(nodes_.size());
      next.insert(it, {c, made});
      nodes_.emplace_back();
      at = made;
    }
    if (nodes_[at].ends != no_head || !nodes_[at].next.empty())
      throw std::invalid_argument("heads \"" + name + "\" and another cannot be told apart before the mark");
    nodes_[at].ends = h;
  }
  head_splits_.resize(nodes_.size());
  make_free_splits();
}

void json_trigger::make_free_splits() {
  if (answer_) {
    auto none = std::make_shared<json_vocab::token_split>();
    none->banned.resize(static_cast<std::size_t>(vocab_.size()));
    for (std::int32_t t = 0; t < vocab_.size(); ++t)
      none->banned[static_cast<std::size_t>(t)] = t;
    none_ = std::move(none);
  }
  // Each free state's ban list, once: a token is banned where reading it
  // ends the trigger and then breaks the value (or the heads) that
  // begins. Only a token holding the trigger's last byte can end it; the
  // states that ban none share one split.
  const auto n = vocab_.size();
  std::vector<std::int32_t> ending;
  for (std::int32_t t = 0; t < n; ++t)
    if (vocab_.bytes(t).find(trigger_.back()) != std::string_view::npos)
      ending.push_back(t);
  std::shared_ptr<const json_vocab::token_split> all;
  for (std::size_t matched = 0; matched < trigger_.size(); ++matched) {
    std::vector<std::int32_t> banned;
    for (const auto t : ending) {
      state probe;
      probe.matched = matched;
      if (!advance(probe, vocab_.bytes(t)))
        banned.push_back(t);
    }
    if (banned.empty() && all) {
      free_.push_back(all);
      continue;
    }
    auto s = std::make_shared<json_vocab::token_split>();
    s->allowed.reserve(static_cast<std::size_t>(n) - banned.size());
    auto b = banned.begin();
    for (std::int32_t t = 0; t < n; ++t) {
      if (b != banned.end() && *b == t)
        ++b;
      else
        s->allowed.push_back(t);
    }
    s->banned = std::move(banned);
    if (s->banned.empty())
      all = s;
    free_.push_back(std::move(s));
  }
}

json_trigger::state json_trigger::begin(bool leading) const {
  state s;
  s.leading = leading || answer_ != nullptr;
  if (answer_)
    s.answer.emplace(answer_);
  return s;
}

void json_trigger::triggered(state& s) const {
  s.leading = false;
  s.answer.reset();
  s.matched = 0;
  if (heads_.empty())
    s.value.emplace(schema_);
  else
    s.head = 0;
}

bool json_trigger::head_byte(state& s, unsigned char c) const {
  const auto& next = nodes_[s.head].next;
  const auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& e, unsigned char b) { return e.first < b; });
  if (it == next.end() || it->first != c)
    return false;
  s.head = it->second;
  if (const auto h = nodes_[s.head].ends; h != no_head) {
    s.head = no_head;
    s.value.emplace(heads_[h].schema);
  }
  return true;
}

bool json_trigger::advance(state& s, std::int32_t t) const {
  if (s.done)
    return false;
  if (s.head != no_head) {
    // Between the trigger and the value: the mark's token after a whole
    // name; a token that stands for no text goes nowhere.
    if (t >= 0 && t == mark_special_) {
      const auto h = nodes_[s.head].name_ends;
      if (h == no_head)
        return false;
      s.head = no_head;
      s.value.emplace(heads_[h].schema);
      return true;
    }
    return !vocab_.bytes(t).empty() && advance(s, vocab_.bytes(t));
  }
  if (s.leading && t >= 0 && t == mark_special_)
    return false; // (it writes no byte of the trigger)
  if (t < 0 || t != special_ || s.value)
    return advance(s, vocab_.bytes(t));
  if ((s.leading && s.matched != 0) || (s.answer && !s.leading))
    return false; // (the trigger's token inside it, or inside the answer)
  triggered(s);
  return true;
}

bool json_trigger::advance(state& s, std::string_view bytes) const {
  // Inside a value, a token without '}' or ']' cannot close it (its top is
  // an object or an array): the machine takes it whole or not at all, in
  // place, with no copy of the state (a step of every request in a call
  // goes here).
  if (s.done)
    return bytes.empty();
  if (!s.leading && bytes.find_first_of("}]") == std::string_view::npos) {
    if (s.value)
      return s.value->feed(bytes);
    if (s.answer)
      return s.answer->feed(bytes);
  }
  state at = s;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (at.leading) {
      // The trigger and (while it may still be) the answer each read it.
      const bool trigger = c == static_cast<unsigned char>(trigger_[at.matched]);
      const bool answer = at.answer && at.answer->feed(c);
      if (!answer)
        at.answer.reset();
      if (!trigger) {
        if (!answer)
          return false;
        at.leading = false;
        at.matched = 0;
        continue;
      }
      if (++at.matched == trigger_.size())
        triggered(at);
      else if (at.answer && at.answer->complete())
        at.answer.reset(); // (the trigger may go on: it does)
      continue;
    }
    if (at.answer) {
      if (!at.answer->feed(c)) // (after its close, blanks alone)
        return false;
      continue;
    }
    if (at.head != no_head) {
      if (!head_byte(at, c))
        return false;
      continue;
    }
    if (at.value) {
      if (!at.value->feed(c))
        return false;
      if (at.value->complete()) {
        at.value.reset();
        at.matched = 0;
      }
      continue;
    }
    at.matched = match_.next(at.matched, c);
    if (at.matched == trigger_.size())
      triggered(at);
  }
  if (at.answer && !at.leading && at.answer->complete()) {
    // The answer has closed (the token's blanks after it read too): the
    // output is whole.
    at.answer.reset();
    at.done = true;
  }
  s = std::move(at);
  return true;
}

std::shared_ptr<const json_vocab::token_split> json_trigger::split(const state& s) const {
  if (s.done)
    return none_;
  if (s.value)
    return vocab_.split(*s.value);
  if (s.head != no_head) {
    auto& cached = head_splits_.at(s.head);
    if (!cached) {
      // Few tokens go on with a name or the mark (the end-of-sequence
      // token is not among them): only those whose first byte does are
      // read.
      const auto& next = nodes_[s.head].next;
      auto split = std::make_shared<json_vocab::token_split>();
      for (std::int32_t t = 0; t < vocab_.size(); ++t) {
        const auto bytes = vocab_.bytes(t);
        bool writes = false;
        if (t == mark_special_) {
          writes = nodes_[s.head].name_ends != no_head;
        } else if (!bytes.empty()) {
          const auto c = static_cast<unsigned char>(bytes.front());
          const auto it = std::lower_bound(next.begin(), next.end(), c,
                                           [](const auto& e, unsigned char b) { return e.first < b; });
          auto probe = s;
          writes = it != next.end() && it->first == c && advance(probe, bytes);
        }
        (writes ? split->allowed : split->banned).push_back(t);
      }
      cached = std::move(split);
    }
    return cached;
  }
  if (s.answer && !s.leading)
    return vocab_.split(*s.answer);
  if (!s.leading)
    return free_.at(s.matched);
  if (!s.answer)
    return leading_split(s.matched);
  // The trigger's tokens and the answer's: a token either reads whole
  // (each reads every byte on its own) is one advance takes. The answer
  // has read the trigger's bytes matched, so those say which.
  if (leading_answer_.empty())
    leading_answer_.resize(trigger_.size());
  auto& cached = leading_answer_.at(s.matched);
  if (!cached) {
    const auto lead = leading_split(s.matched);
    const auto answer = vocab_.split(*s.answer);
    auto split = std::make_shared<json_vocab::token_split>();
    std::set_union(lead->allowed.begin(), lead->allowed.end(), answer->allowed.begin(), answer->allowed.end(),
                   std::back_inserter(split->allowed));
    std::set_intersection(lead->banned.begin(), lead->banned.end(), answer->banned.begin(), answer->banned.end(),
                          std::back_inserter(split->banned));
    cached = std::move(split);
  }
  return cached;
}

std::shared_ptr<const json_vocab::token_split> json_trigger::leading_split(std::size_t matched) const {
  if (leading_.empty())
    leading_.resize(trigger_.size());
  auto& cached = leading_.at(matched);
  if (!cached) {
    // Few tokens go on with the trigger: the rest (the end-of-sequence
    // token among them) are banned.
    state s;
    s.leading = true;
    s.matched = matched;
    auto split = std::make_shared<json_vocab::token_split>();
    for (std::int32_t t = 0; t < vocab_.size(); ++t) {
      auto probe = s;
      const auto bytes = vocab_.bytes(t);
      const bool writes = t == special_ ? matched == 0 : !bytes.empty() && advance(probe, bytes);
      (writes ? split->allowed : split->banned).push_back(t);
    }
    cached = std::move(split);
  }
  return cached;
}

} // namespace troupe
