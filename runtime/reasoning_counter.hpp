// Counts a reasoning model's thinking tokens, as the chat answer's
// reasoning parser splits its text (messages/openai.hpp, reasoning_format):
// with an opening mark ("<think>"), output that begins with it after any
// blanks (runtime/reasoning_gate.hpp takes at most 32) thinks up to the
// closing mark ("</think>"), and other output is all content; without one,
// the prompt opened the thinking and the output begins in it. A token
// counts as thinking while the closing mark has not ended before it: the
// one that completes the mark is the last. What the wire's done reply says
// as usage.reasoning_tokens. No CAF, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

class reasoning_counter {
public:
  /// `close` must not be empty; `open` empty: the output begins thinking.
  reasoning_counter(std::string open, std::string close);

  /// The next output token's text (as the client sees it).
  void feed(std::string_view text);
  /// Tokens of the thinking so far. Tokens at the output's start that
  /// could still begin the opening mark count once it is whole.
  std::uint32_t count() const noexcept { return count_; }
  /// Whether the thinking has ended (or the output is all content).
  bool done() const noexcept { return phase_ == phase::content; }

private:
  enum class phase : std::uint8_t { start, thinking, content };
  void think(std::string_view text);

  std::string open_, close_;
  phase phase_;
  std::string seen_;          ///< start: the text so far; thinking: its last close_.size() - 1 bytes
  std::uint32_t pending_ = 0; ///< start: tokens before the opening mark is decided
  std::uint32_t count_ = 0;
};

} // namespace troupe
