#include "messages/tool_calls.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace troupe::openai {

namespace {

using json = nlohmann::json;

/// Reads a gap between calls from its start: blanks, then words.
struct gap_matcher {
  std::string_view s;
  std::size_t i = 0;

  void blanks() {
    while (i < s.size() && json_blank(static_cast<unsigned char>(s[i])))
      ++i;
  }
  /// 1: `w` read; -1: the text ends before `w` could tell; 0: not `w`.
  int word(std::string_view w) {
    const auto rest = s.substr(i);
    if (rest.starts_with(w)) {
      i += w.size();
      return 1;
    }
    return w.starts_with(rest) ? -1 : 0;
  }
};

enum class gap_read { more, object, none };

gap_read either(gap_read a, gap_read b) {
  if (a == gap_read::object || b == gap_read::object)
    return gap_read::object;
  return a == gap_read::more || b == gap_read::more ? gap_read::more : gap_read::none;
}

gap_read as_gap(int word) {
  return word < 0 ? gap_read::more : gap_read::none;
}

/// From the opening marker on: the marker, blanks, the array's bracket and
/// blanks (`array`), the object's brace.
gap_read call_start(gap_matcher m, std::string_view open, bool array) {
  if (const auto r = m.word(open); r != 1)
    return as_gap(r);
  m.blanks();
  if (array) {
    if (const auto r = m.word("["); r != 1)
      return as_gap(r);
    m.blanks();
  }
  const auto r = m.word("{");
  return r == 1 ? gap_read::object : as_gap(r);
}

/// With a head: from the opening marker on, the marker, blanks, a name and
/// the head, blanks, the arguments' brace (`bare`: only blanks and the
/// brace, the name the one tool's). The name goes to `name` where the brace
/// is read.
gap_read named_start(gap_matcher m, std::string_view open, const tool_format& t, std::string* name) {
  if (const auto r = m.word(open); r != 1)
    return as_gap(r);
  const std::string* read = t.bare && !t.names.empty() ? &t.names.front() : nullptr;
  if (!t.bare) {
    m.blanks();
    auto begun = gap_read::none;
    for (const auto& n : t.names) {
      auto at = m;
      const auto r = at.word(n + t.head);
      if (r == 1) {
        read = &n;
        m = at;
        break;
      }
      begun = either(begun, as_gap(r));
    }
    if (read == nullptr)
      return begun;
  }
  m.blanks();
  const auto r = m.word("{");
  if (r != 1)
    return as_gap(r);
  *name = read == nullptr ? std::string() : *read;
  return gap_read::object;
}

/// Whether `gap` (all that followed the last call, or the output's start)
/// is the next call's start, up to its object's opening brace (its last
/// byte, as the gap is read byte by byte); with a head, the call's name to
/// `name`.
gap_read read_gap(std::string_view gap, const tool_format& t, bool first, std::string* name) {
  const std::string_view open = t.bare ? std::string_view() : std::string_view(t.open);
  const auto start = [&](gap_matcher at, std::string_view marker) {
    return t.head.empty() ? call_start(at, marker, t.array) : named_start(at, marker, t, name);
  };
  gap_matcher m{gap};
  m.blanks();
  if (first)
    return start(m, open);
  if (t.bare || !t.parallel)
    return gap_read::none;
  if (t.array) {
    // The next call in the array, or a marked array ("]" ends one; the text
    // after it is passed over up to the next marker).
    auto after = m;
    const auto r = after.word(",");
    const auto next = r == 1 ? call_start(after, "", false) : as_gap(r);
    return open.empty() ? next : either(next, call_start(m, open, true));
  }
  // The closing marker (";" between marker-less calls), which may be left
  // out before the next call's.
  const std::string_view separator = open.empty() ? std::string_view(";") : std::string_view(t.close);
  auto closed = gap_read::none;
  if (!separator.empty()) {
    auto after = m;
    if (const auto r = after.word(separator); r == 1) {
      after.blanks();
      closed = start(after, open);
    } else {
      closed = as_gap(r);
    }
  }
  return either(closed, start(m, open));
}

/// `text`, one JSON object (blanks around it), less the blanks between its
/// tokens; none when it is not one.
std::optional<std::string> compact_object(std::string_view text) {
  json_machine m;
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool in_string = m.in_string();
    if (!m.feed(c))
      return std::nullopt;
    if (in_string || !json_blank(c))
      out += ch;
  }
  if (!m.complete())
    return std::nullopt;
  return out;
}

/// A JSON string's text, decoded; none when `text` is not one.
std::optional<std::string> json_string(std::string_view text) {
  try {
    const auto j = json::parse(text);
    if (j.is_string())
      return j.get<std::string>();
  } catch (const json::exception&) {
  }
  return std::nullopt;
}

} // namespace

call_reader::call_reader(tool_format format) : format_(std::move(format)) {}

bool call_reader::all_whole() const noexcept {
  return !calls_.empty() && std::all_of(calls_.begin(), calls_.end(), [](const read_call& c) { return c.whole; });
}

void call_reader::feed(std::string_view text) {
  for (const char ch : text) {
    if (stopped_)
      return;
    if (in_object_) {
      object_byte(static_cast<unsigned char>(ch));
      continue;
    }
    gap_ += ch;
    gap();
  }
}

void call_reader::gap() {
  auto read = read_gap(gap_, format_, calls_.empty(), &head_name_);
  if (read == gap_read::none && !calls_.empty() && !format_.bare && format_.parallel && !format_.open.empty()) {
    // Text after a call that opens no call: passed over up to where one
    // may yet open (vLLM's Hermes parser finds every marked call).
    for (std::size_t from = 1; from <= gap_.size(); ++from) {
      const gap_matcher rest{std::string_view(gap_).substr(from)};
      read = format_.head.empty() ? call_start(rest, format_.open, format_.array)
                                  : named_start(rest, format_.open, format_, &head_name_);
      if (read != gap_read::none) {
        gap_.erase(0, from);
        break;
      }
    }
  }
  switch (read) {
  case gap_read::more:
    return;
  case gap_read::none:
    stopped_ = true;
    return;
  case gap_read::object:
    gap_.clear();
    in_object_ = true;
    object_ = json_machine();
    if (!format_.head.empty()) // the arguments object: the call counts
      calls_.push_back({std::move(head_name_), std::string(), false});
    object_byte('{');
    return;
  }
}

void call_reader::object_byte(unsigned char c) {
  const bool was_string = object_.in_string();
  const auto depth = object_.depth();
  if (!object_.feed(c)) {
    stopped_ = true; // a broken call keeps what was read of it
    return;
  }
  if (!format_.head.empty()) {
    // Named before its object: the object is the arguments.
    if (was_string || !json_blank(c))
      calls_.back().arguments += static_cast<char>(c);
    if (object_.complete()) {
      calls_.back().whole = true;
      in_object_ = false;
      stopped_ = format_.bare || !format_.parallel;
    }
    return;
  }
  if (depth == 0)
    return; // the object's opening brace
  if (depth == 1 && !was_string) {
    // The call's own level: a member's colon, the comma after it, the
    // object's close; its blanks.
    if (c == ':') {
      const auto key = json_string(key_);
      key_ = key.value_or(std::string());
      in_value_ = true;
      return;
    }
    if (c == ',' || c == '}') {
      member_ended();
      if (!stopped_ && object_.complete()) {
        if (!counted_) {
          stopped_ = true; // an object that is no call
          return;
        }
        calls_.back().whole = true;
        in_object_ = false;
        counted_ = false;
        name_.reset();
        has_arguments_ = false;
        if (format_.bare || !format_.parallel)
          stopped_ = true; // one call
      }
      return;
    }
    if (json_blank(c) && !in_value_)
      return;
  }
  if (!in_value_) {
    key_ += static_cast<char>(c);
    return;
  }
  if (key_ == format_.arguments_key && !has_arguments_ && (arguments_object_ || (value_.empty() && c == '{'))) {
    // The arguments object, read as it grows.
    arguments_object_ = true;
    if (was_string || !json_blank(c))
      (counted_ ? calls_.back().arguments : arguments_) += static_cast<char>(c);
    maybe_count();
    return;
  }
  if (!value_.empty() || !json_blank(c))
    value_ += static_cast<char>(c);
}

void call_reader::member_ended() {
  if (!in_value_) {
    stopped_ = true; // "{}": no member
    return;
  }
  in_value_ = false;
  const auto key = std::move(key_);
  const auto value = std::move(value_);
  key_.clear();
  value_.clear();
  if (key == "name" && !name_) {
    auto name = json_string(value);
    if (!name || std::find(format_.names.begin(), format_.names.end(), *name) == format_.names.end()) {
      stopped_ = true; // no tool of this name
      return;
    }
    name_ = std::move(name);
  } else if (key == format_.arguments_key && !has_arguments_) {
    has_arguments_ = true;
    if (!arguments_object_) {
      // A string holding the object.
      const auto inner = json_string(value);
      auto object = inner ? compact_object(*inner) : std::nullopt;
      if (!object) {
        stopped_ = true;
        return;
      }
      arguments_ = std::move(*object);
    }
    arguments_object_ = false;
  } else {
    stopped_ = true; // another key, or one given twice
    return;
  }
  maybe_count();
}

void call_reader::maybe_count() {
  if (counted_ || !name_ || !(has_arguments_ || arguments_object_))
    return;
  calls_.push_back({*name_, std::move(arguments_), false});
  arguments_.clear();
  counted_ = true;
}

} // namespace troupe::openai
