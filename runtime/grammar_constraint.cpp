#include "runtime/grammar_constraint.hpp"

#include "messages/json_machine.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace troupe {
namespace {

using kind = held_grammar::kind;
using element = held_grammar::element;
using range = held_grammar::range;

constexpr char32_t max_char = 0x10FFFF;
constexpr std::size_t max_nesting = 100; ///< groups inside groups (the parser recurses)
constexpr std::uint32_t unbounded = std::numeric_limits<std::uint32_t>::max();

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool is_surrogate(char32_t c) noexcept { return c >= 0xD800 && c <= 0xDFFF; }

bool contains(const std::vector<range>& set, char32_t lo, char32_t hi) {
  // The first range that ends at or past lo: does it begin by hi?
  const auto it = std::lower_bound(set.begin(), set.end(), lo, [](const range& r, char32_t c) { return r.hi < c; });
  return it != set.end() && it->lo <= hi;
}

/// Sorted, merged, complemented where `negated`, surrogates taken out.
std::vector<range> normalize(std::vector<range> rs, bool negated) {
  std::sort(rs.begin(), rs.end());
  std::vector<range> merged;
  for (const auto& r : rs) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<range> rest;
    char32_t next = 0;
    for (const auto& r : merged) {
      if (r.lo > next)
        rest.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= max_char)
      rest.push_back({next, max_char});
    merged = std::move(rest);
  }
  std::vector<range> out;
  for (const auto& r : merged) {
    if (r.lo < 0xD800)
      out.push_back({r.lo, std::min<char32_t>(r.hi, 0xD7FF)});
    if (r.hi > 0xDFFF)
      out.push_back({std::max<char32_t>(r.lo, 0xE000), r.hi});
  }
  return out;
}

// -- the compiler --------------------------------------------------------------------

/// GBNF text to held_grammar's rules. Repeats become helper rules (as
/// llama.cpp writes them): S{m,n} is S m times and then n-m nested
/// optional copies; S{m,} is S m times and then a loop r ::= S r | "".
class compiler {
public:
  explicit compiler(std::string_view text) : text_(text) {}
  void run(held_grammar& g);

private:
  struct rule {
    std::string name;                 ///< as written ("" for a helper)
    std::size_t owner = 0;            ///< the written rule a helper comes from (itself if written)
    std::vector<element> body;        ///< alternatives, each ended by alt, the last by end
    bool defined = false;
    std::size_t line = 0;             ///< where it (or its owner) is defined
    std::size_t used_at = 0;          ///< its first reference, for one never defined
    bool loop = false;                ///< a repeat's loop: its reference to itself reads S first
  };

  [[noreturn]] void fail_at(std::size_t pos, const std::string& what) const;
  [[noreturn]] void too_many() const;
  std::size_t line_of(std::size_t pos) const;
  std::string describe(std::size_t pos) const;
  bool at_end() const noexcept { return pos_ >= text_.size(); }
  void skip_space();
  std::string_view name();
  bool at_definition() const { return text_.substr(pos_, 3) == "::="; }

  void grammar();
  std::vector<element> alternatives(std::size_t nesting);
  void sequence(std::vector<element>& out, std::size_t nesting);
  void literal(std::vector<element>& out);
  element char_class();
  char32_t character();
  char32_t escape();
  std::pair<std::uint32_t, std::uint32_t> bounds();
  std::uint32_t number();
  void repeat(std::vector<element>& out, std::size_t from, std::uint32_t m, std::uint32_t n);

  element chars(std::vector<range> set);
  std::uint16_t rule_named(std::string_view n, std::size_t at);
  std::uint16_t helper();
  void set_body(std::uint16_t r, std::vector<element> body);
  void check_left_recursion(const held_grammar& g) const;

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<rule> rules_;
  std::unordered_map<std::string, std::uint16_t> by_name_;
  std::size_t owner_ = 0;   ///< the written rule being read
  std::size_t total_ = 0;   ///< elements in the bodies set so far
  std::vector<std::vector<range>> sets_;
  std::map<std::vector<range>, std::uint16_t> set_ids_;
};

std::size_t compiler::line_of(std::size_t pos) const {
  const auto upto = text_.substr(0, std::min(pos, text_.size()));
  return 1 + static_cast<std::size_t>(std::count(upto.begin(), upto.end(), '\n'));
}

void compiler::fail_at(std::size_t pos, const std::string& what) const {
  throw std::invalid_argument("grammar line " + std::to_string(line_of(pos)) + ": " + what);
}

void compiler::too_many() const {
  const auto& r = rules_[owner_];
  throw std::invalid_argument("grammar line " + std::to_string(r.line) + ": the grammar has more than " +
                              std::to_string(held_grammar::max_elements) +
                              " elements once repeats are written out (at rule '" + r.name + "')");
}

std::string compiler::describe(std::size_t pos) const {
  if (pos >= text_.size())
    return "the end of the text";
  const auto c = static_cast<unsigned char>(text_[pos]);
  if (c >= 0x20 && c < 0x7F)
    return std::string("'") + static_cast<char>(c) + "'";
  return "byte " + std::to_string(c);
}

void compiler::skip_space() {
  while (!at_end()) {
    const char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      ++pos_;
    } else if (c == '#') {
      while (!at_end() && text_[pos_] != '\n')
        ++pos_;
    } else {
      break;
    }
  }
}

std::string_view compiler::name() {
  const auto from = pos_;
  while (!at_end() && name_char(text_[pos_]))
    ++pos_;
  return text_.substr(from, pos_ - from);
}

element compiler::chars(std::vector<range> set) {
  if (const auto it = set_ids_.find(set); it != set_ids_.end())
    return {kind::chars, it->second};
  if (sets_.size() >= held_grammar::max_elements)
    too_many();
  const auto id = static_cast<std::uint16_t>(sets_.size());
  set_ids_.emplace(set, id);
  sets_.push_back(std::move(set));
  return {kind::chars, id};
}

std::uint16_t compiler::rule_named(std::string_view n, std::size_t at) {
  const std::string key(n);
  if (const auto it = by_name_.find(key); it != by_name_.end())
    return it->second;
  if (rules_.size() >= held_grammar::max_elements)
    too_many();
  const auto r = static_cast<std::uint16_t>(rules_.size());
  rule fresh;
  fresh.name = key;
  fresh.owner = r;
  fresh.used_at = at;
  rules_.push_back(std::move(fresh));
  by_name_.emplace(key, r);
  return r;
}

std::uint16_t compiler::helper() {
  if (rules_.size() >= held_grammar::max_elements)
    too_many();
  const auto r = static_cast<std::uint16_t>(rules_.size());
  rule fresh;
  fresh.owner = owner_;
  fresh.defined = true;
  fresh.line = rules_[owner_].line;
  rules_.push_back(std::move(fresh));
  return r;
}

void compiler::set_body(std::uint16_t r, std::vector<element> body) {
  total_ += body.size();
  if (total_ > held_grammar::max_elements)
    too_many();
  rules_[r].body = std::move(body);
}

// -- syntax ---------------------------------------------------------------------------

void compiler::grammar() {
  skip_space();
  if (at_end())
    throw std::invalid_argument("the grammar is empty: it has no rules");
  while (!at_end()) {
    const auto at = pos_;
    const auto n = name();
    if (n.empty())
      fail_at(at, "expected a rule name, found " + describe(at));
    skip_space();
    if (!at_definition())
      fail_at(pos_, "expected '::=' after the rule name '" + std::string(n) + "', found " + describe(pos_));
    pos_ += 3;
    const auto r = rule_named(n, at);
    if (rules_[r].defined)
      fail_at(at, "rule '" + std::string(n) + "' is defined twice (first on line " +
                      std::to_string(rules_[r].line) + ")");
    rules_[r].defined = true;
    rules_[r].line = line_of(at);
    owner_ = r;
    auto body = alternatives(0);
    set_body(r, std::move(body));
    if (!at_end() && text_[pos_] == ')')
      fail_at(pos_, "a ')' that closes no '('");
  }
}

std::vector<element> compiler::alternatives(std::size_t nesting) {
  std::vector<element> out;
  for (;;) {
    sequence(out, nesting);
    if (at_end() || text_[pos_] != '|')
      break;
    ++pos_;
    out.push_back({kind::alt, 0});
  }
  out.push_back({kind::end, 0});
  return out;
}

void compiler::sequence(std::vector<element>& out, std::size_t nesting) {
  constexpr auto none = std::numeric_limits<std::size_t>::max();
  std::size_t last = none; // where the last symbol's elements begin
  for (;;) {
    skip_space();
    if (at_end())
      return;
    const auto at = pos_;
    const char c = text_[pos_];
    if (c == '|' || c == ')')
      return;
    if (c == '"') {
      last = out.size();
      literal(out);
    } else if (c == '[') {
      last = out.size();
      out.push_back(char_class());
    } else if (c == '.') {
      ++pos_;
      last = out.size();
      out.push_back(chars({{0, 0xD7FF}, {0xE000, max_char}}));
    } else if (c == '(') {
      if (nesting >= max_nesting)
        fail_at(at, "groups nested more than " + std::to_string(max_nesting) + " deep");
      ++pos_;
      auto body = alternatives(nesting + 1);
      if (at_end() || text_[pos_] != ')')
        fail_at(pos_, "expected ')' to close the '(' of line " + std::to_string(line_of(at)) + ", found " +
                          describe(pos_));
      ++pos_;
      const auto g = helper();
      set_body(g, std::move(body));
      last = out.size();
      out.push_back({kind::ref, g});
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last == none)
        fail_at(at, std::string("'") + c + "' repeats nothing");
      auto [m, n] = bounds();
      // Operators stacked on one symbol ("x?*", "x++") say what one of ?, *
      // and + says; written out one by one, each would multiply the ways
      // to read a text.
      for (;;) {
        const bool plain = (m == 0 && n == 1) || (m <= 1 && n == unbounded);
        const auto before = pos_;
        skip_space();
        if (!plain || at_end() || (text_[pos_] != '*' && text_[pos_] != '+' && text_[pos_] != '?')) {
          pos_ = before;
          break;
        }
        const auto [m2, n2] = bounds();
        m = m == 1 && m2 == 1 ? 1 : 0;
        n = n == 1 && n2 == 1 ? 1 : unbounded;
      }
      repeat(out, last, m, n);
      last = out.size() == last ? none : last;
    } else if (name_char(c)) {
      const auto n = name();
      const auto after = pos_;
      skip_space();
      if (at_definition()) { // the next rule begins
        pos_ = at;
        return;
      }
      pos_ = after;
      last = out.size();
      out.push_back({kind::ref, rule_named(n, at)});
    } else {
      fail_at(at, "unexpected " + describe(at));
    }
  }
}

void compiler::literal(std::vector<element>& out) {
  const auto at = pos_++;
  for (;;) {
    if (at_end() || text_[pos_] == '\n')
      fail_at(at, "a string literal that does not close on its line");
    if (text_[pos_] == '"') {
      ++pos_;
      return;
    }
    const auto cp = character();
    out.push_back(chars({{cp, cp}}));
  }
}

element compiler::char_class() {
  const auto at = pos_++;
  bool negated = false;
  if (!at_end() && text_[pos_] == '^') {
    negated = true;
    ++pos_;
  }
  std::vector<range> rs;
  for (;;) {
    if (at_end())
      fail_at(at, "a character class that is never closed");
    if (text_[pos_] == ']') {
      ++pos_;
      break;
    }
    const auto lo = character();
    auto hi = lo;
    if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
      ++pos_;
      hi = character();
      if (hi < lo)
        fail_at(at, "a class range that runs backwards");
    }
    rs.push_back({lo, hi});
  }
  auto set = normalize(std::move(rs), negated);
  if (set.empty())
    fail_at(at, "a character class no character can match");
  return chars(std::move(set));
}

char32_t compiler::character() {
  const auto at = pos_;
  const auto c = static_cast<unsigned char>(text_[pos_]);
  if (c == '\\')
    return escape();
  // One UTF-8 character of the grammar's text (RFC 3629).
  std::size_t n = 0;
  char32_t cp = 0;
  if (c < 0x80)
    n = 1, cp = c;
  else if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1Fu;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0Fu;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07u;
  else
    fail_at(at, "the grammar is not UTF-8 (" + describe(at) + ")");
  for (std::size_t k = 1; k < n; ++k) {
    if (pos_ + k >= text_.size() || (static_cast<unsigned char>(text_[pos_ + k]) & 0xC0u) != 0x80)
      fail_at(at, "the grammar is not UTF-8 (a character cut short)");
    cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + k]) & 0x3Fu);
  }
  const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > max_char || is_surrogate(cp))
    fail_at(at, "the grammar is not UTF-8 (an overlong form or a surrogate)");
  pos_ += n;
  return cp;
}

char32_t compiler::escape() {
  const auto at = pos_++;
  if (at_end())
    fail_at(at, "a '\\' at the end of the text");
  const char e = text_[pos_++];
  std::size_t digits = 0;
  switch (e) {
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return static_cast<char32_t>(e);
  case 'x': digits = 2; break;
  case 'u': digits = 4; break;
  case 'U': digits = 8; break;
  default: fail_at(at, std::string("an unknown escape '\\") + e + "'");
  }
  std::uint64_t cp = 0;
  for (std::size_t k = 0; k < digits; ++k, ++pos_) {
    const char h = at_end() ? '\0' : text_[pos_];
    const int v = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
    if (v < 0)
      fail_at(at, std::string("'\\") + e + "' takes " + std::to_string(digits) + " hex digits");
    cp = cp * 16 + static_cast<std::uint64_t>(v);
  }
  if (cp > max_char || is_surrogate(static_cast<char32_t>(cp)))
    fail_at(at, "an escape that names no Unicode character (over U+10FFFF, or a surrogate)");
  return static_cast<char32_t>(cp);
}

std::uint32_t compiler::number() {
  const auto at = pos_;
  std::uint32_t v = 0;
  while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    v = v * 10 + static_cast<std::uint32_t>(text_[pos_++] - '0');
    if (v > held_grammar::max_repeat)
      fail_at(at, "a repeat bound over " + std::to_string(held_grammar::max_repeat));
  }
  if (pos_ == at)
    fail_at(at, "expected a number in a repeat's {...}, found " + describe(at));
  return v;
}

std::pair<std::uint32_t, std::uint32_t> compiler::bounds() {
  const auto at = pos_;
  switch (text_[pos_++]) {
  case '*': return {0, unbounded};
  case '+': return {1, unbounded};
  case '?': return {0, 1};
  default: break;
  }
  skip_space();
  const auto m = number();
  auto n = m;
  skip_space();
  if (!at_end() && text_[pos_] == ',') {
    ++pos_;
    skip_space();
    n = !at_end() && text_[pos_] >= '0' && text_[pos_] <= '9' ? number() : unbounded;
    skip_space();
  }
  if (at_end() || text_[pos_] != '}')
    fail_at(at, "expected '}' to close a repeat's '{', found " + describe(pos_));
  ++pos_;
  if (n < m)
    fail_at(at, "a repeat {" + std::to_string(m) + "," + std::to_string(n) + "} whose least is over its most");
  return {m, n};
}

void compiler::repeat(std::vector<element>& out, std::size_t from, std::uint32_t m, std::uint32_t n) {
  const std::vector<element> s(out.begin() + static_cast<std::ptrdiff_t>(from), out.end());
  out.resize(from);
  if (s.empty())
    return; // repeating nothing is nothing
  // At least the copies of S go into the rules: refuse a blow-up early.
  const std::size_t copies = n == unbounded ? std::size_t{m} + 1 : std::size_t{n};
  if (total_ + copies * s.size() > held_grammar::max_elements)
    too_many();
  const auto body = [&](std::size_t times, std::optional<std::uint16_t> then, bool or_nothing) {
    std::vector<element> b;
    for (std::size_t k = 0; k < times; ++k)
      b.insert(b.end(), s.begin(), s.end());
    if (then)
      b.push_back({kind::ref, *then});
    if (or_nothing)
      b.push_back({kind::alt, 0});
    b.push_back({kind::end, 0});
    return b;
  };
  std::optional<std::uint16_t> tail; // what may follow the m copies
  if (n == unbounded) {
    const auto r = helper();
    rules_[r].loop = true;
    set_body(r, body(1, r, true)); // r ::= S r | ""
    tail = r;
  } else {
    for (auto k = n - m; k > 0; --k) { // o ::= S o' | ""
      const auto o = helper();
      set_body(o, body(1, tail, true));
      tail = o;
    }
  }
  if (m == 0) {
    if (tail)
      out.push_back({kind::ref, *tail});
    return;
  }
  const auto h = helper();
  set_body(h, body(m, tail, false));
  out.push_back({kind::ref, h});
}

// -- checks ----------------------------------------------------------------------------

void compiler::check_left_recursion(const held_grammar& g) const {
  const auto rules = g.alternatives.size();
  // Rules that can match nothing, to a fixed point.
  std::vector<char> nullable(rules, 0);
  const auto reads_nothing = [&](std::uint16_t p) { // from p to its alternative's end
    for (;; ++p) {
      const auto& e = g.elements[p];
      if (e.what == kind::alt || e.what == kind::end)
        return true;
      if (e.what == kind::chars || !nullable[e.arg])
        return false;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < rules; ++r)
      if (!nullable[r] && std::any_of(g.alternatives[r].begin(), g.alternatives[r].end(), reads_nothing))
        nullable[r] = 1, changed = true;
  }
  // r -> s: r may read s before any character. A repeat's loop reaching
  // itself is no recursion that grows: the stacks come back alike, and
  // expanding never visits a stack twice.
  std::vector<std::vector<std::uint16_t>> edges(rules);
  for (std::size_t r = 0; r < rules; ++r)
    for (auto p : g.alternatives[r])
      for (; g.elements[p].what == kind::ref; ++p) {
        const auto s = g.elements[p].arg;
        if (!(rules_[r].loop && s == r))
          edges[r].push_back(s);
        if (!nullable[s])
          break;
      }
  // A cycle among those, by depth-first search (0 new, 1 on the path, 2 done).
  std::vector<char> mark(rules, 0);
  for (std::size_t root = 0; root < rules; ++root) {
    if (mark[root] != 0)
      continue;
    std::vector<std::pair<std::size_t, std::size_t>> path{{root, 0}};
    mark[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == edges[r].size()) {
        mark[r] = 2;
        path.pop_back();
        continue;
      }
      const auto s = edges[r][next++];
      if (mark[s] == 1) {
        const auto& written = rules_[rules_[s].owner];
        throw std::invalid_argument("grammar line " + std::to_string(written.line) + ": left recursion: rule '" +
                                    written.name + "' can come back to itself before reading a character");
      }
      if (mark[s] == 0) {
        mark[s] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
}

// -- expansion -------------------------------------------------------------------------

struct stack_hash {
  std::size_t operator()(const std::vector<std::uint16_t>& s) const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    for (const auto p : s)
      h = (h ^ p) * 1099511628211ull;
    return static_cast<std::size_t>(h ^ s.size());
  }
};

/// The stacks whose tops are classes, from stacks whose tops may be
/// anything: an alternative's end returns to the stack below; a rule
/// reference is replaced by where to return after it (unless that is an
/// end: a tail reference needs none) and then by each of its
/// alternatives. Every stack is visited once.
class expansion {
public:
  explicit expansion(const held_grammar& g) : g_(g) {}
  void add(std::vector<std::uint16_t> s) { waiting_.push_back(std::move(s)); }
  /// The stacks, flat and sorted; none when the limits are passed.
  std::optional<held_grammar::stacks> run();
  /// A way was dropped for passing the depth limit.
  bool dropped() const noexcept { return dropped_; }

private:
  bool dropped_ = false;
  const held_grammar& g_;
  std::vector<std::vector<std::uint16_t>> waiting_; ///< stacks still to expand
  std::vector<std::vector<std::uint16_t>> out_;
  std::unordered_set<std::vector<std::uint16_t>, stack_hash> seen_;
};

std::optional<held_grammar::stacks> expansion::run() {
  while (!waiting_.empty()) {
    auto s = std::move(waiting_.back());
    waiting_.pop_back();
    for (;;) {
      if (!seen_.insert(s).second)
        break;
      if (seen_.size() > held_grammar::max_work)
        return std::nullopt;
      const auto& e = g_.elements[s.empty() ? 0 : s.back()];
      if (s.empty() || e.what == kind::chars) {
        out_.push_back(std::move(s));
        if (out_.size() > held_grammar::max_stacks)
          return std::nullopt;
        break;
      }
      const auto p = s.back();
      s.pop_back();
      if (e.what == kind::alt || e.what == kind::end)
        continue;
      const auto then = g_.elements[p + 1u].what;
      if (then != kind::alt && then != kind::end)
        s.push_back(static_cast<std::uint16_t>(p + 1u));
      if (s.size() + 1 > held_grammar::max_depth) {
        dropped_ = true;
        break; // deeper than the limit: this way is dropped
      }
      for (const auto a : g_.alternatives[e.arg]) {
        auto t = s;
        t.push_back(a);
        waiting_.push_back(std::move(t));
      }
      break;
    }
  }
  std::sort(out_.begin(), out_.end());
  held_grammar::stacks flat;
  for (const auto& s : out_) {
    flat.push_back(static_cast<std::uint16_t>(s.size()));
    flat.insert(flat.end(), s.begin(), s.end());
  }
  return flat;
}

/// Calls f(stack's positions) for each stack of `at`.
template <class F>
void each_stack(const held_grammar::stacks& at, F f) {
  for (std::size_t i = 0; i < at.size(); i += 1u + at[i])
    f(at.data() + i + 1, std::size_t{at[i]});
}

/// The stack `s` (of `n` positions) once its top's character is read.
std::vector<std::uint16_t> advanced(const std::uint16_t* s, std::size_t n) {
  std::vector<std::uint16_t> t(s, s + n);
  ++t.back();
  return t;
}

} // namespace

void compiler::run(held_grammar& g) {
  grammar();
  const auto root = by_name_.find("root");
  if (root == by_name_.end() || !rules_[root->second].defined)
    throw std::invalid_argument("the grammar has no rule named root");
  for (const auto& r : rules_)
    if (!r.defined)
      fail_at(r.used_at, "rule '" + r.name + "' is used but never defined");
  for (auto& r : rules_) {
    std::vector<std::uint16_t> starts{static_cast<std::uint16_t>(g.elements.size())};
    for (const auto& e : r.body) {
      g.elements.push_back(e);
      if (e.what == kind::alt)
        starts.push_back(static_cast<std::uint16_t>(g.elements.size()));
    }
    g.alternatives.push_back(std::move(starts));
  }
  g.sets = std::move(sets_);
  check_left_recursion(g);
  expansion x(g);
  for (const auto a : g.alternatives[root->second])
    x.add({a});
  auto start = x.run();
  if (!start)
    throw std::invalid_argument("the grammar's start passes the limits of " + std::to_string(held_grammar::max_stacks) +
                                " stacks or " + std::to_string(held_grammar::max_work) + " expansion steps");
  if (start->empty())
    throw std::invalid_argument("rule root cannot begin within " + std::to_string(held_grammar::max_depth) +
                                " nested rules");
  g.start = std::move(*start);
}

held_grammar::held_grammar(std::string_view text) : transitions(std::make_unique<memo>()) {
  compiler(text).run(*this);
  static std::atomic<std::uint64_t> next{1};
  id = next.fetch_add(1, std::memory_order_relaxed);
}

// -- grammar_machine ------------------------------------------------------------------

grammar_machine::grammar_machine(std::shared_ptr<const held_grammar> g)
  : grammar_(std::move(g)), at_(grammar_->start) {}

bool grammar_machine::may_take(char32_t lo, char32_t hi) {
  // A stack whose top may take such a character, and that does not die
  // expanding after it (past the depth limit).
  const auto& g = *grammar_;
  bool may = false;
  each_stack(at_, [&](const std::uint16_t* s, std::size_t n) {
    if (may || n == 0 || !contains(g.sets[g.elements[s[n - 1]].arg], lo, hi))
      return;
    expansion x(g);
    x.add(advanced(s, n));
    const auto after = x.run();
    may = after && !after->empty();
    limited_ = limited_ || !after || x.dropped();
  });
  return may;
}

namespace {

/// What a character does to a grammar's stacks, as take() works it out:
/// the stacks after it, or none (refused, and whether by the limits).
struct transition {
  std::optional<held_grammar::stacks> next;
  bool limited = false;
};

/// Stacks and a character asked about, owning the stacks or viewing them
/// (a lookup copies nothing).
struct transition_key {
  char32_t cp = 0;
  std::vector<std::uint16_t> owned;
  std::span<const std::uint16_t> at;
};

struct transition_hash {
  using is_transparent = void;
  std::size_t operator()(const transition_key& k) const noexcept {
    std::uint64_t h = 1469598103934665603ull ^ k.cp;
    for (const auto p : k.at)
      h = (h ^ p) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};

struct transition_equal {
  using is_transparent = void;
  bool operator()(const transition_key& a, const transition_key& b) const noexcept {
    return a.cp == b.cp && std::equal(a.at.begin(), a.at.end(), b.at.begin(), b.at.end());
  }
};

} // namespace

/// The transitions worked out last, dropped whole when they pass `most`.
struct held_grammar::memo {
  static constexpr std::size_t most = 4096;
  std::mutex lock;
  std::unordered_map<transition_key, transition, transition_hash, transition_equal> known;
};

held_grammar::~held_grammar() = default;

bool grammar_machine::take(char32_t cp) {
  const auto work_out = [&] {
    const auto& g = *grammar_;
    expansion x(g);
    each_stack(at_, [&](const std::uint16_t* s, std::size_t n) {
      if (n > 0 && contains(g.sets[g.elements[s[n - 1]].arg], cp, cp))
        x.add(advanced(s, n));
    });
    auto next = x.run();
    transition t;
    if (!next || next->empty())
      t.limited = !next || x.dropped();
    else
      t.next = std::move(next);
    return t;
  };
  // Few stacks, short ones (the common case): remembered. Many, where
  // hashing and copying them would cost what working them out does: not.
  constexpr std::size_t remembered_positions = 256;
  std::optional<transition> known;
  if (at_.size() > remembered_positions) {
    known = work_out();
  } else {
    auto& memo = *grammar_->transitions;
    {
      const std::lock_guard hold(memo.lock);
      if (const auto it = memo.known.find(transition_key{cp, {}, at_}); it != memo.known.end())
        known = it->second;
    }
    if (!known) {
      known = work_out();
      const std::lock_guard hold(memo.lock);
      if (memo.known.size() >= held_grammar::memo::most)
        memo.known = {}; // (clear() would keep the buckets, which the next clears walk)
      transition_key k{cp, at_, {}};
      k.at = k.owned;
      memo.known.emplace(std::move(k), *known);
    }
  }
  if (!known->next) {
    limited_ = known->limited;
    return false;
  }
  at_ = std::move(*known->next);
  return true;
}

bool grammar_machine::step(unsigned char c) {
  limited_ = false;
  return utf8_.step(
    c, [&](char32_t lo, char32_t hi) { return may_take(lo, hi); }, [&](char32_t cp) { return take(cp); });
}

bool grammar_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](grammar_machine& m, unsigned char c) { return m.step(c); });
}

bool grammar_machine::complete() const noexcept {
  // An empty stack sorts first.
  return utf8_.between() && !at_.empty() && at_[0] == 0;
}

bool grammar_machine::extendable() const noexcept {
  // Every stack but the empty one reads a character next.
  return !utf8_.between() || at_.size() > (complete() ? 1u : 0u);
}

std::string grammar_machine::key() const {
  std::string k = "\xfc";
  k.append(reinterpret_cast<const char*>(&grammar_->id), sizeof grammar_->id);
  k.append(reinterpret_cast<const char*>(at_.data()), at_.size() * sizeof(at_[0]));
  utf8_.append_key(k);
  return k;
}

} // namespace troupe
