// Output that is free text until a trigger string, then one JSON value held
// to a schema, then free text again (each time the trigger appears): how a
// tool call offered with tool_choice "auto" keeps its arguments to the
// function's parameters once the model opens a call ("<tool_call>") and
// leaves the model free to answer in words instead. The wire's
// json_trigger. Headed (the wire's json_trigger_head): after the trigger,
// one of several names, then a mark, then a value held to that name's
// schema (Mistral's "[TOOL_CALLS]get_weather[ARGS]{...}"). With an answer
// schema (the wire's json_answer), the output is either one value of that
// schema, and ends there, or begins with the trigger: how tools offered
// with "auto" and response_format together make the answer either calls
// or the structured reply. No CAF, no I/O.
#pragma once

#include "messages/wire.hpp"
#include "runtime/json_constraint.hpp"
#include "runtime/json_schema.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// Finds a mark in a text read byte by byte (Knuth-Morris-Pratt): how many
/// of its first bytes the text just read ends with.
class mark_matcher {
public:
  explicit mark_matcher(std::string_view mark);
  /// The mark's bytes matched after reading `c` with `matched` matched (of
  /// fewer than all).
  std::size_t next(std::size_t matched, unsigned char c) const noexcept;

private:
  std::string mark_;
  std::vector<std::size_t> border_; ///< border_[i]: the longest proper border of mark_[0, i]
};

/// One of a headed trigger's names and the schema of the value after it.
struct trigger_head {
  std::string name;
  std::shared_ptr<const json_schema> schema;
};

/// A headed trigger's names and schemas (the wire's json_trigger_head):
/// the properties of `schema_text`'s top level, by name, each
/// compiled on its own with the top level's "$defs" (or "definitions")
/// beside it, so references into those hold. Throws std::invalid_argument
/// naming the property for a schema that will not compile, and where the
/// top level has no properties, a name is empty, holds `mark`, or is
/// another's beginning followed by `mark` (which would leave the value's
/// schema unknown).
std::vector<trigger_head> trigger_heads(const std::string& schema_text, std::string_view mark,
                                        json_schema_cache& cache);

/// A trigger and the schema of the value after it, over one vocabulary: how
/// the output moves on, and in free text which tokens would take it where
/// no value can follow (a token that ends the trigger and goes on with
/// bytes the value cannot begin with).
class json_trigger {
public:
  /// Longest trigger taken (the wire's limit).
  static constexpr std::size_t max_bytes = wire::max_json_trigger_bytes;

  /// Throws std::invalid_argument for an empty trigger or one over
  /// max_bytes.
  json_trigger(json_vocab& vocab, std::string trigger, std::shared_ptr<const json_schema> schema,
               std::shared_ptr<const json_schema> answer = nullptr);
  /// Headed: after the trigger, one of `heads`' names, then `mark` (1 to
  /// max_bytes; or the special token whose own text it is), then a value
  /// of that head's schema. Throws std::invalid_argument as the other
  /// does, for a bad mark, no heads, or heads trigger_heads refuses.
  json_trigger(json_vocab& vocab, std::string trigger, std::string mark, std::vector<trigger_head> heads,
               std::shared_ptr<const json_schema> answer = nullptr);

  static constexpr std::uint32_t no_head = 0xFFFFFFFFu;

  /// Where an output is: in free text with `matched` bytes of the trigger
  /// just read (its longest end that begins the trigger), or in a value;
  /// `leading`: at the output's start, which must be the trigger (its
  /// first `matched` bytes written). Headed, between the trigger and the
  /// value: `head` is where in the names and the mark the output is (not
  /// no_head). With an answer schema: `answer` is the answer's reading
  /// while the output may still be (leading) or is (not leading) that
  /// value; `done`: the answer has closed, and nothing may follow it.
  struct state {
    std::size_t matched = 0;
    std::optional<schema_machine> value;
    bool leading = false;
    std::uint32_t head = no_head;
    std::optional<schema_machine> answer;
    bool done = false;
  };

  /// Where an output begins: in free text; `leading`, at the trigger it
  /// must begin with. With an answer schema, at the trigger or the
  /// answer's first byte (whatever `leading` says).
  state begin(bool leading) const;
  /// An answer schema was given.
  bool answers() const noexcept { return answer_ != nullptr; }

  /// Reads `bytes` from `s`: free text is searched for the trigger; a value
  /// begins right after it and free text again right after the value
  /// closes. False (s as it was) when a byte breaks the value. At the
  /// output's start with an answer schema, each byte goes to both the
  /// trigger and the answer, and the output follows whichever takes it
  /// (the trigger where both are whole: its last byte ends the answer's
  /// reading).
  bool advance(state& s, std::string_view bytes) const;
  /// Reads token `t`: its bytes, or where the trigger is a special
  /// token's own text ("[TOOL_CALLS]", which stands for no text), that
  /// token writes the whole trigger outside a value (and in a leading
  /// trigger, at its start).
  bool advance(state& s, std::int32_t t) const;
  /// The special token whose own text is the trigger, or -1.
  std::int32_t special_token() const noexcept { return special_; }
  /// Token `t` is a special token advance(state, token) reads as its
  /// text: the trigger's, or a headed trigger's mark's.
  bool reads_special(std::int32_t t) const noexcept { return t >= 0 && (t == special_ || t == mark_special_); }

  /// The tokens to ban in state `s`: in a value, those it cannot go on
  /// with (json_vocab::split); in free text or the leading trigger, those
  /// advance refuses.
  std::shared_ptr<const json_vocab::token_split> split(const state& s) const;

  const std::string& trigger() const noexcept { return trigger_; }

private:
  json_vocab& vocab_;
  std::string trigger_;
  mark_matcher match_;
  std::int32_t special_ = -1;
  std::shared_ptr<const json_schema> schema_;
  std::shared_ptr<const json_schema> answer_;
  /// Headed: the heads' bytes (name, then mark) as a tree; node 0 is
  /// where the trigger leaves the output.
  struct head_node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next; ///< by byte, sorted
    std::uint32_t ends = no_head;     ///< the head whose whole bytes end here
    std::uint32_t name_ends = no_head; ///< the head whose name ends here (its mark follows)
  };
  std::string mark_;
  std::int32_t mark_special_ = -1;
  std::vector<trigger_head> heads_;
  std::vector<head_node> nodes_;
  /// By head node, made when first asked for.
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> head_splits_;
  /// The output has just written the trigger: a value begins, or the heads.
  void triggered(state& s) const;
  /// Reads byte `c` between the trigger and the value; false where no head
  /// goes on with it.
  bool head_byte(state& s, unsigned char c) const;
  /// The trigger's split-up of the vocabulary by free state, made once.
  void make_free_splits();
  /// By bytes matched: the free-text split (tokens advance refuses banned).
  std::vector<std::shared_ptr<const json_vocab::token_split>> free_;
  /// By bytes matched, made when first asked for: the split while the
  /// output's leading trigger is written.
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> leading_;
  /// The same with an answer schema: tokens either takes (the answer's
  /// reading there is the trigger's bytes matched).
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> leading_answer_;
  /// Where the answer has closed: every token banned.
  std::shared_ptr<const json_vocab::token_split> none_;
  /// The leading trigger's split by bytes matched (without the answer).
  std::shared_ptr<const json_vocab::token_split> leading_split(std::size_t matched) const;
};

} // namespace troupe
