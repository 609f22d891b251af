// A JSON Schema "pattern": an ECMA-262 regular expression, searched for in a
// string value (it matches anywhere unless ^ and $ anchor it), compiled into
// an NFA over code points that schema_machine steps one character at a time.
// No CAF, no I/O.
//
// The syntax taken: literals; . (any character but a line terminator);
// classes [...] and [^...] with ranges; the escapes \d \D \w \W \s \S
// \t \n \v \f \r \0 \xHH \uXXXX and those of syntax characters; groups (...),
// (?:...) and (?<name>...); alternation |; the quantifiers * + ? {n} {n,}
// {n,m} (lazy or not: the same strings match); ^ at the start and $ at the
// end of the pattern or of a top-level alternative. Refused, by name:
// back-references, lookaround, word boundaries, \p{...}, anchors elsewhere,
// and a class no character can match.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

class json_pattern {
public:
  /// NFA states at most (a bounded repeat copies what it repeats).
  static constexpr std::size_t max_states = 4096;
  /// The largest bound of a {n,m} repeat.
  static constexpr std::uint32_t max_repeat = 1000;

  /// How a text must match: anywhere in it unless ^ and $ anchor the
  /// pattern (JSON Schema's), or the whole text (as each top-level
  /// alternative were anchored at both ends: vLLM's guided_regex).
  enum class match : std::uint8_t { search, whole };

  /// Compiles `pattern` (UTF-8). Throws std::invalid_argument saying what
  /// is wrong or not supported, and where (a character offset).
  explicit json_pattern(std::string_view pattern, match how = match::search);

  /// Where a string's reading stands: the NFA states it may be in that read
  /// a character next, and the accepting one if the text so far matches
  /// (sorted). Never empty while the string can still match.
  using states = std::vector<std::uint16_t>;

  /// Before the string's first character.
  const states& start() const noexcept { return start_; }
  /// After `cp`; empty: the string cannot go on with it.
  states step(const states& at, char32_t cp) const;
  /// The string may end here.
  bool accepts(const states& at) const noexcept;
  /// Some character in [lo, hi], UTF-16 surrogates aside, may come next
  /// (for a character whose first bytes or hex digits are written).
  bool may_take(const states& at, char32_t lo, char32_t hi) const;
  /// Some `k` more characters, `least` <= k <= `most`, lead from `at` to
  /// a match (past 4,096 characters: taken as so, where any go on).
  bool reaches_accept(const states& at, std::uint32_t least, std::uint32_t most) const;

private:
  struct range {
    char32_t lo;
    char32_t hi;
  };
  struct node {
    std::vector<range> ranges;     ///< the character edge (empty: none)
    std::uint32_t target = 0;      ///< where it leads
    std::vector<std::uint32_t> eps; ///< edges that read nothing
  };
  class parser;

  /// The states `from` leads to without reading (consumes `from`).
  states closure(std::vector<std::uint32_t>& from) const;

  std::vector<node> nodes_;
  std::uint32_t accept_ = 0;
  states start_;
};

} // namespace troupe
