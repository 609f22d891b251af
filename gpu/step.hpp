// The unit of work an executor backend runs: one iteration of a continuous
// batch. Built by the scheduler (runtime/), consumed by every backend in gpu/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace troupe::gpu {

/// A token and its log-probability under the model: the log-softmax of the
/// step's raw logits (before temperature, top-k or top-p).
struct token_logprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

/// What an entry that asked (step_entry::logprobs >= 0) gets back: its
/// sampled token's log-probability and the `logprobs` most likely tokens,
/// most likely first (ties: lower id first).
struct token_logprobs {
  float logprob = 0.0f;
  std::vector<token_logprob> top;
};

/// A change to one token's logit before sampling: OpenAI's logit_bias and
/// presence and frequency penalties, summed into `delta`; and whether the
/// token is one the request has seen (its prompt or output so far), whose
/// logit step_entry::repetition_penalty scales first.
struct logit_adjustment {
  std::int32_t token = 0;
  float delta = 0.0f;
  bool repeated = false;
};

/// One request's share of a step. Plain data; safe to copy across threads.
struct step_entry {
  std::uint64_t request_id = 0;
  /// Adapter the request runs with; 0 means the base model only.
  std::uint32_t adapter_id = 0;
  /// LoRA rank of that adapter; 0 when adapter_id is 0.
  std::uint32_t adapter_rank = 0;
  /// Tokens this step feeds for the request: the prompt length on its prefill
  /// step, 1 on each decode step.
  std::uint32_t new_tokens = 0;
  /// Tokens already held in the request's KV cache before this step.
  std::uint32_t context_tokens = 0;
  /// Index of the output token this step produces (0 on the prefill step).
  std::uint32_t output_index = 0;
  /// Sampling seed of the request; backends derive every random draw from it.
  std::uint64_t seed = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
  /// In [0, 1]: tokens whose probability is below min_p times the most
  /// likely token's are not drawn (vLLM's and Hugging Face's min_p), cut
  /// before top_k and top_p; 0 cuts nothing.
  float min_p = 0.0f;
  /// Above 0 (1: none): the logit of each token a logit_adjust entry marks
  /// `repeated` is divided by it where positive and multiplied by it
  /// otherwise (Hugging Face's and vLLM's repetition_penalty), before the
  /// entry's delta is added.
  float repetition_penalty = 1.0f;
  /// -1: no log-probabilities; k >= 0: the sampled token's and the k most
  /// likely tokens' (step_result::logprobs), on backends that compute them
  /// (executor_backend::computes_logprobs).
  std::int32_t logprobs = -1;
  /// -1: none; k >= 0: the log-probability of each of this step's input
  /// tokens after the first, given the tokens before it, and the k most
  /// likely tokens' at its place (step_result::prompt_logprobs), on backends
  /// that compute log-probabilities. The scheduler asks it of a prefill from
  /// the first position (context_tokens 0), so these are the prompt's.
  std::int32_t prompt_logprobs = -1;
  /// Applied to the logits of this entry's sampled row before sampling
  /// (gpu::apply_logit_adjust), in token order; the log-probabilities
  /// reported are the model's own.
  std::vector<logit_adjustment> logit_adjust{};
  /// Input token ids of this step: the prompt on the prefill step, the last
  /// output token on a decode step. Backends that do no math ignore them.
  std::vector<std::int32_t> tokens;
  /// The request's KV-cache pages in the unified pool, in position order.
  std::vector<std::uint32_t> pages;
  /// The request keeps a hidden cache (the QKV input per layer) in its
  /// pages instead of K and V; only where the backend's hidden cache saves
  /// memory (executor_backend::hidden_cache_tokens_per_page > 0).
  bool hidden = false;
  /// Non-zero: the request's cache is still coming in from the host pool
  /// under this stream (executor_backend::stream_in); each layer computes
  /// once that layer's pages are in.
  std::uint64_t stream = 0;
};

/// An entry a backend could not run (its token is -1), and why.
struct step_failure {
  std::uint64_t request_id = 0;
  std::string reason;
};

/// What a backend returns for a step: one sampled token per entry, in entry
/// order, and the device time the step took (measured or predicted). Every
/// entry whose token is -1 has a failure naming the reason, for the log;
/// its request ends with an error.
struct step_result {
  std::vector<std::int32_t> tokens;
  /// One per entry, in entry order, when any entry asked for them; empty
  /// otherwise. An entry that did not ask, or whose token is -1, has a
  /// default (empty) one.
  std::vector<token_logprobs> logprobs;
  /// One per entry, in entry order, when any entry asked for prompt
  /// log-probabilities (step_entry::prompt_logprobs >= 0); empty otherwise.
  /// An entry that asked, and whose token is not -1, has new_tokens - 1:
  /// the k-th is input token k + 1's, read from the logits at input k.
  std::vector<std::vector<token_logprobs>> prompt_logprobs;
  double device_seconds = 0.0;
  std::vector<step_failure> failures;
};

/// Streams (executor_backend::stream_in) that failed under a step, each
/// with stream_in's error.
using lost_streams = std::vector<std::pair<std::uint64_t, std::string>>;

/// If entry `e` reads a stream in `lost`, records its failure in `out` and
/// returns true (its token stays -1).
bool fail_if_stream_lost(step_result& out, const step_entry& e, const lost_streams& lost);

/// One line for the log: the failures grouped by reason in order of first
/// appearance, each naming its requests ("requests 3, 9: reason; request
/// 4: other reason"); at most `max_ids` ids per reason, then how many more.
std::string describe(std::span<const step_failure> failures, std::size_t max_ids = 8);

} // namespace troupe::gpu
