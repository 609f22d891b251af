// AdaptiveLLM's decisions (adaptivellm.md §3-5), as pure functions:
//   priority      P = (now − first arrival) / current length; larger is more urgent
//   victims       when the next step does not fit, the lowest-priority running
//                 requests go, each swapped out when the host pool has room and
//                 the predicted swap time is below the predicted recompute time,
//                 else dropped for recompute (Algorithm 1)
//   admission     swap-in set against prefill set by their mean priority
//                 (Algorithm 2)
//   predictors    swap time from bandwidths; recompute time from a quadratic
//                 least-squares fit of prefill time on tokens; their MAPE
// The scheduler and the simulator call these; the predictors are fitted on
// the backend at start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace troupe::policies {

/// AdaptiveLLM's fairness priority of a request.
double adaptive_priority(double now_s, double first_arrival_s, std::uint32_t seq_len) noexcept;

/// Mean priority of a set; -infinity for an empty set.
double mean_priority(std::span<const double> priorities) noexcept;

/// Time to move a request's KV out and back in.
struct swap_model {
  double d2h_bytes_per_s = 0;
  double h2d_bytes_per_s = 0;
  double seconds(std::uint64_t kv_bytes) const noexcept;
};

/// Prefill time as a quadratic in tokens: a + b·n + c·n², fitted on
/// measured (tokens, seconds) points by least squares of the relative error.
struct recompute_model {
  double a = 0, b = 0, c = 0;
  double seconds(std::uint32_t tokens) const noexcept;
  /// Fits the model; needs at least 3 distinct token counts.
  static recompute_model fit(std::span<const std::pair<std::uint32_t, double>> points);
};

/// Mean absolute percentage error of predictions against measurements.
double mape(std::span<const double> predicted, std::span<const double> measured) noexcept;

struct preempt_candidate {
  std::uint64_t request_id = 0;
  double priority = 0;
  std::uint64_t pages = 0;     ///< device pages it holds
  std::uint32_t seq_len = 0;   ///< prompt + generated (what a recompute prefills)
  std::uint64_t kv_bytes = 0;  ///< what a swap moves
};

enum class preempt_mode : std::uint8_t { swap, recompute };

struct preemption {
  std::uint64_t request_id = 0;
  preempt_mode mode = preempt_mode::recompute;
};

/// Whether a victim holding `pages` (a swap moving `kv_bytes`, a recompute
/// prefilling `seq_len` tokens) is better swapped out than recomputed: the
/// host pool has room for it and the swap is predicted the quicker. With
/// the models unmeasured (bandwidths 0), never.
bool swap_beats_recompute(std::uint64_t pages, std::uint64_t kv_bytes, std::uint32_t seq_len,
                          std::uint64_t host_pages_free, const swap_model& swap,
                          const recompute_model& recompute) noexcept;

/// Algorithm 1: victims, lowest priority first, until `pages_short` pages are
/// freed. A swap needs the victim's pages free in the host pool
/// (`host_pages_free`, consumed as victims are swapped).
std::vector<preemption> choose_preemptions(std::span<const preempt_candidate> running,
                                           std::uint64_t pages_short, std::uint64_t host_pages_free,
                                           const swap_model& swap, const recompute_model& recompute);

} // namespace troupe::policies
