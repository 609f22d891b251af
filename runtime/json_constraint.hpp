// Output constrained to one JSON object (OpenAI's response_format
// {"type": "json_object"}): for a model's vocabulary, the tokens whose bytes
// a json_machine (messages/json_machine.hpp) may take next. The scheduler
// bans every other token at each step (gpu::step_entry::logit_adjust), so
// any backend that samples from logits keeps to it, and ends the output
// when the object closes. No CAF, no I/O.
#pragma once

#include "messages/json_machine.hpp"

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::gpu {
class tokenizer;
}

namespace troupe {

class schema_machine;
class json_pattern;
class choice_machine;
class regex_machine;
class grammar_machine;
class utf8_reader;

/// A vocabulary's tokens by their bytes, for finding those a json_machine
/// takes whole. Tokens that stand for no text (special tokens, the
/// end-of-sequence token among them) are never allowed. Keeps the last
/// answers by machine key (most states recur: inside a string, after a
/// value at one depth).
class json_vocab {
public:
  explicit json_vocab(const gpu::tokenizer& vocab, std::size_t cached_states = 64);
  ~json_vocab();
  json_vocab(const json_vocab&) = delete;
  json_vocab& operator=(const json_vocab&) = delete;

  /// The tokens `m` takes whole and the rest, each ascending.
  struct token_split {
    std::vector<std::int32_t> allowed;
    std::vector<std::int32_t> banned;
  };
  std::shared_ptr<const token_split> split(const json_machine& m);
  /// The same for a machine that holds the text to a JSON Schema.
  std::shared_ptr<const token_split> split(const schema_machine& m);
  /// The same for a machine that holds the text to a list of choices, to
  /// a regular expression, or to a grammar.
  std::shared_ptr<const token_split> split(const choice_machine& m);
  std::shared_ptr<const token_split> split(const regex_machine& m);
  std::shared_ptr<const token_split> split(const grammar_machine& m);
  /// split(m)'s allowed tokens.
  template <class Machine>
  std::shared_ptr<const std::vector<std::int32_t>> allowed(const Machine& m) {
    auto s = split(m);
    return {s, &s->allowed};
  }
  /// Token `t`'s bytes ("" for one that stands for no text or is out of
  /// range).
  std::string_view bytes(std::int32_t t) const;
  /// The special token (one that stands for no text) whose own text is
  /// `text` ("[TOOL_CALLS]"), or -1.
  std::int32_t special(std::string_view text) const;
  std::int32_t size() const noexcept { return static_cast<std::int32_t>(bytes_.size()); }

private:
  struct node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next; ///< by byte
    std::vector<std::int32_t> tokens;                          ///< ending here
  };
  using trie = std::vector<node>;
  static void insert(trie& t, std::string_view bytes, std::int32_t token);
  template <class Machine>
  static void walk(const trie& t, std::uint32_t at, const Machine& m, std::vector<std::int32_t>& out);
  /// walk() for a machine: the states met in this walk kept by their keys
  /// (which decide what may follow), each state's step by each byte taken
  /// once, so a token's bytes cost lookups, not copies.
  template <class Machine>
  struct keyed_walk;
  template <class Machine>
  static void walk_keyed(const trie& t, std::uint32_t at, keyed_walk<Machine>& w, std::uint32_t id,
                         std::vector<std::int32_t>& out);
  /// A string value's bytes under its pattern alone: the JSON recognizer,
  /// the pattern's states and the character begun.
  struct pattern_string;
  /// walk() for a schema machine `m` in a string value held to a pattern:
  /// the string's bytes step a pattern_string, kept by `w`; a byte that
  /// closes the string goes to a copy of `m` fed `prefix` (the bytes
  /// walked so far), which walks on.
  static void walk_pattern(const trie& t, std::uint32_t at, const schema_machine& m, keyed_walk<pattern_string>& w,
                           std::uint32_t id, std::string& prefix, std::vector<std::int32_t>& out);
  /// walk() for a regular expression: its NFA state sets met in this walk
  /// as ids of `w`, whose steps are found once each (a DFA made lazily
  /// for the walk's length), so a token's bytes cost lookups, not closures.
  struct regex_walk;
  static void walk_regex(const trie& t, std::uint32_t at, regex_walk& w, std::uint32_t id,
                         const utf8_reader& reader, std::vector<std::int32_t>& out);
  /// split() for a machine whose key is `k`; `in_text`: it is inside a
  /// string that plain text keeps as it is.
  template <class Machine>
  std::shared_ptr<const token_split> split(const Machine& m, std::string k, bool in_text);

  std::vector<std::string> bytes_;
  std::unordered_map<std::string, std::int32_t> specials_; ///< special_text() to token
  trie trie_;
  /// Inside a string (no character begun), most tokens are plain text that
  /// leaves the string as it was: those (ascending), and a trie of the
  /// rest, the only ones such a state needs to walk.
  std::vector<std::int32_t> plain_;
  trie unplain_;
  std::size_t cached_states_;
  std::list<std::pair<std::string, std::shared_ptr<const token_split>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> by_key_;
};

} // namespace troupe
