// Output held to a regular expression (vLLM's guided_regex): the whole
// output must match it. A byte-level recognizer over json_pattern's NFA
// (the regular expressions JSON Schema's "pattern" takes, matched whole),
// which json_vocab turns into the tokens that may come next, as it does for
// JSON. The output's characters are UTF-8 (no overlong forms, no
// surrogates). No CAF, no I/O.
#pragma once

#include "runtime/json_pattern.hpp"
#include "runtime/utf8_reader.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace troupe {

/// A compiled expression, with an id of its own in the process (which keys
/// the token answers, as a schema's id does: never reused).
struct held_regex {
  explicit held_regex(std::string_view text);
  json_pattern pattern;
  std::uint64_t id;
};

/// The output read so far against the expression.
class regex_machine {
public:
  explicit regex_machine(std::shared_ptr<const held_regex> regex);

  // As choice_machine's, for the expression: a byte the output may go on
  // with (of a character that may come next); all bytes or none; the
  // output matches (whole characters); a character may follow; what
  // decides which bytes may follow (the expression's id, the NFA states, the
  // character begun; first byte 0xFD).
  bool step(unsigned char c);
  bool feed(std::string_view bytes);
  bool complete() const noexcept;
  bool extendable() const noexcept;
  std::string key() const;

private:
  friend class json_vocab; // walks the vocabulary from at_ and utf8_

  std::shared_ptr<const held_regex> regex_;
  json_pattern::states at_;
  utf8_reader utf8_;
};

} // namespace troupe
