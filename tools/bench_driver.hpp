// The open-loop load generator behind troupe-bench: sends a workload's
// requests to a deployment at their arrival times (never waiting for
// replies), streams every reply back on the same socket, and records each
// request's time to first token, time between tokens and end-to-end
// latency. Used by troupe-bench and by the test that checks troupe-sim
// against a live deployment.
#pragma once

#include "tools/workload/report.hpp"
#include "tools/workload/workload.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace troupe {

struct open_loop_options {
  std::string endpoint;
  /// Wall seconds per second of the workload's (and the server's model)
  /// time: arrivals are sent at arrival × scale and latencies reported ÷
  /// scale. Match the server's `[backend] time_scale` on the sim backend.
  double time_scale = 1.0;
  /// Adapter i is requested by name prefix + i.
  std::string adapter_prefix = "lora-";
  /// After the last send, how long to wait for outstanding replies.
  std::chrono::milliseconds drain{std::chrono::seconds(300)};
  /// A progress bar on stderr.
  bool progress = false;
  std::string id_prefix = "b";
  /// Multi-turn requests (session != 0): send an advisory for a session's
  /// next turn when its reply ends (Symphony's hint, think_s ahead).
  bool advise = false;
  /// Each reply runs to the workload's output length: the end-of-sequence
  /// token ends none (the wire's ignore_eos; a real model would end some
  /// early, the sim backend draws none). False: replies may end there.
  bool ignore_eos = true;
  /// Single-turn prompts begin with the first `shared_prefix` tokens of one
  /// of `prefix_groups` system prompts (workload::prompt_of; troupe-sim's
  /// --shared-prefix).
  std::uint32_t shared_prefix = 0;
  std::uint32_t prefix_groups = 1;
};

/// Runs `requests` (arrival order) against `opt.endpoint`; records in the
/// same order. Requests with no terminal reply by the end are "lost".
/// Turns of one session (in order in `requests`) form a conversation: the
/// first goes at its arrival, each later one `think_s` after the previous
/// reply ended, its prompt the conversation so far (earlier prompts and
/// replies) and then its own tokens; all name the session "c<session>".
std::vector<workload::request_record> run_open_loop(const std::vector<workload::request>& requests,
                                                    const open_loop_options& opt);

struct http_open_loop_options {
  std::string endpoint; ///< the HTTP front's HOST:PORT
  std::string api_key;  ///< sent as a bearer key when not empty
  std::string model;    ///< the base model's name (GET /v1/models' first)
  double time_scale = 1.0;
  std::string adapter_prefix = "lora-";
  /// How long a request may go without a byte of its answer before it is
  /// given up ("lost").
  std::chrono::milliseconds drain{std::chrono::seconds(300)};
  bool progress = false;
  bool ignore_eos = true; ///< as open_loop_options::ignore_eos
  std::uint32_t shared_prefix = 0; ///< as open_loop_options::shared_prefix
  std::uint32_t prefix_groups = 1;
};

/// run_open_loop over the OpenAI-compatible HTTP front: each request a
/// streamed POST /v1/completions on a connection of its own, sent at its
/// arrival time (single-turn requests only). The times are the client's:
/// TTFT at the first event with text, time between tokens from the events
/// (several tokens in one event count as one gap; the mean divides by the
/// tokens), the token count from the usage event. No token ids or queue
/// times come back over HTTP (tokens_fnv 0, queue_s -1).
std::vector<workload::request_record> run_open_loop_http(const std::vector<workload::request>& requests,
                                                         const http_open_loop_options& opt);

/// Server figures from a stats reply: PCIe bytes (adapter loads, prefetches
/// and swaps) and the adapter cache hit rate; -1 where absent.
std::pair<double, double> pull_server_figures(const std::string& endpoint);

} // namespace troupe
