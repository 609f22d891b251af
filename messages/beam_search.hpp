// Beam search over one-token generates, as vLLM serves `use_beam_search`:
// each step asks the engine for every live beam's most likely next tokens
// (a generate of one token with log-probabilities, its prompt the beam's
// tokens), extends each beam by each of them, and keeps the best `width`
// of all the extensions; a beam whose next token is an end token is
// complete. After max_tokens steps (or when no beam is left to extend) the
// answer is the `width` best of the complete and the live beams, by their
// summed log-probability over their length to the power length_penalty.
// Plain logic: the HTTP front sends the generates (runtime/http_front.cpp).
#pragma once

#include "messages/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::openai {

struct beam_settings {
  std::uint32_t width = 1;      ///< beams kept each step, and the answer's choices
  std::uint32_t max_tokens = 16; ///< steps at most
  /// A beam's score is its log-probability over (generated tokens, its end
  /// token left out, at least 1) ^ length_penalty: above 1 favours longer.
  double length_penalty = 1.0;
  bool ignore_eos = false;       ///< end tokens extend a beam as any other
  std::int32_t logprobs = -1;    ///< alternatives each answer token lists (-1: none)
};

class beam_search {
public:
  struct beam {
    std::vector<std::int32_t> tokens;           ///< generated (an end token last where it ended)
    std::vector<wire::token_logprobs> logprobs; ///< one per token: it, and `logprobs` alternatives
    double logprob = 0;                         ///< summed over tokens
    bool ended = false;                         ///< at an end token (else cut by max_tokens or the context)
  };

  beam_search(std::vector<std::int32_t> prompt, std::vector<std::int32_t> end_tokens, beam_settings s);

  /// Log-probabilities to ask each step's generate for: 2 × width (as
  /// vLLM), or the answer's `logprobs` where more.
  std::uint32_t alternatives() const noexcept;
  /// This step's live beams: each one's prompt (the prompt, then its
  /// tokens). Empty: the search is over.
  std::vector<std::vector<std::int32_t>> step() const;
  /// Live beam `k`'s most likely next tokens, most likely first (the
  /// step's generate's top log-probabilities; at most alternatives() read).
  void extend(std::size_t k, const std::vector<wire::token_logprob>& top);
  /// Live beam `k` cannot go on (its context is full): complete as it is.
  void stop(std::size_t k);
  /// Once each live beam was extended or stopped: the best `width`
  /// extensions go on. False when the search is over.
  bool advance();
  /// The answer: the `width` best beams, best first (ties to the earlier).
  std::vector<beam> best() const;
  std::size_t steps() const noexcept { return steps_; }

  double score(const beam& b) const noexcept;

private:
  std::vector<std::int32_t> prompt_;
  std::vector<std::int32_t> end_;
  beam_settings s_;
  std::vector<beam> live_;
  std::vector<beam> next_;     ///< this step's extensions that go on
  std::vector<beam> complete_;
  std::size_t steps_ = 0;
};

/// The wire frames a front's beam search sends for a completion's prompt,
/// from that prompt's generate (`base`, a frame of completion_request,
/// read once).
class beam_frames {
public:
  explicit beam_frames(std::string_view base);
  /// The tokenize asking for the prompt's tokens (as the generate would
  /// run them) and the model's end tokens.
  std::string tokenize(std::string_view id) const;
  /// The prompt's tokens where the generate gives them itself (a prompt of
  /// token ids); none for a text prompt.
  const std::optional<std::vector<std::int32_t>>& prompt_tokens() const noexcept { return prompt_tokens_; }
  /// One step of a beam: a greedy generate of one token after `tokens`, its
  /// `alternatives` likeliest listed, for the same model or adapter and
  /// priority as the prompt's.
  std::string step(std::string_view id, const std::vector<std::int32_t>& tokens, std::uint32_t alternatives) const;
  /// A detokenize of `tokens` (not empty).
  static std::string detokenize(std::string_view id, const std::vector<std::int32_t>& tokens);

private:
  std::string prompt_;
  std::optional<std::vector<std::int32_t>> prompt_tokens_;
  std::optional<std::string> adapter_;
  std::optional<std::int64_t> priority_;
};

/// A beam as the done reply a generate of it would have given: its text
/// (the detokenized tokens, the end token left out), finish_reason "eos"
/// where it ended at an end token, else "length", its tokens' log-
/// probabilities (the end token's left out, as its text) where asked.
wire::done_reply beam_done(const beam_search::beam& b, std::string id, std::string text, std::uint32_t prompt_tokens,
                           bool logprobs);

} // namespace troupe::openai
