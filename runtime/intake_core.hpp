// The intake core: turns client frames into scheduler submissions and
// scheduler progress into client replies. Keeps, per accepted request, who
// asked and what has been sent, so each gets exactly one terminal reply.
// Wrapped by the intake actor; CPU-testable without CAF or ZeroMQ.
#pragma once

#include "runtime/reasoning_counter.hpp"
#include "gpu/backend.hpp"
#include "messages/payloads.hpp"
#include "messages/wire.hpp"
#include "runtime/adapter_cache.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/request_state.hpp"
#include "runtime/scheduler_core.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <utility>
#include <vector>

namespace troupe {

/// A frame to send: `peer` is the ZeroMQ routing envelope, `payload` JSON.
struct outbound_frame {
  std::string peer;
  std::string payload;
};

struct intake_limits {
  wire::parse_limits parse;
  /// Accepted requests not yet finished; beyond it: `overloaded`.
  std::uint32_t max_pending = 65536;
  /// prompt + max_tokens must fit in this many tokens.
  std::uint32_t max_context = 4096;
  /// Mixed into the seed of requests that bring none.
  std::uint64_t base_seed = 0;
};

/// What the shell must do after a frame.
struct intake_actions {
  enum class query : std::uint8_t { none, stats, adapters };
  std::vector<outbound_frame> replies;
  std::optional<request_spec> submit;
  std::optional<std::uint64_t> cancel; ///< internal id to cancel
  query ask = query::none;             ///< a reply that needs other actors
  std::string query_id;                ///< client id for that reply
  /// Register this adapter with the adapter cache, then on_registered().
  std::optional<adapter_spec> register_adapter;
  /// Unregister this adapter (the intake has already forgotten its name),
  /// then on_unregistered().
  std::optional<adapter_entry> unregister_adapter;
  /// An advisory for this session (its internal id, as generate requests
  /// carry it; its name; the turn expected in `in_s`): ask the scheduler,
  /// reply an advise_reply with query_id.
  struct advisory {
    std::uint64_t session = 0;
    std::string name;
    double in_s = 0;
  };
  std::optional<advisory> advise;
};

/// The internal id of a session name (0 for none): a 64-bit FNV-1a hash. A
/// collision could only offer a cache whose tokens a prompt must still match.
std::uint64_t session_id_of(const std::string& name) noexcept;

/// One owner thread (the intake actor).
class intake_core {
public:
  /// `adapters`: the adapters registered at start.
  intake_core(intake_limits limits, const adapter_catalog& adapters,
              std::shared_ptr<const gpu::executor_backend> backend);

  // -- mutators ---------------------------------------------------------------

  /// Handles one client frame from `peer`.
  intake_actions on_frame(const std::string& peer, std::string_view payload, double now_s);

  /// The scheduler answered a submission. A cancel that came before the
  /// answer is due now (take_due_cancels): sent earlier, it could pass the
  /// submission on its way (through the classifier) and find nothing.
  std::vector<outbound_frame> on_submit_result(std::uint64_t request_id,
                                               scheduler_core::submit_result r);
  /// Internal ids to cancel now: cancels held until their submission was
  /// taken (each given once).
  std::vector<std::uint64_t> take_due_cancels() { return std::exchange(due_cancels_, {}); }

  /// The submission never reached the scheduler (an actor failed).
  std::vector<outbound_frame> on_submit_failed(std::uint64_t request_id,
                                               const std::string& why);

  /// Tokens and finished requests from the scheduler.
  std::vector<outbound_frame> on_progress(const progress_batch& batch);

  /// The adapter cache answered a register_adapter action for client
  /// request `client_id` of `peer`: the entry, or why it was refused.
  std::vector<outbound_frame> on_registered(const std::string& peer, const std::string& client_id,
                                            const std::variant<adapter_entry, std::string>& r);

  /// The adapter cache has unregistered `entry` (or failed to: `error`).
  std::vector<outbound_frame> on_unregistered(const std::string& peer, const std::string& client_id,
                                              const adapter_entry& entry, const std::string& error);

  /// `peer` cannot be reached any more: returns internal ids to cancel
  /// (those the scheduler has taken; the others are cancelled once it has,
  /// take_due_cancels); their replies are dropped from now on.
  std::vector<std::uint64_t> on_peer_gone(const std::string& peer);

  /// Refuse new generate requests from now on.
  void start_drain() noexcept { draining_ = true; }

  // -- observers --------------------------------------------------------------

  bool draining() const noexcept { return draining_; }
  std::size_t in_flight() const noexcept { return requests_.size(); }
  std::uint64_t rejected() const noexcept { return rejected_; }
  std::uint64_t accepted() const noexcept { return accepted_; }
  /// The context a prompt and its max_tokens must fit in.
  std::uint32_t max_context() const noexcept { return limits_.max_context; }
  /// Requests in flight that use adapter `name`.
  std::uint32_t adapter_users(const std::string& name) const;

private:
  struct pending {
    std::string peer;
    std::string client_id;
    bool stream = false;
    bool accepted_sent = false;
    bool peer_gone = false;
    bool submitted = false;   ///< the scheduler has taken it: a cancel reaches it
    bool cancel_held = false; ///< cancelled before that: sent once it has
    std::uint32_t prompt_tokens = 0;
    std::string adapter;
    std::vector<std::int32_t> tokens; // non-streaming only
    bool logprobs = false;            // the client asked for them
    std::vector<wire::token_logprobs> token_logprobs; // non-streaming only
    /// The prompt, kept when the client asked for its log-probabilities.
    std::vector<std::int32_t> prompt;
    bool prompt_logprobs = false;
    std::optional<std::vector<wire::token_logprobs>> prompt_logprobs_out; // non-streaming only
    /// Streaming: the start of a character whose last bytes are still to
    /// come (a token may decode to part of a UTF-8 sequence), sent with the
    /// chunk that completes it.
    std::string held;
    /// skip_special_tokens false: special tokens show their own text, but
    /// for one of `ends` (end of sequence, stop_token_ids; ascending) that
    /// ended the output.
    bool keep_special = false;
    std::vector<std::int32_t> ends;
    /// With reasoning marks: the thinking's tokens, counted as they come
    /// (the done reply's usage.reasoning_tokens).
    std::optional<reasoning_counter> thinking;
  };

  void generate(const std::string& peer, wire::generate_request&& g, double now_s,
                intake_actions& out);
  outbound_frame error_frame(const std::string& peer, const std::string& id,
                             wire::error_code code, std::string message);
  /// The text of `tokens`: with `keep_special`, special tokens' own texts
  /// too, but for the last when `ended` (it ended the output: vLLM leaves
  /// that out).
  std::string decode(const std::vector<std::int32_t>& tokens, bool keep_special = false, bool ended = false) const;
  /// Whether the last of `tokens` ended `p`'s output, which finished for
  /// `reason`, as one of its ends.
  static bool ended_by_last(const pending& p, const std::vector<std::int32_t>& tokens, std::uint8_t reason);
  /// A token's log-probabilities for the wire, each token with its text;
  /// `lp` null (none came) leaves the log-probabilities 0.
  wire::token_logprobs logprobs_of(std::int32_t token, const gpu::token_logprobs* lp) const;
  /// A prompt's log-probabilities for the wire (wire::token_reply::
  /// prompt_logprobs) from the backend's, one per token after the first.
  std::vector<wire::token_logprobs> prompt_logprobs_of(const std::vector<std::int32_t>& prompt,
                                                      const std::vector<gpu::token_logprobs>& lps) const;
  void send_accepted(pending& p, std::vector<outbound_frame>& out);
  void forget(std::uint64_t request_id);

  void adapter_request(const std::string& peer, wire::load_adapter_request&& l, intake_actions& out);
  void adapter_request(const std::string& peer, wire::unload_adapter_request&& u, intake_actions& out);

  intake_limits limits_;
  std::vector<std::uint64_t> due_cancels_;
  std::unordered_map<std::string, adapter_entry> adapters_;
  std::unordered_map<std::string, std::uint32_t> adapter_users_;
  std::shared_ptr<const gpu::executor_backend> backend_;
  /// Schemas of json_schema requests, checked here (the scheduler compiles
  /// its own: a request may travel to another node).
  json_schema_cache schemas_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, pending> requests_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> by_client_;
  bool draining_ = false;
  std::uint64_t rejected_ = 0;
  std::uint64_t accepted_ = 0;
};

} // namespace troupe
