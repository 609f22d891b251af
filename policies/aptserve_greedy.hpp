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
  std::size_t candidate = 0; ///< its index in the candidates (not compared)
  friend bool operator==(const apt_choice& a, const apt_choice& b) {
    return a.request_id == b.request_id && a.hidden == b.hidden && a.pages == b.pages;
  }
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

/// One marginal-gain step of a candidate, as the greedy orders them.
struct apt_item {
  double theta = 0;          ///< value per page
  std::size_t candidate = 0;
  std::uint64_t pages = 0;
  bool hidden_step = false;  ///< the 0 -> m/2 step (else KV-only or the upgrade)
  int order = 0;             ///< a request's hidden step sorts before its upgrade
};

/// Buffers the greedy reuses: a policy keeps one, so an iteration over a
/// long queue allocates nothing once they have grown.
struct apt_workspace {
  std::vector<apt_item> items;
  std::vector<std::int64_t> taken; ///< candidate -> index in chosen (-1: not taken)
};

/// Algorithm 1 over `candidates` within `budget_pages`, into `out`.
void apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages, const apt_params& p,
                apt_workspace& ws, apt_selection& out);
/// The same with buffers of its own.
apt_selection apt_greedy(std::span<const apt_candidate> candidates, std::uint64_t budget_pages,
                         const apt_params& p);

} // namespace troupe::policies
