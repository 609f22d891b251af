// What a benchmark run measured, request by request, and its summary: the
// same records and outputs for troupe-bench (a live deployment over ZeroMQ)
// and troupe-sim (virtual time), so their results can be compared and
// plotted alike. Latencies are in seconds of model time (a live run on a
// scaled sim backend divides its wall times by the scale).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace troupe::workload {

/// One request's fate.
struct request_record {
  std::string id;
  double arrival_s = 0;         ///< when it was (to be) sent, from the run's start
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_tokens = 0; ///< output asked for
  std::uint32_t completion_tokens = 0;
  std::int64_t adapter = -1;    ///< adapter index; -1: base model
  double ttft_s = -1;           ///< arrival to first token; -1: none came
  double e2e_s = -1;            ///< arrival to the terminal reply; -1: none came
  /// Mean time between tokens after the first; -1 with fewer than 2 tokens.
  double tbt_mean_s = -1;
  /// Its own 99th-percentile time between tokens (nearest rank over the
  /// gaps after the first token); -1 with fewer than 2 tokens.
  double tbt_p99_s = -1;
  /// Arrival to its first scheduled step (server side); -1: unknown.
  double queue_s = -1;
  /// "length", "eos", "stop", or an error code ("overloaded", ...); "lost" if
  /// no terminal reply came.
  std::string outcome = "lost";
  /// FNV-1a of the output token ids in order (0: none came), to tell runs
  /// that produced the same tokens.
  std::uint64_t tokens_fnv = 0;
  /// The conversation it belongs to (0: none).
  std::uint64_t session = 0;
  /// Its latency alone on an idle server (troupe-sim prices it with its cost
  /// model); -1: unknown, as in a live run.
  double isolated_s = -1;
  /// The priority it was sent with (the wire's; higher is more urgent).
  std::int32_t priority = 0;
  bool ok() const noexcept { return outcome == "length" || outcome == "eos" || outcome == "stop"; }
};

struct latency_summary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  std::size_t count = 0;
};

/// SLOs a request must meet to count as attained (0: not checked).
struct slo {
  double ttft_s = 0;
  double tbt_s = 0; ///< on its mean time between tokens, or its P99 with tbt_p99
  /// Test tbt_s on each request's own P99 time between tokens (Apt-Serve's
  /// SLO) rather than its mean.
  bool tbt_p99 = false;
};

struct run_summary {
  std::string label;       ///< the setup (policy, ...)
  double offered_rate = 0; ///< requests/s the workload offered
  std::size_t requests = 0, finished = 0, failed = 0;
  double duration_s = 0;   ///< first arrival to the last terminal reply
  double requests_per_s = 0, tokens_per_s = 0;
  latency_summary ttft, tbt, e2e;
  /// Slowdown (Chameleon's): e2e over the latency alone, over finished
  /// requests whose isolated_s is known; count 0 when none is.
  latency_summary slowdown;
  /// AdaptiveLLM's weighted turnaround, mean of e2e / (e2e − queue) over
  /// finished requests whose queue time is known (≥ 1; lower is better);
  /// 0 when none is known.
  double weighted_turnaround = 0;
  /// Share of all requests that finished within the SLOs.
  double attainment = 0;
  /// Server figures pulled from stats (-1: not available).
  double pcie_bytes = -1, adapter_hit_rate = -1;
  /// With requests of more than one priority: each priority's own summary
  /// (highest first; its label "priority P", its offered rate that
  /// priority's share of the run's), so a policy's gain for one class can be
  /// read beside its cost for the others. Empty otherwise.
  std::vector<run_summary> classes;
  std::int32_t priority = 0; ///< a class's priority (in `classes`)
};

latency_summary summarize_latency(std::vector<double> v);

run_summary summarize_run(const std::vector<request_record>& records, const slo& target,
                          double offered_rate, std::string label);

/// The highest offered rate whose attainment is at least `min_attainment`
/// (Apt-Serve's effective throughput); 0 if none.
double effective_throughput(const std::vector<run_summary>& runs, double min_attainment = 0.9);

/// One JSON object: the runs' summaries (and the effective throughput per
/// label when more than one rate was run).
void write_json(std::ostream& out, const std::vector<run_summary>& runs, double min_attainment = 0.9);
/// CSV of the summaries, one row per run (for plots).
void write_summary_csv(std::ostream& out, const std::vector<run_summary>& runs);
/// Writes the JSON report and the summary CSV to the paths given (an empty
/// path: not written).
void write_outputs(const std::vector<run_summary>& runs, const std::string& json_path,
                   const std::string& csv_path);
/// One line per label: its effective throughput over the runs (a sweep).
std::string effective_throughput_lines(const std::vector<run_summary>& runs, double min_attainment = 0.9);
/// CSV of the records, one row per request, with the run's label and rate.
void write_records_csv(std::ostream& out, const std::string& label, double offered_rate,
                       const std::vector<request_record>& records, bool header);

} // namespace troupe::workload
