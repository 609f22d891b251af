// schema_machine: JSON text read byte by byte against a compiled schema
// (runtime/json_schema.hpp). Apart from the compiler, in json_schema.cpp.
#include "runtime/json_schema.hpp"

#include "runtime/json_value_text.hpp"

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>
#include <utility>

namespace troupe {

namespace {

using namespace json_text;

/// Names object node `n` may still take beyond the properties it requires
/// and has not been given yet (maxProperties keeps room for those), with
/// `count` names given.
std::int64_t spare_names(const json_schema::node& n, std::uint64_t seen, std::uint32_t count) {
  return std::int64_t{n.max_names} - count - std::popcount(json_schema::required_now(n, seen) & ~seen);
}

/// Property `i` of object node `n` may still be given, `depth` containers
/// deep: not given yet, its value fits, and there is room for it and for
/// what it makes required (whose values fit too).
bool open_name(const json_schema& s, const json_schema::node& n, std::uint64_t seen, std::uint32_t count,
               std::size_t i, std::size_t depth) {
  if ((seen >> i & 1) || !s.fits(n.properties[i].second, depth))
    return false;
  const auto after = seen | std::uint64_t{1} << i;
  const auto owed = json_schema::required_now(n, after) & ~after;
  if (std::int64_t{n.max_names} - count - 1 - std::popcount(owed) < 0)
    return false;
  for (auto fresh = owed & ~json_schema::required_now(n, seen); fresh != 0; fresh &= fresh - 1)
    if (!s.fits(n.properties[static_cast<std::size_t>(std::countr_zero(fresh))].second, depth))
      return false;
  return true;
}

/// Names other than the properties may be given, `depth` containers deep
/// (additional ones, or names of patternProperties).
bool other_names(const json_schema& s, const json_schema::node& n, std::uint64_t seen, std::uint32_t count,
                 std::size_t depth) {
  if (spare_names(n, seen, count) <= 0)
    return false;
  if (n.additional != json_schema::none && s.fits(n.additional, depth))
    return true;
  return std::any_of(n.pattern_properties.begin(), n.pattern_properties.end(),
                     [&](const auto& p) { return s.fits(p.second, depth); });
}

/// Object node `n`, which has `count` names, may take another name.
bool names_left(const json_schema& s, const json_schema::node& n, std::uint64_t seen, std::uint32_t count,
                std::size_t depth) {
  for (std::size_t i = 0; i < n.properties.size(); ++i)
    if (open_name(s, n, seen, count, i, depth))
      return true;
  return other_names(s, n, seen, count, depth);
}

/// The magnitudes a number of node `n` with this sign may have, times 1e18.
std::pair<scaled_decimal, scaled_decimal> magnitudes(const json_schema::node& n, bool negative) {
  return negative ? std::pair{-n.number_high, -n.number_low} : std::pair{n.number_low, n.number_high};
}

/// Some t in lo..hi, at `scale` digits after the point (t * 10^-scale),
/// lies within the magnitudes `within` (times 1e18) and is a multiple of
/// `multiple` (times 1e18; 0: any).
bool grid_meets(scaled_decimal lo, scaled_decimal hi, int scale, std::pair<scaled_decimal, scaled_decimal> within,
                scaled_decimal multiple) {
  auto [low, high] = within;
  if (high < 0 || lo > hi)
    return false;
  low = std::max<scaled_decimal>(low, 0);
  const auto step = pow10(18 - scale);
  const auto first = std::max(lo, (low + step - 1) / step);
  const auto last = std::min(hi, high / step);
  if (first > last)
    return false;
  if (multiple == 0)
    return true;
  const auto every = multiple / gcd(step, multiple); // t * step is a multiple when t is one of this
  return (first + every - 1) / every * every <= last;
}

/// Some number within node `n`'s bounds (number_bounded) is written by
/// going on from a sign and the digits so far (`digits` of them, worth
/// `magnitude` read as one integer; `fraction` of them after the point):
/// the number itself, or one with more digits, 18 in all, none before a
/// point after a leading 0.
bool number_reachable(const json_schema::node& n, bool negative, std::int64_t magnitude, std::uint8_t digits,
                      std::uint8_t fraction, bool point) {
  constexpr int most = schema_machine::max_integer_digits;
  if (digits == 0) { // the sign alone: some first digit will do
    for (std::int64_t d = 0; d <= 9; ++d)
      if (number_reachable(n, negative, d, 1, 0, false))
        return true;
    return false;
  }
  const auto within = magnitudes(n, negative);
  const int left = most - digits; // digits that may follow
  const scaled_decimal a = magnitude;
  const auto lo = a * pow10(left), hi = (a + 1) * pow10(left) - 1;
  const auto m = n.number_multiple;
  if (point) // t written after the digits so far: fraction + left digits after the point
    return (fraction > 0 || left > 0) && grid_meets(lo, hi, fraction + left, within, m);
  if (magnitude == 0) // a leading 0: a fraction only
    return grid_meets(lo, hi, left, within, m);
  // k more digits before the point, and left - k after it.
  for (int k = 0; k <= left; ++k)
    if (grid_meets(lo, hi, left - k, within, m))
      return true;
  return false;
}

/// A number of node `n` that ends here lies within its bounds.
bool number_within(const json_schema::node& n, bool negative, std::int64_t magnitude, std::uint8_t fraction) {
  const auto [low, high] = magnitudes(n, negative);
  const auto x = scaled_decimal{magnitude} * pow10(18 - fraction);
  return low <= x && x <= high && (n.number_multiple == 0 || x % n.number_multiple == 0);
}

/// Some integer within node `n`'s bounds is written by going on from a sign
/// and the digits so far (`digits` of them, worth `magnitude`): the value
/// itself, or one with more digits (none after a leading 0), 18 at most.
bool reachable(const json_schema::node& n, bool negative, std::int64_t magnitude, std::uint8_t digits) {
  const auto meets = [&](std::int64_t a, std::int64_t b) { // the magnitudes a..b with the sign
    const auto lo = std::max(negative ? -b : a, n.minimum);
    const auto hi = std::min(negative ? -a : b, n.maximum);
    if (lo > hi)
      return false;
    // The least multiple from lo on (rounded up, below 0 too).
    const auto m = n.multiple;
    const auto first = lo >= 0 ? (lo + m - 1) / m * m : -(-lo / m * m);
    return first <= hi;
  };
  if (digits == 0) // the sign alone
    return meets(0, 999'999'999'999'999'999);
  if (meets(magnitude, magnitude))
    return true;
  if (magnitude == 0)
    return false;
  std::int64_t scale = 1;
  for (auto k = digits; k < schema_machine::max_integer_digits; ++k) {
    scale *= 10;
    if (meets(magnitude * scale, magnitude * scale + scale - 1))
      return true;
  }
  return false;
}

// -- string formats: the next place in one, or -1 where `c` may not come --------

int days_in(unsigned year, unsigned month) {
  if (month == 2)
    return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28;
  return month == 4 || month == 6 || month == 9 || month == 11 ? 30 : 31;
}

/// RFC 3339 full-date, YYYY-MM-DD: a year from 1000, a day its month has.
int date_next(schema_machine::format_state& st, int at, unsigned char c) {
  const int d = c - '0';
  switch (at) {
  case 0:
    if (!json_digit(c) || c == '0')
      return -1;
    st.year = static_cast<std::uint16_t>(d);
    return 1;
  case 1:
  case 2:
  case 3:
    if (!json_digit(c))
      return -1;
    st.year = static_cast<std::uint16_t>(st.year * 10 + d);
    return at + 1;
  case 4:
  case 7:
    return c == '-' ? at + 1 : -1;
  case 5:
    if (c != '0' && c != '1')
      return -1;
    st.month = static_cast<std::uint8_t>(10 * d);
    return 6;
  case 6:
    if (!json_digit(c) || st.month + d < 1 || st.month + d > 12)
      return -1;
    st.month = static_cast<std::uint8_t>(st.month + d);
    return 7;
  case 8:
    if (!json_digit(c) || 10 * d > days_in(st.year, st.month))
      return -1;
    st.digit = static_cast<std::uint8_t>(d);
    return 9;
  case 9:
    if (!json_digit(c) || 10 * st.digit + d < 1 || 10 * st.digit + d > days_in(st.year, st.month))
      return -1;
    return 10;
  default:
    return -1;
  }
}

/// RFC 3339 full-time, HH:MM:SS[.frac](Z|+HH:MM|-HH:MM), fractions of at
/// most 9 digits; 20 is its end.
int time_next(schema_machine::format_state& st, int at, unsigned char c) {
  const int d = c - '0';
  switch (at) {
  case 0:
  case 14: // hours, of the time and of its offset
    if (c < '0' || c > '2')
      return -1;
    st.digit = static_cast<std::uint8_t>(d);
    return at + 1;
  case 1:
  case 15:
    return json_digit(c) && (st.digit < 2 || c <= '3') ? at + 1 : -1;
  case 2:
  case 5:
  case 16:
    return c == ':' ? at + 1 : -1;
  case 3:
  case 6:
  case 17:
    return c >= '0' && c <= '5' ? at + 1 : -1;
  case 4:
  case 7:
    return json_digit(c) ? at + 1 : -1;
  case 18:
    return json_digit(c) ? 20 : -1;
  case 8:
    if (c == '.') {
      st.digit = 0;
      return 9;
    }
    return c == 'Z' ? 20 : c == '+' || c == '-' ? 14 : -1;
  case 9: // the fraction's first digit
    st.digit = 1;
    return json_digit(c) ? 10 : -1;
  case 10:
    if (json_digit(c)) {
      if (st.digit == 9)
        return -1;
      ++st.digit;
      return 10;
    }
    return c == 'Z' ? 20 : c == '+' || c == '-' ? 14 : -1;
  default:
    return -1;
  }
}

int format_next(json_schema::string_format f, schema_machine::format_state& st, int at, unsigned char c) {
  using F = json_schema::string_format;
  switch (f) {
  case F::date:
    return date_next(st, at, c);
  case F::time:
    return time_next(st, at, c);
  case F::date_time:
    if (at < 10)
      return date_next(st, at, c);
    if (at == 10)
      return c == 'T' ? 11 : -1;
    if (const int next = time_next(st, at - 11, c); next >= 0)
      return 11 + next;
    return -1;
  case F::uuid:
    if (at == 8 || at == 13 || at == 18 || at == 23)
      return c == '-' ? at + 1 : -1;
    return at < 36 && json_hex(c) ? at + 1 : -1;
  case F::none:
    break;
  }
  return -1;
}

bool format_whole(json_schema::string_format f, int at) {
  using F = json_schema::string_format;
  return at == (f == F::date ? 10 : f == F::time ? 20 : f == F::date_time ? 31 : 36);
}

} // namespace

// -- schema_machine ---------------------------------------------------------------

schema_machine::schema_machine(std::shared_ptr<const json_schema> schema) : schema_(std::move(schema)) {
  lex_.array_top_ = true; // the schema says which container the top is
  readings_.emplace_back();
}

bool schema_machine::feed(unsigned char c) {
  return step(c); // (which changes nothing when it refuses)
}

bool schema_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](schema_machine& m, unsigned char c) { return m.step(c); });
}

void schema_machine::reading::append_key(std::string& k) const {
  const auto put32 = [&](std::uint32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put32(literal_node);
  put32(literal);
  put32(literal_at);
  k += static_cast<char>(integer | number_closed << 1);
  k += static_cast<char>(digits);
  k += static_cast<char>(exponent_digits);
  if (string_node != json_schema::none) {
    put32(string_node);
    put32(chars);
  }
  if (format.format != json_schema::string_format::none) {
    k += static_cast<char>(format.format);
    k += static_cast<char>(format.at);
    k.append(reinterpret_cast<const char*>(&format.year), sizeof format.year);
    k += static_cast<char>(format.month);
    k += static_cast<char>(format.digit);
  }
  if (pattern_node != json_schema::none) {
    k += 'p';
    put32(pattern_node);
    put32(pattern_cp);
    put32(static_cast<std::uint32_t>(pattern_at.size()));
    k.append(reinterpret_cast<const char*>(pattern_at.data()), pattern_at.size() * sizeof pattern_at[0]);
  }
  if (!name_at.empty()) {
    k += 'n';
    put32(name_cp);
    for (const auto& at : name_at) {
      put32(static_cast<std::uint32_t>(at.size()));
      k.append(reinterpret_cast<const char*>(at.data()), at.size() * sizeof at[0]);
    }
  }
  if (bounded_node != json_schema::none) {
    put32(bounded_node);
    k += static_cast<char>(negative | point << 1);
    k += static_cast<char>(fraction);
    k.append(reinterpret_cast<const char*>(&magnitude), sizeof magnitude);
  }
  for (const auto& f : frames) {
    put32(f.node);
    k.append(reinterpret_cast<const char*>(&f.seen), sizeof f.seen);
    put32(f.count);
    put32(f.value);
    put32(static_cast<std::uint32_t>(f.key.size()));
    k += f.key;
    k += static_cast<char>(f.key_free);
  }
  if (items != nullptr) { // the values no item of the array may take again
    put32(static_cast<std::uint32_t>(items->size()));
    for (const auto& v : *items) {
      put32(static_cast<std::uint32_t>(v.size()));
      k += v;
    }
  }
  k += '\xff'; // between readings
}

std::string schema_machine::key() const {
  std::string k = "\xff"; // never a json_machine key's first byte
  const auto id = schema_->id();
  k.append(reinterpret_cast<const char*>(&id), sizeof id);
  auto lex = lex_.key();
  const auto n = static_cast<std::uint32_t>(lex.size());
  k.append(reinterpret_cast<const char*>(&n), sizeof n);
  k += lex;
  for (const auto& r : readings_)
    r.append_key(k);
  return k;
}

bool schema_machine::free_text() const noexcept {
  if (!lex_.in_text())
    return false;
  return std::all_of(readings_.begin(), readings_.end(), [&](const reading& r) {
    return r.literal_node == json_schema::none && r.string_node == json_schema::none
           && r.format.format == json_schema::string_format::none && r.pattern_node == json_schema::none
           && r.name_at.empty() && (!lex_.key_ || r.frames.back().key_free);
  });
}

bool schema_machine::step(unsigned char c) {
  json_machine after = lex_;
  if (!after.step(c))
    return false;
  std::vector<reading> next;
  for (auto& r : readings_)
    advance(r, lex_, after, c, next);
  if (next.empty())
    return false; // (lists it made stay in held_ until a step's hold())
  if (next.size() == 1) {
    readings_ = std::move(next);
    lex_ = std::move(after);
    if (held_)
      hold();
    return true;
  }
  // One reading of each kind, at most max_readings: any reading kept is
  // one the text may go on with, so fewer never leave a dead end.
  std::vector<std::string> keys;
  std::vector<reading> kept;
  for (auto& r : next) {
    std::string k;
    r.append_key(k);
    if (std::find(keys.begin(), keys.end(), k) != keys.end())
      continue;
    keys.push_back(std::move(k));
    kept.push_back(std::move(r));
    if (kept.size() == max_readings)
      break;
  }
  readings_ = std::move(kept);
  lex_ = std::move(after);
  if (held_)
    hold();
  return true;
}

void schema_machine::hold() {
  held_values kept;
  for (const auto& r : readings_) {
    const auto points = [&](const auto& l) { return l.get() == r.items; };
    if (r.items == nullptr || std::any_of(kept.begin(), kept.end(), points))
      continue;
    kept.push_back(*std::find_if(held_->begin(), held_->end(), points)); // (every list pointed to is held)
  }
  if (kept.size() != held_->size())
    held_ = kept.empty() ? nullptr : std::make_shared<const held_values>(std::move(kept));
}

void schema_machine::begin_value(reading r, const json_machine& before, const json_machine& after, unsigned char c,
                                 std::vector<reading>& out) {
  const auto& s = *schema_;
  std::uint32_t value = s.root();
  bool unique = false; // an item of an array with uniqueItems
  if (!r.frames.empty()) {
    auto& f = r.frames.back();
    const auto& container = s.at(f.node);
    if (before.stack_.back() == '{') {
      value = f.value;
    } else {
      if (f.count >= container.max_items)
        return;
      value = json_schema::item(container, f.count++);
      unique = container.unique;
    }
  }
  // Under uniqueItems, an item whose value is known from its first byte
  // (an enum or const value, true, false, null) begins only if not given
  // before; another only if it can still end on a value not given.
  const auto given = [&](std::string_view text) {
    return r.items != nullptr && std::binary_search(r.items->begin(), r.items->end(), item_value(text));
  };
  using T = json_schema::type_bit;
  for (const auto& [n, lit] : s.alternatives(value)) {
    const auto& node = s.at(n);
    const auto depth = before.stack_.size();
    if (lit != json_schema::none) {
      const auto& text = node.literals[lit];
      if (static_cast<unsigned char>(text[0]) != c || depth + node.literal_depth[lit] > json_machine::max_depth
          || (unique && given(text)))
        continue;
      reading u = r;
      if (unique)
        u.frames.back().key.assign(1, static_cast<char>(c)); // (the item's bytes)
      if (text.size() > 1) {
        u.literal_node = n;
        u.literal = lit;
        u.literal_at = 1;
      } else {
        u.number_closed = json_digit(c); // a one-digit number
      }
      out.push_back(std::move(u));
      continue;
    }
    const std::uint8_t need = c == '{'                         ? T::t_object
                              : c == '['                       ? T::t_array
                              : c == '"'                       ? T::t_string
                              : c == '-' || json_digit(c) ? T::t_number | T::t_integer
                              : c == 't' || c == 'f'           ? T::t_boolean
                              : c == 'n'                       ? T::t_null
                                                               : 0;
    if ((node.types & need) == 0)
      continue;
    if ((c == '{' || c == '[') && depth + (c == '{' ? node.object_depth : node.array_depth) > json_machine::max_depth)
      continue; // (unreachable is past any depth)
    reading u = r;
    if (c == '{' || c == '[') {
      frame f;
      f.node = n;
      u.frames.push_back(std::move(f));
    }
    u.integer = (need & T::t_number) && !(node.types & T::t_number);
    if ((u.integer && node.bounded) || (!u.integer && (need & T::t_number) && node.number_bounded)) {
      u.bounded_node = n;
      u.negative = c == '-';
      u.magnitude = u.negative ? 0 : c - '0';
      const std::uint8_t digits = u.negative ? 0 : 1;
      if (u.integer ? !reachable(node, u.negative, u.magnitude, digits)
                    : !number_reachable(node, u.negative, u.magnitude, digits, 0, false))
        continue;
    }
    if (c == '"')
      begin_string(s, u, n);
    u.digits = json_digit(c);
    if (unique) {
      u.frames.back().key.assign(1, static_cast<char>(c)); // (the item's bytes)
      if (c == 't' || c == 'f' || c == 'n' ? given(c == 't' ? "true" : c == 'f' ? "false" : "null")
                                           : !item_live(u, after))
        continue;
    }
    out.push_back(std::move(u));
  }
}

void schema_machine::begin_string(const json_schema& s, reading& r, std::uint32_t n) {
  const auto& node = s.at(n);
  if (node.format != json_schema::string_format::none)
    r.format = {node.format};
  if (node.min_length > 0 || node.max_length != 0xFFFFFFFFu) {
    r.string_node = n;
    r.chars = 0;
  }
  if (node.pattern != json_schema::none) {
    r.pattern_node = n;
    r.pattern_at = s.pattern(node.pattern).start();
    r.pattern_cp = 0;
  }
}

bool schema_machine::string_takes(const json_schema& s, reading& r, const json_machine& before, unsigned char c) {
  using L = json_machine::lex;
  const auto state = before.lex_;
  if (r.format.format != json_schema::string_format::none) {
    if (c == '"') {
      if (!format_whole(r.format.format, r.format.at))
        return false;
      r.format = {};
    } else {
      const int next = format_next(r.format.format, r.format, r.format.at, c);
      if (next < 0)
        return false;
      r.format.at = static_cast<std::uint8_t>(next);
    }
  }
  if (r.pattern_node != json_schema::none) {
    if (!pattern_takes(s.pattern(s.at(r.pattern_node).pattern), r.pattern_at, r.pattern_cp, before, c))
      return false;
    if (c == '"' && state == L::string && before.utf8_left_ == 0) {
      r.pattern_node = json_schema::none; // the string has closed
      r.pattern_at.clear();
    }
  }
  if (r.string_node != json_schema::none) {
    const auto& n = s.at(r.string_node);
    if (c == '"' && state == L::string && before.utf8_left_ == 0) {
      if (r.chars < n.min_length)
        return false;
      r.string_node = json_schema::none;
      r.chars = 0;
    } else if (!length_takes(n.min_length, n.max_length, r.chars,
                             r.pattern_node == json_schema::none ? nullptr : &s.pattern(s.at(r.pattern_node).pattern),
                             r.pattern_at, before, c)) {
      return false;
    }
  }
  return true;
}

bool schema_machine::length_takes(std::uint32_t min, std::uint32_t max, std::uint32_t& chars, const json_pattern* p,
                                  const json_pattern::states& at, const json_machine& before, unsigned char c) {
  using L = json_machine::lex;
  const auto state = before.lex_;
  if (state == L::string && before.utf8_left_ == 0 && chars++ >= max)
    return false; // a character begins (a byte, a lead byte or a backslash)
  if (p == nullptr)
    return true;
  // With a pattern (its reading `at` after `c`): a character that has just
  // been written must leave some match of a length within the bounds.
  const bool whole = state == L::string ? before.utf8_left_ == 1 || (before.utf8_left_ == 0 && c < 0x80 && c != '\\')
                     : state == L::escape ? c != 'u'
                                          : state == L::unicode && before.hex_left_ == 1;
  return !whole || p->reaches_accept(at, min > chars ? min - chars : 0, max - chars);
}

bool schema_machine::string_goes_on(const json_schema& s, const reading& r) {
  if (r.string_node != json_schema::none && r.chars >= s.at(r.string_node).max_length)
    return false;
  if (r.format.format != json_schema::string_format::none) {
    bool any = false; // (formats write ASCII)
    for (unsigned char c = 0x20; c < 0x7F && !any; ++c) {
      auto st = r.format;
      any = format_next(r.format.format, st, r.format.at, c) >= 0;
    }
    if (!any)
      return false;
  }
  return r.pattern_node == json_schema::none
         || s.pattern(s.at(r.pattern_node).pattern).may_take(r.pattern_at, 0, 0x10FFFF);
}

bool schema_machine::string_longer(const json_schema& schema, std::uint32_t node) {
  reading r;
  begin_string(schema, r, node);
  return string_goes_on(schema, r);
}

bool schema_machine::name_allowed(const json_schema& schema, const std::vector<std::uint32_t>& names,
                                  std::string_view written) {
  for (const auto n : names) {
    reading r;
    begin_string(schema, r, n);
    json_machine lex;
    lex.feed(std::string_view("{\""));
    bool taken = true;
    for (const char ch : std::string(written) + '"') {
      const auto c = static_cast<unsigned char>(ch);
      json_machine next = lex;
      if (!next.step(c) || !string_takes(schema, r, lex, c)) {
        taken = false;
        break;
      }
      lex = std::move(next);
    }
    if (taken)
      return true;
  }
  return false;
}

bool schema_machine::name_spent(const reading& r, std::size_t depth) const {
  const auto& s = *schema_;
  const auto& f = r.frames.back();
  if (f.key_free)
    return false;
  const auto& n = s.at(f.node);
  for (std::size_t i = 0; i < n.properties.size(); ++i)
    if (n.properties[i].first == f.key)
      return !open_name(s, n, f.seen, f.count, i, depth) && !string_goes_on(s, r);
  return false;
}

bool schema_machine::item_byte(reading& r, const json_machine& after, unsigned char c) {
  using L = json_machine::lex;
  r.frames.back().key += static_cast<char>(c);
  if (!after.in_string() && after.lex_ != L::number && after.lex_ != L::literal)
    return end_item(r); // (a number ends at the byte after it, which is no part of it)
  return r.probe || item_live(r, after);
}

bool schema_machine::end_item(reading& r) {
  auto& f = r.frames.back();
  auto value = item_value(f.key);
  const auto* given = r.items;
  if (given != nullptr && std::binary_search(given->begin(), given->end(), value))
    return false;
  // A new list for this reading: others may share the old one.
  auto more = given != nullptr ? std::make_shared<item_values>(*given) : std::make_shared<item_values>();
  const auto at = std::upper_bound(more->begin(), more->end(), value);
  more->insert(at, std::move(value));
  r.items = more.get();
  // Held with the others until the step ends (hold() then keeps those
  // the readings point to).
  auto held = held_ ? std::make_shared<held_values>(*held_) : std::make_shared<held_values>();
  held->push_back(std::move(more));
  held_ = std::move(held);
  f.key.clear();
  return true;
}

bool schema_machine::item_live(const reading& r, const json_machine& lex) {
  const auto* given = r.items;
  // An enum or const value, true, false or null began only if not given.
  if (given == nullptr || r.literal_node != json_schema::none || lex.lex_ == json_machine::lex::literal)
    return true;
  const bool string = lex.in_string();
  // The characters of a string item so far, and the bytes after them that
  // begin the next.
  const auto characters = [](const reading& x, std::size_t& whole) {
    return decoded(std::string_view(x.frames.back().key).substr(1), whole);
  };
  // A string whose characters so far begin no value given ends on a new
  // value however it goes on.
  const auto fresh = [&](const reading& x) {
    std::size_t whole = 0;
    const auto begun = "s" + characters(x, whole);
    const auto it = std::lower_bound(given->begin(), given->end(), begun);
    return it == given->end() || !it->starts_with(begun);
  };
  if (string && ((r.string_node == json_schema::none && r.format.format == json_schema::string_format::none
                  && r.pattern_node == json_schema::none) // any character may follow: endless values
                 || fresh(r)))
    return true;
  // Otherwise a search through the bytes that may follow, depth first
  // (ending first: a closing quote, a blank after a number), for one that
  // ends the item on a value not given or leaves a fresh string. States
  // met before are not searched again: for a string, its characters (not
  // their spelling: "a" or "\u0061") and what its checks hold.
  struct probe {
    reading r;
    json_machine lex;
  };
  std::vector<probe> waiting{{r, lex}};
  waiting.back().r.probe = true;
  auto& first = waiting.back().r.frames;
  first.erase(first.begin(), first.end() - 1); // only the array's frame matters here
  std::set<std::string> met;
  const unsigned char ending = string ? '"' : ' ';
  for (int budget = max_item_search; !waiting.empty();) {
    const probe p = std::move(waiting.back());
    waiting.pop_back();
    for (int k = 0; k < 256; ++k) {
      const auto c = static_cast<unsigned char>(k == 0 ? ending : k == ending ? 0 : k);
      if (!string && (c == ',' || c == ']' || c == '}'))
        continue; // (a blank ends a number as well)
      json_machine next = p.lex;
      if (!next.step(c))
        continue;
      if (--budget == 0)
        return true; // a search this long: the item is taken as open
      std::vector<reading> out;
      advance(p.r, p.lex, next, c, out);
      for (auto& x : out) {
        if (x.frames.back().key.empty() || (string && fresh(x))) // ended, or will end, on a new value
          return true;
        if (string) {
          std::size_t whole = 0;
          auto seen = next.key();
          reading y = x; // (its checks' state; not the array's values, which stay as they are)
          y.frames.clear();
          y.items = nullptr;
          y.append_key(seen);
          seen += characters(x, whole) + '\0' + x.frames.back().key.substr(1 + whole);
          if (!met.insert(std::move(seen)).second)
            continue;
        }
        waiting.push_back({std::move(x), next});
      }
    }
  }
  return false;
}

bool schema_machine::item_can_begin(const reading& r, const json_machine& lex) {
  for (const char ch : std::string_view("\"-0123456789tfn")) {
    const auto c = static_cast<unsigned char>(ch);
    json_machine next = lex;
    if (!next.step(c))
      continue;
    std::vector<reading> out;
    begin_value(r, lex, next, c, out);
    if (!out.empty())
      return true;
  }
  return false;
}

/// A string value's byte `c` under its pattern (the lexer before it in
/// `before`): a character written whole (a UTF-8 sequence, an escape, a
/// \u escape's last digit) steps the pattern; a part of one must leave a
/// character the pattern may take; the closing quote must find it matched.
/// False: the byte may not come.
bool schema_machine::name_patterns_take(const json_schema& s, const json_schema::node& n, reading& r,
                                        const json_machine& before, unsigned char c) {
  using L = json_machine::lex;
  // A whole character: each pattern that may still match reads it.
  const auto whole = [&](char32_t code) {
    if (code >= 0xD800 && code <= 0xDFFF)
      return false; // half of a pair: the patterns read code points
    bool live = false;
    for (std::size_t i = 0; i < r.name_at.size(); ++i) {
      if (!r.name_at[i].empty())
        r.name_at[i] = s.pattern(n.pattern_properties[i].first).step(r.name_at[i], code);
      live |= !r.name_at[i].empty();
    }
    r.name_cp = 0;
    return live || n.additional != json_schema::none;
  };
  switch (before.lex_) {
    case L::string:
      if (before.utf8_left_ > 0) {
        const std::uint32_t bits = (r.name_cp << 6) | (c & 0x3F);
        if (before.utf8_left_ == 1)
          return whole(bits);
        r.name_cp = bits;
        return true;
      }
      if (c == '\\')
        return true;
      if (c < 0x80)
        return whole(c);
      r.name_cp = (c & 0xE0) == 0xC0 ? c & 0x1F : (c & 0xF0) == 0xE0 ? c & 0x0F : c & 0x07;
      return true;
    case L::escape: {
      if (c == 'u') {
        r.name_cp = 0;
        return true;
      }
      const auto e = escaped(c);
      return e >= 0 && whole(static_cast<char32_t>(e));
    }
    case L::unicode: {
      const std::uint32_t digit = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      const std::uint32_t bits = (r.name_cp << 4) | digit;
      if (before.hex_left_ == 1)
        return whole(bits);
      r.name_cp = bits;
      return true;
    }
    default:
      return true;
  }
}

std::uint32_t schema_machine::other_value(const json_schema& s, const json_schema::node& n, const reading& r,
                                          std::size_t depth) {
  auto found = json_schema::none;
  for (std::size_t i = 0; i < r.name_at.size(); ++i) {
    if (r.name_at[i].empty() || !s.pattern(n.pattern_properties[i].first).accepts(r.name_at[i]))
      continue;
    const auto node = n.pattern_properties[i].second;
    if (found != json_schema::none && found != node)
      return json_schema::none; // two patterns of different schemas: not written
    found = node;
  }
  if (found == json_schema::none)
    found = n.additional;
  return found != json_schema::none && s.fits(found, depth) ? found : json_schema::none;
}

const json_pattern* schema_machine::pattern_string() const noexcept {
  if (readings_.size() != 1 || readings_[0].pattern_node == json_schema::none || lex_.key_
      || readings_[0].format.format != json_schema::string_format::none // (the walk reads a pattern and a length)
      || !readings_[0].frames.back().key.empty()) // an item held unique, whose bytes look ahead
    return nullptr;
  return &schema_->pattern(schema_->at(readings_[0].pattern_node).pattern);
}

bool schema_machine::pattern_takes(const json_pattern& p, json_pattern::states& at, std::uint32_t& cp,
                                   const json_machine& before, unsigned char c) {
  using L = json_machine::lex;
  const auto whole = [&](char32_t code) {
    if (code >= 0xD800 && code <= 0xDFFF)
      return false; // half of a pair: the pattern reads code points
    auto next = p.step(at, code);
    if (next.empty())
      return false;
    at = std::move(next);
    cp = 0;
    return true;
  };
  // `bits` known, `left` bits of the character still to come, and the
  // least code point a sequence of its length may write (none overlong).
  const auto partial = [&](std::uint32_t bits, unsigned left, char32_t least = 0) {
    cp = bits;
    return p.may_take(at, std::max<char32_t>(bits << left, least), (bits << left) | ((1u << left) - 1));
  };
  switch (before.lex_) {
    case L::string:
      if (before.utf8_left_ > 0) {
        const std::uint32_t bits = (cp << 6) | (c & 0x3F);
        return before.utf8_left_ == 1 ? whole(bits) : partial(bits, 6u * (before.utf8_left_ - 1u));
      }
      if (c == '"')
        return p.accepts(at); // the caller drops the pattern's reading
      if (c == '\\')
        return p.may_take(at, 0, 0xFFFF); // what an escape can write
      if (c < 0x80)
        return whole(c);
      if ((c & 0xE0) == 0xC0)
        return partial(c & 0x1F, 6, 0x80);
      if ((c & 0xF0) == 0xE0)
        return partial(c & 0x0F, 12, 0x800);
      return partial(c & 0x07, 18, 0x10000);
    case L::escape: {
      if (c == 'u')
        return partial(0, 16);
      const auto e = escaped(c);
      return e >= 0 && whole(static_cast<char32_t>(e));
    }
    case L::unicode: {
      const std::uint32_t digit = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      const std::uint32_t bits = (cp << 4) | digit;
      return before.hex_left_ == 1 ? whole(bits) : partial(bits, 4u * (before.hex_left_ - 1u));
    }
    default:
      return true;
  }
}

void schema_machine::advance(reading r, const json_machine& before, const json_machine& after, unsigned char c,
                             std::vector<reading>& out) {
  using L = json_machine::lex;
  const auto& s = *schema_;
  if (r.literal_node != json_schema::none) {
    const auto& text = s.at(r.literal_node).literals[r.literal];
    if (static_cast<unsigned char>(text[r.literal_at]) != c)
      return;
    if (++r.literal_at == text.size()) {
      r.literal_node = json_schema::none;
      r.number_closed = after.lex_ == L::number;
    }
    // (an item is within its array; a top-level literal is in no container)
    if (!r.frames.empty() && !r.frames.back().key.empty() && !item_byte(r, after, c))
      return;
    out.push_back(std::move(r));
    return;
  }
  auto state = before.lex_;
  if (state == L::number) {
    if (after.lex_ == L::number) { // the number goes on
      // A bounded number other than an integer: no exponent, 18 digits.
      const bool bounded_decimal = !r.integer && r.bounded_node != json_schema::none;
      if (r.number_closed || ((r.integer || bounded_decimal) && (c == 'e' || c == 'E')) || (r.integer && c == '.'))
        return;
      const auto most_digits =
        r.integer || bounded_decimal ? schema_machine::max_integer_digits : schema_machine::max_digits;
      if (c == '.' && r.digits >= most_digits)
        return; // no digit could follow it
      if (c == '.' && bounded_decimal) {
        r.point = true;
        if (!number_reachable(s.at(r.bounded_node), r.negative, r.magnitude, r.digits, 0, true))
          return;
      }
      if (json_digit(c)) {
        const bool exponent = after.num_ == json_machine::num::exponent;
        auto& n = exponent ? r.exponent_digits : r.digits;
        if (++n > (exponent ? schema_machine::max_exponent_digits : most_digits))
          return;
        if (r.bounded_node != json_schema::none) {
          r.magnitude = r.magnitude * 10 + (c - '0');
          r.fraction += r.point ? 1 : 0;
          const auto& node = s.at(r.bounded_node);
          if (r.integer ? !reachable(node, r.negative, r.magnitude, r.digits)
                        : !number_reachable(node, r.negative, r.magnitude, r.digits, r.fraction, r.point))
            return;
        }
      }
      if (!r.frames.back().key.empty() && !item_byte(r, after, c)) // an item held unique
        return;
      out.push_back(std::move(r));
      return;
    }
    if (r.bounded_node != json_schema::none) {
      const auto& n = s.at(r.bounded_node);
      const auto value = r.negative ? -r.magnitude : r.magnitude;
      if (r.integer ? value < n.minimum || value > n.maximum || value % n.multiple != 0
                    : !number_within(n, r.negative, r.magnitude, r.fraction))
        return;
      r.bounded_node = json_schema::none;
      r.negative = false;
      r.magnitude = 0;
      r.point = false;
      r.fraction = 0;
    }
    if (!r.frames.back().key.empty() && !end_item(r))
      return; // `c` would end a number given before
    r.number_closed = false;
    r.integer = false;
    r.digits = 0;
    r.exponent_digits = 0;
    state = L::after; // `c` is the first byte after the number
  }
  const bool in_string = state == L::string || state == L::escape || state == L::unicode;
  if (!in_string && json_blank(c)) {
    out.push_back(std::move(r));
    return;
  }
  const auto close = [&](char open) {
    auto& f = r.frames.back();
    const auto& n = s.at(f.node);
    const auto required = json_schema::required_now(n, f.seen);
    if (open == '{' ? (f.seen & required) != required || f.count < n.min_names : f.count < n.min_items)
      return;
    r.frames.pop_back();
    r.items = nullptr; // (only the innermost array has any)
    out.push_back(std::move(r));
  };
  switch (state) {
  case L::value:
  case L::value_or_close:
    if (c == ']')
      return close('[');
    return begin_value(std::move(r), before, after, c, out);
  case L::key_or_close:
  case L::key:
  case L::after: {
    if (c == '}')
      return close('{');
    if (c == ']')
      return close('[');
    auto& f = r.frames.back();
    const auto& n = s.at(f.node);
    const auto depth = before.stack_.size();
    if (c == ',') {
      if (before.stack_.back() == '[' ? f.count < n.max_items && s.fits(json_schema::item(n, f.count), depth)
                                          && (!n.unique || item_can_begin(r, after))
                                      : names_left(s, n, f.seen, f.count, depth))
        out.push_back(std::move(r));
      return;
    }
    // '"': a key begins.
    f.key.clear();
    f.key_free = false;
    if (!names_left(s, n, f.seen, f.count, depth))
      return;
    f.key_free = n.properties.empty();
    r.name_at.clear();
    r.name_cp = 0;
    for (const auto& p : n.pattern_properties) // (each pattern reads the name)
      r.name_at.push_back(s.pattern(p.first).start());
    if (n.names == json_schema::none) {
      out.push_back(std::move(r));
      return;
    }
    // propertyNames: one reading of the name per string schema it may be.
    for (const auto& [a, lit] : s.alternatives(n.names)) {
      if (lit != json_schema::none || (s.at(a).types & json_schema::t_string) == 0)
        continue; // (listed names are properties; no other value is a name)
      reading u = r;
      begin_string(s, u, a);
      if (!name_spent(u, depth))
        out.push_back(std::move(u));
    }
    return;
  }
  case L::colon:
    out.push_back(std::move(r));
    return;
  case L::string:
  case L::escape:
  case L::unicode: {
    if (!before.key_) {
      // A string value: any text, but in the node's format and with as
      // many characters as it asks.
      if (string_checked(r) && !string_takes(s, r, before, c))
        return;
      if (!r.frames.back().key.empty() && !item_byte(r, after, c)) // an item held unique
        return;
      out.push_back(std::move(r));
      return;
    }
    auto& f = r.frames.back();
    const auto& n = s.at(f.node);
    const auto depth = before.stack_.size();
    // propertyNames: the name as a string of its schema.
    if (n.names != json_schema::none && string_checked(r) && !string_takes(s, r, before, c))
      return;
    const bool ends = state == L::string && c == '"';
    // patternProperties: each pattern reads the name.
    if (!ends && !r.name_at.empty() && !name_patterns_take(s, n, r, before, c))
      return;
    if (ends) { // the key ends
      if (!f.key_free) {
        for (std::size_t i = 0; i < n.properties.size(); ++i) {
          if (n.properties[i].first != f.key)
            continue;
          if (!open_name(s, n, f.seen, f.count, i, depth))
            return; // given already, or its value would nest too deep
          f.seen |= std::uint64_t{1} << i;
          ++f.count;
          f.value = n.properties[i].second;
          f.key.clear();
          r.name_at.clear();
          out.push_back(std::move(r));
          return;
        }
      }
      const auto value = other_value(s, n, r, depth);
      if (value == json_schema::none || spare_names(n, f.seen, f.count) <= 0)
        return;
      ++f.count;
      f.value = value;
      f.key.clear();
      f.key_free = false;
      r.name_at.clear();
      out.push_back(std::move(r));
      return;
    }
    if (f.key_free) {
      out.push_back(std::move(r));
      return;
    }
    f.key += static_cast<char>(c);
    bool open_prefix = false;
    bool any_prefix = false;
    for (std::size_t i = 0; i < n.properties.size(); ++i) {
      if (!n.properties[i].first.starts_with(f.key))
        continue;
      any_prefix = true;
      open_prefix |= open_name(s, n, f.seen, f.count, i, depth);
    }
    if (!open_prefix) {
      if (!other_names(s, n, f.seen, f.count, depth))
        return;
      if (!any_prefix) { // no name's: any other key is an additional property
        f.key.clear();
        f.key_free = true;
      }
    }
    // Spelled as a name given before, a name held to propertyNames must be
    // able to go on (as an additional one).
    if (n.names != json_schema::none && name_spent(r, depth))
      return;
    out.push_back(std::move(r));
    return;
  }
  case L::literal: // true, false or null
    if (!r.frames.back().key.empty() && !item_byte(r, after, c)) // an item held unique
      return;
    out.push_back(std::move(r));
    return;
  case L::done:
  case L::number:
    out.push_back(std::move(r));
    return;
  }
}

} // namespace troupe
