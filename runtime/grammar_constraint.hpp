// Output held to a context-free grammar (vLLM's guided_grammar), written in
// llama.cpp's GBNF: the whole output must be a sentence of the rule `root`.
// A byte-level recognizer, which json_vocab turns into the tokens that may
// come next, as it does for JSON and regular expressions. The output's
// characters are UTF-8 (no overlong forms, no surrogates). No CAF, no I/O.
//
// The language taken: rules `name ::= alternatives` (names of letters,
// digits, '-' and '_'; a body runs until the next `name ::=`, over lines;
// '#' comments to the end of a line); string literals "..." (on one line) and classes
// [...] / [^...] with the escapes \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH
// \UHHHHHHHH (each names a code point); '.' (any character); sequences,
// '|', groups (...), and the repeats * + ? {m} {m,} {m,n}.
//
// How it reads: llama.cpp's set of stacks. A stack is the positions in rule
// alternatives still to be read, innermost last; its top is always a
// character class (or it is empty: the output may end there). Each
// character advances the stacks whose top takes it and expands what follows
// until every top is a class again.
#pragma once

#include "runtime/utf8_reader.hpp"

#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// A compiled grammar, with an id of its own in the process (which keys the
/// token answers, as a regex's id does: never reused).
struct held_grammar {
  /// Compiles GBNF `text` (UTF-8). Throws std::invalid_argument saying what
  /// is wrong and where (a line): bad syntax, a rule used but not defined or
  /// defined twice, no rule named root, left recursion (a rule that can
  /// come back to itself before reading a character), an empty grammar, too
  /// many elements, or a start that passes the limits below.
  explicit held_grammar(std::string_view text);
  ~held_grammar();
  held_grammar(const held_grammar&) = delete;
  held_grammar& operator=(const held_grammar&) = delete;

  // -- limits ---------------------------------------------------------------------

  /// Elements in all rules once repetitions are written out (each class,
  /// rule reference, and alternative's end counts one).
  static constexpr std::size_t max_elements = 4096;
  /// The largest bound of a {m,n} repeat.
  static constexpr std::uint32_t max_repeat = 1000;
  /// Positions on one stack: a stack that would go deeper is dropped (the
  /// output may not nest further that way), as json_machine refuses
  /// nesting past its limit.
  static constexpr std::size_t max_depth = 128;
  /// Distinct stacks at once: a character after which there would be more
  /// is refused (an ambiguous grammar may thus refuse what it describes).
  static constexpr std::size_t max_stacks = 1024;
  /// Stacks visited while expanding after one character: past this, the
  /// character is refused as well (bounds the work a grammar that branches
  /// wide without reading can cause).
  static constexpr std::size_t max_work = std::size_t{1} << 16;

  // -- compiled rules -------------------------------------------------------------

  /// A set of code points, as sorted disjoint ranges (never empty, never a
  /// surrogate).
  struct range {
    char32_t lo;
    char32_t hi;
    friend auto operator<=>(const range&, const range&) = default;
  };
  /// What an element is: a character of set `arg`, a reference to rule
  /// `arg`, the end of an alternative that another follows, or the end of
  /// the rule's last one.
  enum class kind : std::uint8_t { chars, ref, alt, end };
  struct element {
    kind what;
    std::uint16_t arg;
  };
  /// Stacks, flat: each is its length then its positions (bottom first);
  /// sorted and without repeats (an empty stack, when there is one, first).
  using stacks = std::vector<std::uint16_t>;

  std::vector<element> elements;                      ///< all rules, one after another
  std::vector<std::vector<std::uint16_t>> alternatives; ///< by rule: where each alternative begins
  std::vector<std::vector<range>> sets;               ///< the character sets elements name
  stacks start;                                       ///< before the first character
  std::uint64_t id;

  /// What characters did to stacks, remembered for this grammar's machines
  /// (a walk of the vocabulary asks the same few states about the same
  /// characters again and again); locked, so machines on several threads
  /// may share the grammar.
  struct memo;
  std::unique_ptr<memo> transitions;
};

/// The output read so far against the grammar.
class grammar_machine {
public:
  explicit grammar_machine(std::shared_ptr<const held_grammar> g);

  // As regex_machine's, for the grammar: a byte the output may go on with
  // (of a character that may come next; false and unchanged otherwise);
  // all bytes or none; the output so far is a sentence (whole characters);
  // a character may follow; what decides which bytes may follow (first
  // byte 0xFC, the grammar's id, the stacks, the character begun; equal
  // states have equal keys).
  bool step(unsigned char c);
  bool feed(std::string_view bytes);
  bool complete() const noexcept;
  bool extendable() const noexcept;
  std::string key() const;
  /// The last byte step() refused was refused by the limits (max_depth,
  /// max_stacks, max_work) on some way the grammar has, not by the grammar
  /// alone: a walk finds no byte to go on with only where this holds.
  bool refused_by_limits() const noexcept { return limited_; }

private:
  /// Some character in [lo, hi] may come next.
  bool may_take(char32_t lo, char32_t hi);
  /// Advances to the stacks after `cp`; false (unchanged) when none.
  bool take(char32_t cp);

  std::shared_ptr<const held_grammar> grammar_;
  held_grammar::stacks at_;
  utf8_reader utf8_;
  bool limited_ = false; ///< see refused_by_limits (not the state: not in key)
};

} // namespace troupe
