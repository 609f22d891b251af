// A reasoning model's output held to a constraint after its thinking: free
// text up to the closing mark ("</think>"), then the content, held as
// response_format or a tool call asks (one JSON value, or free text whose
// triggers open values), or as guided_choice and guided_regex ask (one of
// the texts, a match). The output's start decides as the chat answer's
// reasoning parser does (messages/openai.hpp, reasoning_format): with an
// opening mark, output that begins with it (after blanks) thinks first and
// other output is all content; without one, the prompt opened the
// thinking. While the content must hold a value, tokens that stand for no
// text (the end-of-sequence token among them) are banned in the thinking
// too, so the output cannot end before its value. The wire's
// reasoning_open and reasoning_close. No CAF, no I/O.
#pragma once

#include "runtime/held_machine.hpp"
#include "runtime/json_constraint.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/json_trigger.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe {

class reasoning_gate {
public:
  /// Longest mark taken (the wire's limit).
  static constexpr std::size_t max_mark_bytes = json_trigger::max_bytes;
  /// Most blanks before the opening mark, and before a leading trigger in
  /// the content (as JSON's own limit between tokens).
  static constexpr std::uint32_t max_blank = json_machine::max_blank;

  /// The content is one value of `schema`: the output is whole when it
  /// closes. Throws std::invalid_argument for an empty `close` or a mark
  /// over max_mark_bytes.
  reasoning_gate(json_vocab& vocab, std::string open, std::string close, std::shared_ptr<const json_schema> schema);
  /// The content is `trigger`'s free text; `leading`: it begins with the
  /// trigger (after blanks), so it holds at least one value. A trigger
  /// with an answer schema begins with the trigger or the answer (after
  /// blanks), and the output is whole when the answer closes.
  reasoning_gate(json_vocab& vocab, std::string open, std::string close, std::shared_ptr<const json_trigger> trigger,
                 bool leading);
  /// The content is held by `held` (as it starts): the output is whole when
  /// the content is a choice, or a match, that nothing longer extends;
  /// where something does, it may end there (ends_here).
  reasoning_gate(json_vocab& vocab, std::string open, std::string close, held_machine held);

  enum class phase : std::uint8_t {
    start,    ///< the output's start: blanks, then the opening mark or content
    thinking, ///< up to the closing mark
    content,  ///< held to the constraint
  };
  struct state {
    phase at = phase::start;
    /// start: the blanks and opening-mark bytes read (the content's, if
    /// the mark does not follow).
    std::string held;
    std::size_t matched = 0;   ///< thinking: the closing mark's bytes just read
    std::uint32_t blanks = 0;  ///< content: blanks before a leading trigger
    std::optional<schema_machine> value;
    json_trigger::state trigger;
    /// The content held to choices or an expression (monostate: not so).
    /// (Not an optional held_machine: GCC 12 warns, wrongly, that copying
    /// one reads uninitialized memory.)
    std::variant<std::monostate, choice_machine, regex_machine, grammar_machine> machine;
    bool complete = false; ///< the value closed: the output is whole
  };
  /// Where an output begins.
  state begin() const;

  /// Reads `bytes` from `s`. False (s as it was) when a byte breaks the
  /// content, or follows a value that closed.
  bool advance(state& s, std::string_view bytes) const;
  /// Reads token `t`: its bytes, or where the content's trigger is a
  /// special token's own text, that token opens a value in the content
  /// (where the trigger's bytes would; at the output's start, it begins
  /// the content).
  bool advance(state& s, std::int32_t t) const;

  /// The tokens to ban in state `s`, and those to allow.
  std::shared_ptr<const json_vocab::token_split> split(const state& s) const;
  /// The content is a choice or a match that may yet go on: the end of
  /// sequence may end the output here (split does not allow it).
  bool ends_here(const state& s) const;

  const std::string& open() const noexcept { return open_; }
  const std::string& close() const noexcept { return close_; }

private:
  reasoning_gate(json_vocab& vocab, std::string open, std::string close);
  /// `s` enters its content, which goes on with `bytes`.
  bool enter_content(state& s, std::string_view bytes) const;
  /// In the content: reads `bytes` in place, or refuses them leaving `s`
  /// as it was.
  bool content(state& s, std::string_view bytes) const;
  /// The content may be empty (free text): tokens that stand for no text
  /// may end the output anywhere.
  bool may_end() const noexcept { return trigger_ && !leading_ && !trigger_->answers(); }

  json_vocab& vocab_;
  std::string open_;
  std::string close_;
  std::shared_ptr<const json_schema> schema_;
  std::shared_ptr<const json_trigger> trigger_;
  bool leading_ = false;
  std::optional<held_machine> held_; ///< as the content starts

  mark_matcher match_; ///< of close_
  /// Made when first asked for: the start's splits by bytes held, the
  /// thinking's by bytes matched, a leading trigger's by blanks before it.
  mutable std::map<std::string, std::shared_ptr<const json_vocab::token_split>> start_;
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> thinking_;
  mutable std::vector<std::shared_ptr<const json_vocab::token_split>> lead_;
};

} // namespace troupe
