// Token sampling from logits: greedy, temperature, top-k, top-p, seeded per
// request and per output position so results do not depend on batching.
// Used by the cpu backend; the CUDA backend's sampler is checked against it.
// logprobs_of gives the log-probabilities a client may ask for.
#pragma once

#include "gpu/step.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace troupe::gpu {

struct sampling_config {
  float temperature = 1.0f; ///< 0: greedy (argmax, lowest id on ties)
  float top_p = 1.0f;       ///< keep the smallest set of top tokens with mass >= top_p
  std::int32_t top_k = 0;   ///< 0: no cut
  /// Keep only tokens of probability >= min_p times the largest (before
  /// top-k and top-p, as vLLM); 0 (or NaN) keeps every token.
  float min_p = 0.0f;
};

/// The uniform double in [0, 1) that sample_token draws for
/// (seed, output_index): splitmix64 of both, its top 53 bits.
double uniform01(std::uint64_t seed, std::uint32_t output_index) noexcept;

/// Draws one token from `logits`; the draw depends only on the inputs.
/// Empty logits give -1; temperature <= 0 is greedy; NaN logits never win.
std::int32_t sample_token(std::span<const float> logits, const sampling_config& cfg,
                          std::uint64_t seed, std::uint32_t output_index);

/// The log-probability of `token` under `logits` (log-softmax, in double)
/// and the `top` most likely tokens, most likely first, ties by lower id.
/// NaN logits count as -infinity; logits of +infinity share all the mass.
/// Tokens of probability 0 are never listed, so `top` may be shorter. A
/// token out of range gives -infinity, as do all when no logit is a number
/// above -infinity. Used by every backend that computes them.
token_logprobs logprobs_of(std::span<const float> logits, std::int32_t token, std::uint32_t top);

/// `logits` adjusted into `out` (resized to match): what a step samples
/// from (step_entry::logit_adjust). First each `repeated` token's logit l
/// becomes l / repetition_penalty if l > 0, else l * repetition_penalty
/// (once, however often the token is named); then each delta is added to
/// its token's logit. A token outside the row is ignored.
void apply_logit_adjust(std::span<const float> logits, std::span<const logit_adjustment> adjust,
                        float repetition_penalty, std::vector<float>& out);

/// The repetition penalty's rule for one logit, shared by the CPU and the
/// CUDA adjustments so both round alike.
constexpr float penalize_repeated(float logit, float repetition_penalty) noexcept {
  return logit > 0.0f ? logit / repetition_penalty : logit * repetition_penalty;
}

/// A prompt's log-probabilities (step_result::prompt_logprobs), the logits
/// of its rows taken `chunk_rows` at a time: `logits_of(first, rows)` gives
/// rows [first, first + rows) ([rows, vocab], valid until the next call).
/// The k-th result is logprobs_of(row k, tokens[k + 1], top), so there are
/// tokens.size() - 1 (none for fewer than two tokens); the last row is
/// never asked for.
std::vector<token_logprobs> prompt_logprobs_of(
  std::span<const std::int32_t> tokens, std::size_t vocab, std::size_t chunk_rows, std::uint32_t top,
  const std::function<std::span<const float>(std::size_t first, std::size_t rows)>& logits_of);

} // namespace troupe::gpu
