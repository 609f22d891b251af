// Apt-Serve's greedy selection (§4.3-4.7, Algorithm 1): which candidates to
// schedule this iteration and with which cache (a KV cache of m pages, or a
// hidden cache of about m/2 that recomputes K and V at a time cost). Each
// request's value is its pending time p minus the delay a hidden cache puts
// on everyone, N·ρ·m; candidates past their SLO are demoted to a near-zero
// value. Marginal-gain items (hidden step, then the upgrade to KV; or KV
// only) are taken by value per page until one does not fit; a single
// request taken whole replaces the greedy set when it is worth more (the
// single-request fallback that makes it a 2-approximation). Pure code; the
// aptserve scheduling policy builds on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::policies {

struct apt_candidate {
  std::uint64_t request_id = 0;
  double pending_s = 0;       ///< p: time since arrival (not prefilled) or the last token
  std::uint64_t kv_pages = 0; ///< m: its footprint as a KV cache
  bool violated = false;      ///< already past its SLO: demoted
  bool hidden_capable = true; ///< the model may hold this request's cache as hidden states
};

struct apt_choice {
  std::uint64_t request_id = 0;
  bool hidden = false;     ///< hidden cache (else KV)
  std::uint64_t pages = 0; ///< pages granted
  friend bool operator==(const apt_choice&, const apt_choice&) = default;
};

struct apt_selection {
  std::vector<apt_choice> chosen; ///< in the order taken
  double value = 0;               ///< Σ θ·Δm of what was taken
  bool fallback = false;          ///< the single-request alternative won
};

struct apt_params {
  /// ρ: seconds a hidden-cache page adds to an iteration.
  double rho = 0;
  /// N: requests affected by a slower iteration (waiting + running, less
  /// those already past their SLO).
  std::size_t affected = 0;
  /// Value per page of a demoted (SLO-violated) candidate.
  double demoted_value = 1e-6;
  /// When > 0, a violated candidate keeps this share of its value (KV only)
  /// instead of the near-zero constant: Apt-Serve's "Scheduling*" (0.4),
  /// which starves late requests less.
  double violated_decay = 0;
  /// Compare against the single-request alternative (Algorithm 1, step 4).
  bool fallback = true;
};

/// Algorithm 1 over `candidates` within `budget_pages`.
apt_selection apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages,
                         const apt_params& p);

} // namespace troupe::policies
