// Output that is free text until a trigger string, then one JSON value held
// to a schema, then free text again (each time the trigger appears): how a
// tool call offered with tool_choice "auto" keeps its arguments to the
// function's parameters once the model opens a call ("<tool_call>") and
// leaves the model free to answer in words instead. The wire's
// json_trigger. No CAF, no I/O.
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
  json_trigger(json_vocab& vocab, std::string trigger, std::shared_ptr<const json_schema> schema);

  /// Where an output is: in free text with `matched` bytes of the trigger
  /// just read (its longest end that begins the trigger), or in a value;
  /// `leading`: at the output's start, which must be the trigger (its
  /// first `matched` bytes written).
  struct state {
    std::size_t matched = 0;
    std::optional<schema_machine> value;
    bool leading = false;
  };

  /// Reads `bytes` from `s`: free text is searched for the trigger; a value
  /// begins right after it and free text again right after the value
  /// closes. False (s as it was) when a byte breaks the value.
  bool advance(state& s, std::string_view bytes) const;
  /// Reads token `t`: its bytes, or where the trigger is a special
  /// token's own text ("[TOOL_CALLS]", which stands for no text), that
  /// token writes the whole trigger outside a value (and in a leading
  /// trigger, at its start).
  bool advance(state& s, std::int32_t t) const;
  /// The special token whose own text is the trigger, or -1.
  std::int32_t special_token() const noexcept { return special_; }

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
  /// By bytes matched: the free-text split (tokens advance refuses banned).
  std::vector<std::shared_ptr<const json_vocab::token_split>> free_;
  /// By bytes matched, made when first asked for: the split while the
  /// output's leading trigger is written.
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> leading_;
};

} // namespace troupe
