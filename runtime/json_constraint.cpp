#include "runtime/json_constraint.hpp"

#include "gpu/backend.hpp"
#include "runtime/choice_constraint.hpp"
#include "runtime/grammar_constraint.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/regex_constraint.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <type_traits>
#include <unordered_map>

namespace troupe {

// -- json_vocab -------------------------------------------------------------------

void json_vocab::insert(trie& t, std::string_view bytes, std::int32_t token) {
  std::uint32_t at = 0; // the root, made by the constructor
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    auto& next = t[at].next;
    auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& e, unsigned char x) { return e.first < x; });
    if (it == next.end() || it->first != c) {
      const auto fresh = static_cast<std::uint32_t>(t.size());
      it = next.insert(it, {c, fresh});
      t.emplace_back(); // (invalidates `next`; `fresh` is kept)
      at = fresh;
    } else {
      at = it->second;
    }
  }
  t[at].tokens.push_back(token);
}

json_vocab::json_vocab(const gpu::tokenizer& vocab, std::size_t cached_states)
    : cached_states_(std::max<std::size_t>(cached_states, 1)) {
  const auto n = std::max(vocab.vocab_size(), 0);
  bytes_.resize(static_cast<std::size_t>(n));
  trie_.emplace_back();
  unplain_.emplace_back();
  json_machine in_string;
  in_string.feed(std::string_view("{\"a\":\""));
  const auto string_key = in_string.key();
  for (std::int32_t t = 0; t < n; ++t) {
    auto& b = bytes_[static_cast<std::size_t>(t)];
    b = vocab.decode(t);
    if (b.empty()) {
      if (auto text = vocab.special_text(t); !text.empty())
        specials_.emplace(std::move(text), t); // the first of any two alike
      continue;
    }
    insert(trie_, b, t);
    json_machine m = in_string;
    if (m.feed(b) && m.key() == string_key)
      plain_.push_back(t);
    else
      insert(unplain_, b, t);
  }
}

json_vocab::~json_vocab() = default;

std::string_view json_vocab::bytes(std::int32_t t) const {
  return t >= 0 && t < size() ? std::string_view(bytes_[static_cast<std::size_t>(t)]) : std::string_view();
}

std::int32_t json_vocab::special(std::string_view text) const {
  const auto it = specials_.find(std::string(text));
  return it == specials_.end() ? -1 : it->second;
}

template <class Machine>
void json_vocab::walk(const trie& t, std::uint32_t at, const Machine& m, std::vector<std::int32_t>& out) {
  for (const auto& [c, child] : t[at].next) {
    Machine next = m;
    if (!next.step(c))
      continue;
    const auto& ending = t[child].tokens;
    out.insert(out.end(), ending.begin(), ending.end());
    walk(t, child, next, out);
  }
}

namespace {

/// A walk's step from state `id` by `input` (a byte or a character),
/// found once: `steps` keeps (id, input) -> the id after it, plus one (0:
/// refused); `next` finds it afresh (none: refused).
template <class Next>
std::optional<std::uint32_t> memo_step(std::unordered_map<std::uint64_t, std::uint32_t>& steps, std::uint32_t id,
                                       std::uint32_t input, Next&& next) {
  const auto key = (std::uint64_t{id} << 32) | input;
  if (const auto it = steps.find(key); it != steps.end())
    return it->second == 0 ? std::nullopt : std::optional<std::uint32_t>(it->second - 1);
  const std::optional<std::uint32_t> to = next();
  steps.emplace(key, to ? *to + 1 : 0);
  return to;
}

} // namespace

struct json_vocab::regex_walk {
  const json_pattern& pattern;
  std::vector<json_pattern::states> sets; ///< by id
  std::map<json_pattern::states, std::uint32_t> ids;
  std::unordered_map<std::uint64_t, std::uint32_t> steps; ///< memo_step's

  std::uint32_t id_of(json_pattern::states s) {
    const auto [it, added] = ids.emplace(std::move(s), static_cast<std::uint32_t>(sets.size()));
    if (added)
      sets.push_back(it->first);
    return it->second;
  }
  /// The id after `cp` from `id`; none where the expression cannot go on.
  std::optional<std::uint32_t> step(std::uint32_t id, char32_t cp) {
    return memo_step(steps, id, cp, [&]() -> std::optional<std::uint32_t> {
      auto next = pattern.step(sets[id], cp);
      if (next.empty())
        return std::nullopt;
      return id_of(std::move(next));
    });
  }
};

void json_vocab::walk_regex(const trie& t, std::uint32_t at, regex_walk& w, std::uint32_t id,
                            const utf8_reader& reader, std::vector<std::int32_t>& out) {
  for (const auto& [c, child] : t[at].next) {
    auto next_reader = reader;
    auto next_id = id;
    const bool took = next_reader.step(
      c, [&](char32_t lo, char32_t hi) { return w.pattern.may_take(w.sets[id], lo, hi); },
      [&](char32_t cp) {
        const auto to = w.step(id, cp);
        if (to)
          next_id = *to;
        return to.has_value();
      });
    if (!took)
      continue;
    const auto& ending = t[child].tokens;
    out.insert(out.end(), ending.begin(), ending.end());
    walk_regex(t, child, w, next_id, next_reader, out);
  }
}

template <class Machine>
struct json_vocab::keyed_walk {
  std::vector<Machine> states; ///< by id
  std::unordered_map<std::string, std::uint32_t> ids;
  std::unordered_map<std::uint64_t, std::uint32_t> steps; ///< memo_step's

  std::uint32_t id_of(Machine m) {
    const auto [it, added] = ids.emplace(m.key(), static_cast<std::uint32_t>(states.size()));
    if (added)
      states.push_back(std::move(m));
    return it->second;
  }
  std::optional<std::uint32_t> step(std::uint32_t id, unsigned char c) {
    return memo_step(steps, id, c, [&]() -> std::optional<std::uint32_t> {
      Machine next = states[id];
      if (!next.step(c))
        return std::nullopt;
      return id_of(std::move(next));
    });
  }
};

template <class Machine>
void json_vocab::walk_keyed(const trie& t, std::uint32_t at, keyed_walk<Machine>& w, std::uint32_t id,
                            std::vector<std::int32_t>& out) {
  for (const auto& [c, child] : t[at].next) {
    const auto next = w.step(id, c);
    if (!next)
      continue;
    const auto& ending = t[child].tokens;
    out.insert(out.end(), ending.begin(), ending.end());
    walk_keyed(t, child, w, *next, out);
  }
}

struct json_vocab::pattern_string {
  const json_pattern* pattern;
  json_machine lex;
  std::vector<std::uint16_t> at;
  std::uint32_t cp = 0;
  /// minLength and maxLength (0 and the most: none), and the characters
  /// begun.
  std::uint32_t min = 0;
  std::uint32_t max = 0xFFFFFFFFu;
  std::uint32_t chars = 0;

  std::string key() const {
    auto k = lex.key();
    k.append(reinterpret_cast<const char*>(&cp), sizeof cp);
    k.append(reinterpret_cast<const char*>(&chars), sizeof chars);
    k.append(reinterpret_cast<const char*>(at.data()), at.size() * sizeof(at[0]));
    return k;
  }
  /// Byte `c` inside the string (not its closing quote); false: it may not
  /// come (this one is then spent).
  bool step(unsigned char c) {
    const auto before = lex;
    return lex.step(c) && schema_machine::pattern_takes(*pattern, at, cp, before, c)
           && (max == 0xFFFFFFFFu && min == 0 ? true
                                              : schema_machine::length_takes(min, max, chars, pattern, at, before, c));
  }
};

void json_vocab::walk_pattern(const trie& t, std::uint32_t at, const schema_machine& m,
                              keyed_walk<pattern_string>& w, std::uint32_t id, std::string& prefix,
                              std::vector<std::int32_t>& out) {
  for (const auto& [c, child] : t[at].next) {
    const auto& ending = t[child].tokens;
    const auto& lex = w.states[id].lex;
    prefix.push_back(static_cast<char>(c));
    if (lex.lex_ == json_machine::lex::string && lex.utf8_left_ == 0 && c == '"') {
      // The string closes: what may follow is the whole schema's to say.
      schema_machine full = m;
      if (full.feed(std::string_view(prefix))) {
        out.insert(out.end(), ending.begin(), ending.end());
        walk(t, child, full, out);
      }
    } else if (const auto next = w.step(id, c)) {
      out.insert(out.end(), ending.begin(), ending.end());
      walk_pattern(t, child, m, w, *next, prefix, out);
    }
    prefix.pop_back();
  }
}

std::shared_ptr<const json_vocab::token_split> json_vocab::split(const json_machine& m) {
  return split(m, m.key(), m.in_text());
}

std::shared_ptr<const json_vocab::token_split> json_vocab::split(const schema_machine& m) {
  return split(m, m.key(), m.free_text());
}

std::shared_ptr<const json_vocab::token_split> json_vocab::split(const choice_machine& m) {
  return split(m, m.key(), false);
}

std::shared_ptr<const json_vocab::token_split> json_vocab::split(const regex_machine& m) {
  return split(m, m.key(), false);
}

std::shared_ptr<const json_vocab::token_split> json_vocab::split(const grammar_machine& m) {
  return split(m, m.key(), false);
}

template <class Machine>
std::shared_ptr<const json_vocab::token_split> json_vocab::split(const Machine& m, std::string k, bool in_text) {
  if (const auto hit = by_key_.find(k); hit != by_key_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second);
    return hit->second->second;
  }
  token_split out;
  if (in_text) {
    // Plain text keeps any string as it is: only the rest is walked.
    std::vector<std::int32_t> walked;
    walk(unplain_, 0, m, walked);
    std::sort(walked.begin(), walked.end());
    out.allowed.resize(plain_.size() + walked.size());
    std::merge(plain_.begin(), plain_.end(), walked.begin(), walked.end(), out.allowed.begin());
  } else {
    const json_pattern* pattern = nullptr;
    if constexpr (std::is_same_v<Machine, schema_machine>)
      pattern = m.pattern_string();
    if constexpr (std::is_same_v<Machine, schema_machine>) {
      if (pattern != nullptr) {
        std::string prefix;
        const auto& r = m.readings_.front();
        keyed_walk<pattern_string> w;
        pattern_string first{pattern, m.lex_, r.pattern_at, r.pattern_cp};
        if (r.string_node != json_schema::none) {
          first.min = m.schema_->at(r.string_node).min_length;
          first.max = m.schema_->at(r.string_node).max_length;
          first.chars = r.chars;
        }
        const auto start = w.id_of(std::move(first));
        walk_pattern(trie_, 0, m, w, start, prefix, out.allowed);
      }
    }
    if constexpr (std::is_same_v<Machine, regex_machine>) {
      regex_walk w{m.regex_->pattern, {}, {}, {}};
      const auto start = w.id_of(m.at_);
      walk_regex(trie_, 0, w, start, m.utf8_, out.allowed);
    } else if constexpr (std::is_same_v<Machine, grammar_machine>) {
      keyed_walk<grammar_machine> w;
      const auto start = w.id_of(m);
      walk_keyed(trie_, 0, w, start, out.allowed);
    } else if (pattern == nullptr) {
      walk(trie_, 0, m, out.allowed);
    }
    std::sort(out.allowed.begin(), out.allowed.end());
  }
  out.banned.reserve(bytes_.size() - out.allowed.size());
  auto a = out.allowed.begin();
  for (std::int32_t t = 0; t < size(); ++t) {
    if (a != out.allowed.end() && *a == t)
      ++a;
    else
      out.banned.push_back(t);
  }
  auto shared = std::make_shared<const token_split>(std::move(out));
  lru_.emplace_front(k, shared);
  by_key_.emplace(std::move(k), lru_.begin());
  if (lru_.size() > cached_states_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return shared;
}

} // namespace troupe
