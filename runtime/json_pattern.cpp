#include "runtime/json_pattern.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe {

namespace {

using range_list = std::vector<std::pair<char32_t, char32_t>>;

constexpr char32_t max_cp = 0x10FFFF;

/// Sorted, merged.
range_list normalized(range_list r) {
  std::sort(r.begin(), r.end());
  range_list out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

range_list complement(const range_list& r) {
  range_list out;
  char32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next)
      out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= max_cp)
    out.emplace_back(next, max_cp);
  return out;
}

const range_list& digits() {
  static const range_list r{{'0', '9'}};
  return r;
}
const range_list& word() {
  static const range_list r{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
/// ECMA-262's WhiteSpace and LineTerminator.
const range_list& space() {
  static const range_list r = normalized({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                          {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                          {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
  return r;
}
/// `.`: anything but a line terminator.
const range_list& dot() {
  static const range_list r = complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});
  return r;
}

/// Some character of `r` can be written in a JSON string (any but a
/// UTF-16 surrogate).
bool writable(const range_list& r) {
  return std::any_of(r.begin(), r.end(), [](const auto& x) { return x.first < 0xD800 || x.second > 0xDFFF; });
}

/// The pattern as a tree.
struct term {
  enum class kind : std::uint8_t { chars, concat, alt, repeat };
  kind k = kind::concat;
  range_list ranges{};       ///< chars
  std::vector<term> kids{};  ///< concat, alt; repeat: one
  std::uint32_t min = 0;     ///< repeat
  std::uint32_t max = 0;     ///< repeat; unbounded: none
  static constexpr std::uint32_t none = 0xFFFFFFFFu;
};

std::u32string decoded(std::string_view s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      throw std::invalid_argument("is not UTF-8");
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80)
        throw std::invalid_argument("is not UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

} // namespace

class json_pattern::parser {
public:
  explicit parser(std::string_view pattern) : p_(decoded(pattern)) {}

  /// The pattern, each top-level alternative wrapped in "any text" where
  /// it is not anchored (`whole`: as if each were).
  term parse(bool whole) {
    term top{term::kind::alt};
    for (;;) {
      bool anchored_start = false;
      if (more() && peek() == '^') {
        anchored_start = true;
        ++at_;
      }
      term body = concat(true);
      bool anchored_end = false;
      if (more() && peek() == '$') {
        anchored_end = true;
        ++at_;
        if (more() && peek() != '|')
          fail("$ only at the end of the pattern or of an alternative");
      }
      term wrapped{term::kind::concat};
      const term any{term::kind::repeat, {}, {term{term::kind::chars, {{0, max_cp}}}}, 0, term::none};
      if (!anchored_start && !whole)
        wrapped.kids.push_back(any);
      wrapped.kids.push_back(std::move(body));
      if (!anchored_end && !whole)
        wrapped.kids.push_back(any);
      top.kids.push_back(std::move(wrapped));
      if (!more())
        return top;
      if (peek() == ')')
        fail("an unmatched )");
      ++at_; // '|'
    }
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(what + " (at character " + std::to_string(at_) + ")");
  }
  bool more() const { return at_ < p_.size(); }
  char32_t peek() const { return p_[at_]; }
  char32_t next() {
    if (!more())
      fail("ends too soon");
    return p_[at_++];
  }

  term alternation() {
    term t{term::kind::alt};
    t.kids.push_back(concat(false));
    while (more() && peek() == '|') {
      ++at_;
      t.kids.push_back(concat(false));
    }
    return t.kids.size() == 1 ? std::move(t.kids.front()) : t;
  }

  term concat(bool top) {
    term t{term::kind::concat};
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        if (top)
          return t; // the caller checks that the alternative ends here
        fail("$ only at the end of the pattern or of a top-level alternative");
      }
      t.kids.push_back(repeated());
    }
    return t;
  }

  std::uint32_t number() {
    std::uint64_t v = 0;
    const auto from = at_;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (next() - '0');
      if (v > max_repeat)
        fail("a repeat bound over " + std::to_string(max_repeat));
    }
    if (at_ == from)
      fail("a { that is not a repeat bound {n}, {n,} or {n,m}");
    return static_cast<std::uint32_t>(v);
  }

  term repeated() {
    term a = atom();
    for (bool quantified = false; more();) {
      std::uint32_t lo = 0, hi = term::none;
      const char32_t c = peek();
      if (c == '*') {
        ++at_;
      } else if (c == '+') {
        ++at_, lo = 1;
      } else if (c == '?') {
        ++at_, hi = 1;
      } else if (c == '{' && at_ + 1 < p_.size() && p_[at_ + 1] >= '0' && p_[at_ + 1] <= '9') {
        ++at_;
        lo = number();
        hi = lo;
        if (more() && peek() == ',') {
          ++at_;
          hi = more() && peek() == '}' ? term::none : number();
        }
        if (next() != '}')
          fail("a repeat bound without its }");
        if (hi < lo)
          fail("a repeat {n,m} with m below n");
      } else {
        return a;
      }
      if (quantified)
        fail("nothing to repeat");
      quantified = true;
      if (more() && peek() == '?')
        ++at_; // lazy: the same strings match
      a = term{term::kind::repeat, {}, {std::move(a)}, lo, hi};
    }
    return a;
  }

  term chars(range_list r) {
    r = normalized(std::move(r));
    if (!writable(r))
      fail("a class no character can match");
    return term{term::kind::chars, std::move(r)};
  }

  term atom() {
    const char32_t c = next();
    switch (c) {
      case '(': {
        if (++depth_ > max_depth)
          fail("groups nested deeper than " + std::to_string(max_depth));
        if (more() && peek() == '?') {
          ++at_;
          const char32_t k = next();
          if (k == '<' && more() && peek() != '=' && peek() != '!') {
            while (next() != '>') {} // a named group: its name
          } else if (k != ':') {
            fail("lookaround (?=, (?!, (?<=, (?<!) is not supported");
          }
        }
        term inner = alternation();
        if (!more() || next() != ')')
          fail("a ( without its )");
        --depth_;
        return inner;
      }
      case '[':
        return chars(char_class());
      case '.':
        return chars(dot());
      case '\\':
        return chars(escape(false));
      case '^':
        fail("^ only at the start of the pattern or of a top-level alternative");
      case '*':
      case '+':
      case '?':
        fail("nothing to repeat");
      case ')':
        fail("an unmatched )");
      default:
        return chars({{c, c}});
    }
  }

  /// After '\': the characters it stands for.
  range_list escape(bool in_class) {
    const char32_t c = next();
    const auto hex = [&](int n) {
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const char32_t h = next();
        const int d = h >= '0' && h <= '9' ? static_cast<int>(h - '0')
                      : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
                      : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                             : -1;
        if (d < 0)
          fail("a \\x or \\u escape without its hex digits");
        v = v * 16 + static_cast<char32_t>(d);
      }
      return v;
    };
    switch (c) {
      case 'd': return digits();
      case 'D': return complement(digits());
      case 'w': return word();
      case 'W': return complement(word());
      case 's': return space();
      case 'S': return complement(space());
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'v': return {{'\v', '\v'}};
      case 'f': return {{'\f', '\f'}};
      case 'r': return {{'\r', '\r'}};
      case 'x': {
        const char32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        if (more() && peek() == '{')
          fail("\\u{...} is not supported (write \\uXXXX)");
        const char32_t v = hex(4);
        return {{v, v}};
      }
      case '0':
        if (more() && peek() >= '0' && peek() <= '9')
          fail("back-references are not supported");
        return {{0, 0}};
      case 'b':
        if (in_class)
          return {{'\b', '\b'}};
        fail("word boundaries (\\b, \\B) are not supported");
      case 'B':
        fail("word boundaries (\\b, \\B) are not supported");
      case 'p':
      case 'P':
        fail("Unicode property escapes (\\p{...}) are not supported");
      case 'k':
        fail("back-references are not supported");
      case 'c':
        fail("control escapes (\\cX) are not supported");
      default:
        if (c >= '1' && c <= '9')
          fail("back-references are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          fail(std::string("an unknown escape \\") + static_cast<char>(c));
        return {{c, c}}; // \. \* \\ \/ \- ...
    }
  }

  /// After '[': the characters of the class.
  range_list char_class() {
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++at_;
    }
    range_list r;
    for (;;) {
      if (!more())
        fail("a [ without its ]");
      if (peek() == ']') {
        ++at_;
        break;
      }
      // One item: a character, an escape, or a range of two characters.
      const auto item = [&]() -> range_list {
        const char32_t c = next();
        return c == '\\' ? escape(true) : range_list{{c, c}};
      };
      range_list first = item();
      if (more() && peek() == '-' && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        ++at_;
        range_list last = item();
        if (first.size() != 1 || last.size() != 1 || first[0].first != first[0].second ||
            last[0].first != last[0].second)
          fail("a range in a class between classes (\\d-x)");
        if (last[0].first < first[0].first)
          fail("a range in a class out of order");
        r.emplace_back(first[0].first, last[0].first);
      } else {
        r.insert(r.end(), first.begin(), first.end());
      }
    }
    return negated ? complement(r) : normalized(r);
  }

  static constexpr int max_depth = 32;
  std::u32string p_;
  std::size_t at_ = 0;
  int depth_ = 0;
};

namespace {

/// Thompson's construction of `t` between nodes `from` and `to`.
template <class Node>
void build(std::vector<Node>& nodes, const term& t, std::uint32_t from, std::uint32_t to, std::size_t limit) {
  const auto fresh = [&]() {
    if (nodes.size() >= limit)
      throw std::invalid_argument("is too large: over " + std::to_string(limit) + " states (repeat bounds count)");
    nodes.emplace_back();
    return static_cast<std::uint32_t>(nodes.size() - 1);
  };
  switch (t.k) {
    case term::kind::chars: {
      const auto x = fresh();
      for (const auto& [lo, hi] : t.ranges)
        nodes[x].ranges.push_back({lo, hi});
      nodes[x].target = to;
      nodes[from].eps.push_back(x);
      return;
    }
    case term::kind::concat: {
      auto at = from;
      for (std::size_t k = 0; k < t.kids.size(); ++k) {
        const auto next = k + 1 == t.kids.size() ? to : fresh();
        build(nodes, t.kids[k], at, next, limit);
        at = next;
      }
      if (t.kids.empty())
        nodes[from].eps.push_back(to);
      return;
    }
    case term::kind::alt:
      for (const auto& k : t.kids)
        build(nodes, k, from, to, limit);
      return;
    case term::kind::repeat: {
      const term& a = t.kids.front();
      auto at = from;
      for (std::uint32_t k = 0; k < t.min; ++k) {
        const auto next = fresh();
        build(nodes, a, at, next, limit);
        at = next;
      }
      if (t.max == term::none) {
        // a*: a loop through `s` that may leave at any turn.
        const auto s = fresh(), e = fresh();
        nodes[at].eps.push_back(s);
        build(nodes, a, s, e, limit);
        nodes[e].eps.push_back(s);
        nodes[s].eps.push_back(to);
      } else {
        // Up to max - min more, each optional.
        for (std::uint32_t k = t.min; k < t.max; ++k) {
          const auto next = fresh();
          nodes[at].eps.push_back(to);
          build(nodes, a, at, next, limit);
          at = next;
        }
        nodes[at].eps.push_back(to);
      }
      return;
    }
  }
}

} // namespace

json_pattern::json_pattern(std::string_view pattern, match how) {
  const term t = parser{pattern}.parse(how == match::whole);
  nodes_.resize(2); // 0: start, 1: accept
  accept_ = 1;
  build(nodes_, t, 0, accept_, max_states);
  std::vector<std::uint32_t> from{0};
  start_ = closure(from);
}

json_pattern::states json_pattern::closure(std::vector<std::uint32_t>& from) const {
  // Scratch kept per thread: a step allocates only the states it returns.
  thread_local std::vector<std::uint32_t> seen;
  thread_local std::uint32_t epoch = 0;
  if (seen.size() < nodes_.size())
    seen.resize(nodes_.size(), 0);
  if (++epoch == 0) {
    std::fill(seen.begin(), seen.end(), 0);
    epoch = 1;
  }
  states out;
  while (!from.empty()) {
    const auto i = from.back();
    from.pop_back();
    if (seen[i] == epoch)
      continue;
    seen[i] = epoch;
    const auto& n = nodes_[i];
    if (!n.ranges.empty() || i == accept_)
      out.push_back(static_cast<std::uint16_t>(i));
    for (const auto e : n.eps)
      if (seen[e] != epoch)
        from.push_back(e);
  }
  std::sort(out.begin(), out.end());
  return out;
}

json_pattern::states json_pattern::step(const states& at, char32_t cp) const {
  thread_local std::vector<std::uint32_t> next;
  next.clear();
  for (const auto i : at) {
    const auto& n = nodes_[i];
    for (const auto& r : n.ranges)
      if (cp >= r.lo && cp <= r.hi) {
        next.push_back(n.target);
        break;
      }
  }
  if (next.empty())
    return {};
  return closure(next);
}

bool json_pattern::accepts(const states& at) const noexcept {
  return std::binary_search(at.begin(), at.end(), static_cast<std::uint16_t>(accept_));
}

bool json_pattern::reaches_accept(const states& at, std::uint32_t least, std::uint32_t most) const {
  constexpr std::uint32_t far = 4096;
  auto s = at;
  std::vector<std::uint32_t> next;
  for (std::uint32_t k = 0; k <= most; ++k) {
    if (k >= least && accepts(s))
      return true;
    if (k == far)
      return !s.empty();
    // The states any one character leads to.
    next.clear();
    for (const auto i : s)
      if (!nodes_[i].ranges.empty())
        next.push_back(nodes_[i].target);
    if (next.empty())
      return false;
    s = closure(next);
  }
  return false;
}

bool json_pattern::may_take(const states& at, char32_t lo, char32_t hi) const {
  for (const auto i : at)
    for (const auto& r : nodes_[i].ranges) {
      const char32_t a = std::max(lo, r.lo), b = std::min(hi, r.hi);
      if (a <= b && (a < 0xD800 || b > 0xDFFF))
        return true;
    }
  return false;
}

} // namespace troupe
