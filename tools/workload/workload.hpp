// Workloads for troupe-sim and troupe-bench: request arrivals and lengths
// from the Azure LLM inference trace 2023 (or generated), and which adapter
// each request uses (uniform, S-LoRA's Power(alpha), Zipf, or Chameleon's
// power law over rank classes). Deterministic from a seed: every draw comes
// from splitmix64, none from the standard library's distributions.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace troupe::workload {

/// One request of a workload. `adapter` indexes the adapter set; none_adapter
/// means the base model.
struct request {
  double arrival_s = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::uint32_t adapter = 0;
  /// A multi-turn conversation's turn (0: none); a later turn follows the
  /// previous reply after `think_s` (see multi_turn).
  std::uint64_t session = 0;
  double think_s = 0;
  /// The request's priority (the wire's: higher is more urgent); only the
  /// `priority` scheduling policy reads it.
  std::int32_t priority = 0;
};
inline constexpr std::uint32_t none_adapter = 0xffffffffu;

// -- traces -----------------------------------------------------------------

/// Reads AzureLLMInferenceTrace_{code,conv}.csv (TIMESTAMP, ContextTokens,
/// GeneratedTokens): arrivals in seconds after the first row. An error names
/// the file, the line and the field.
std::variant<std::vector<request>, std::string> load_azure_trace(const std::string& path);

/// Reads a ShareGPT length file (num_prefill_tokens, num_decode_tokens, ...;
/// the one Sarathi-Serve and Vidur use): lengths only, every arrival 0 (give
/// them arrivals with gamma_arrivals). An error names the file, the line and
/// the field.
std::variant<std::vector<request>, std::string> load_sharegpt_lengths(const std::string& path);

/// One conversation of a multi-turn trace.
struct conversation {
  std::uint32_t rounds = 1;          ///< user turns
  std::uint32_t prompt_tokens = 1;   ///< over all user turns
  std::uint32_t response_tokens = 1; ///< over all replies
};

/// Reads sharegpt52k_head1000_conversations.csv (rounds, prompt_tokens_est,
/// response_tokens_est; rows marked is_failure are skipped).
std::variant<std::vector<conversation>, std::string> load_conversations(const std::string& path);

/// Reads either trace kind, by its header.
std::variant<std::vector<request>, std::string> load_trace(const std::string& path);

// -- generators -------------------------------------------------------------

/// Arrivals of `n` requests at mean rate `rate` (per second) with inter-
/// arrival gaps of coefficient of variation `cv` (Gamma; cv = 1 is Poisson).
std::vector<double> gamma_arrivals(std::size_t n, double rate, double cv, std::uint64_t seed);

/// S-LoRA's synthetic workload: `n` requests with Gamma arrivals (rate, cv)
/// and prompt and output lengths uniform in [lo, hi] (inclusive).
std::vector<request> synthetic(std::size_t n, double rate, double cv, std::uint32_t prompt_lo,
                               std::uint32_t prompt_hi, std::uint32_t output_lo, std::uint32_t output_hi,
                               std::uint64_t seed);

/// The turns of `conversations`: conversation i starts at Poisson arrival i
/// (rate per second) and each of its turns carries an even share of its
/// prompt and response tokens (at least 1); session ids are 1 + i.
std::vector<request> multi_turn(const std::vector<conversation>& conversations, double rate, double think_s,
                                std::uint64_t seed);

// -- shaping ----------------------------------------------------------------

/// At most `max_rounds` user turns per conversation (0: all), each turn as
/// long as before (the conversation's totals shrink with its rounds).
void cap_rounds(std::vector<conversation>& conversations, std::uint32_t max_rounds);
/// The prompt token ids the benchmark sends for request `index` of
/// `tokens` tokens: its own, or (with `shared_prefix` > 0) first the
/// `shared_prefix` tokens of system prompt index mod `groups`, then its own
/// (ids 10-409, so any model's vocabulary has them).
std::vector<std::int32_t> prompt_of(std::size_t index, std::uint32_t tokens, std::uint32_t shared_prefix = 0,
                                    std::uint32_t groups = 1);

/// Caps every request's prompt and output tokens (0: that one uncapped).
void cap_lengths(std::vector<request>& r, std::uint32_t prompt, std::uint32_t output);

/// Keeps the requests arriving in [from_s, from_s + seconds), re-based to 0.
std::vector<request> window(const std::vector<request>& in, double from_s, double seconds);
/// Multiplies every arrival time by `factor` (2 = half the rate).
void scale_time(std::vector<request>& r, double factor);
/// Rescales arrival times so the mean rate is `rate` per second.
void set_rate(std::vector<request>& r, double rate);
/// Trims prompts so prompt + output <= max_context (outputs longer than
/// max_context - 1 are trimmed too); returns how many requests changed.
std::size_t clamp_context(std::vector<request>& r, std::uint32_t max_context);

// -- adapter popularity -----------------------------------------------------

/// A set of adapters and how requests pick among them.
struct adapter_set {
  std::vector<std::uint32_t> ranks; ///< rank of adapter i
  std::vector<double> weights;      ///< unnormalised probability of adapter i
};

/// `n` adapters with ranks dealt from `ranks` in equal blocks (the first
/// n/len(ranks) get ranks[0], ...), or in turn with `cycle_ranks` (adapter
/// i gets ranks[i % len(ranks)]: rank unrelated to a Zipf or Power rank
/// order), and:
///   "uniform":          every adapter alike;
///   "power:<alpha>":    S-LoRA's Power(alpha): P(i) = ((i+1)/n)^a - (i/n)^a;
///   "zipf:<s>":         P(i) proportional to 1/(i+1)^s;
///   "chameleon:<alpha>": rank class k (smallest rank first) with P ∝ 1/(k+1)^alpha,
///                        then uniform within the class.
/// An error says what was wrong with `popularity`.
std::variant<adapter_set, std::string> make_adapter_set(std::uint32_t n,
                                                        const std::vector<std::uint32_t>& ranks,
                                                        const std::string& popularity,
                                                        bool cycle_ranks = false);

/// Assigns each request an adapter drawn from `set` (base_fraction of them
/// get none_adapter); the later turns of a session (request.session != 0)
/// get its first turn's.
void assign_adapters(std::vector<request>& r, const adapter_set& set, double base_fraction,
                     std::uint64_t seed);

// -- priority classes -------------------------------------------------------

/// A share of the requests that carries one priority.
struct priority_share {
  std::int32_t priority = 0;
  double share = 0; ///< normalised over the mix: the shares sum to 1
};

/// Reads "P:S[,P:S...]" (each P an integer priority, each S > 0, normalised
/// over the list; e.g. "0:0.7,-1:0.3": 70 % interactive, 30 % batch). An
/// error says which entry was wrong and why.
std::variant<std::vector<priority_share>, std::string> parse_priority_mix(const std::string& text);

/// Gives each request a priority drawn from `mix`; the later turns of a
/// session get its first turn's. An empty mix leaves every priority 0.
void assign_priorities(std::vector<request>& r, const std::vector<priority_share>& mix, std::uint64_t seed);

// -- summary ----------------------------------------------------------------

struct summary {
  std::size_t requests = 0;
  double duration_s = 0;
  double mean_rate = 0;
  double prompt_mean = 0, prompt_p50 = 0, prompt_p99 = 0;
  double output_mean = 0, output_p50 = 0, output_p99 = 0;
  std::size_t distinct_adapters = 0;
};
summary summarize(const std::vector<request>& r);

/// The p-th percentile (0..100, nearest rank) of `v` (sorted inside); 0 if empty.
double percentile(std::vector<double> v, double p);

} // namespace troupe::workload
