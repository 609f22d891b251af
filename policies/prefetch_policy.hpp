// The prefetch policy interface: which adapters are worth having in GPU memory
// before a request for them is queued. Fed every arrival, asked now and then
// which adapters to load or keep; "none" is the baseline, "histogram" the
// idle-time histogram predictor of Shahrad et al. (ATC'20) that Chameleon's
// optional predictive prefetch uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::policies {

// -- interface -------------------------------------------------------------------

/// Predicts which adapters will be needed soon. Called from one thread at a
/// time, with non-decreasing times across on_request() and predict().
class prefetch_policy {
public:
  virtual ~prefetch_policy() = default;
  /// A request for `adapter_id` arrived at `now_s`.
  virtual void on_request(std::uint32_t adapter_id, double now_s) = 0;
  /// Adapters worth having resident at `now_s`, most urgent first, at most
  /// `max_count` of them.
  virtual std::vector<std::uint32_t> predict(double now_s, std::size_t max_count) = 0;
  /// Registry name of this policy.
  virtual std::string_view name() const noexcept = 0;
  /// Sets tunables by name. Returns "" when every one was accepted, else an
  /// error naming the bad key or value, and then changes nothing. The default
  /// accepts only an empty map.
  virtual std::string configure(const std::map<std::string, double>& params);
};

// -- none --------------------------------------------------------------------------

/// Predicts nothing: adapters are loaded only when a queued request needs them.
class none_prefetch_policy final : public prefetch_policy {
public:
  void on_request(std::uint32_t, double) override {}
  std::vector<std::uint32_t> predict(double, std::size_t) override { return {}; }
  std::string_view name() const noexcept override { return "none"; }
};

// -- histogram ---------------------------------------------------------------------

/// Tunables of histogram_prefetch_policy; configure() keys have the same names.
struct histogram_prefetch_params {
  double bin_seconds = 1;           ///< width of one idle-time bin
  std::uint32_t bins = 600;         ///< idle times >= bins * bin_seconds are out of range
  double prewarm_percentile = 5;    ///< the window opens at this percentile of idle times
  double keepalive_percentile = 99; ///< and closes at this one
  /// The window opens at (1 - margin) x the pre-warm idle time and closes at
  /// (1 + margin) x the keep-alive one.
  double margin = 0.1;
  std::uint32_t min_samples = 5;    ///< idle times needed before the histogram is trusted
  double max_out_of_range = 0.5;    ///< fraction of idle times out of range allowed
  double min_cv = 2;                ///< coefficient of variation of bin counts needed
  /// Otherwise (the standard keep-alive): wanted for this long after each
  /// request; 0: not at all.
  double fallback_keepalive_s = 60;
};

/// When an adapter is expected again: wanted from start_s until before end_s.
struct prefetch_window {
  double start_s = 0;
  double end_s = 0;
  bool from_histogram = false; ///< false: the fallback keep-alive
};

/// Per adapter, a histogram of idle times (gaps between its consecutive
/// requests) in `bins` bins of `bin_seconds`. After each request the adapter
/// is wanted from the pre-warm percentile of its idle times until the
/// keep-alive percentile (nearest rank, bin edges, out-of-range idle times
/// ranked last at the range's end). While the histogram is not representative
/// (fewer than min_samples idle times, more than max_out_of_range of them out
/// of range, or bin counts with a coefficient of variation below min_cv) it is
/// wanted for fallback_keepalive_s after each request instead.
///
/// Memory: a few words per adapter seen, plus 4 x bins bytes once it has an
/// in-range idle time; at most one pending window per adapter. predict() walks
/// pending windows in order of start and stops at the first one not yet open,
/// so it costs the adapters wanted plus the expired windows it drops.
class histogram_prefetch_policy final : public prefetch_policy {
public:
  void on_request(std::uint32_t adapter_id, double now_s) override;
  /// Adapters whose window holds `now_s`, by window start, then by more
  /// requests, then by lower id. Drops the windows that have ended.
  std::vector<std::uint32_t> predict(double now_s, std::size_t max_count) override;
  std::string_view name() const noexcept override { return "histogram"; }
  /// Keys: the fields of histogram_prefetch_params. Changing bin_seconds or
  /// bins forgets every adapter's history.
  std::string configure(const std::map<std::string, double>& params) override;

  const histogram_prefetch_params& params() const noexcept { return params_; }
  /// The window computed at the adapter's last request (it may have ended).
  std::optional<prefetch_window> window(std::uint32_t adapter_id) const;
  /// Adapters seen so far.
  std::size_t tracked() const noexcept { return adapters_.size(); }
  /// Windows waiting in the ordered structure (ended ones leave it in predict()).
  std::size_t pending() const noexcept { return pending_.size(); }

private:
  struct adapter_state {
    double last_s = 0;
    std::uint64_t requests = 0;
    std::uint64_t in_range = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t sum_squares = 0;      ///< of the bin counts, for their variance
    std::vector<std::uint32_t> counts;  ///< empty until the first in-range idle time
    std::optional<prefetch_window> window;
  };
  struct window_key {
    double start_s = 0;
    std::uint64_t requests = 0;
    std::uint32_t adapter_id = 0;
  };
  struct window_order {
    bool operator()(const window_key& a, const window_key& b) const noexcept;
  };

  void record_idle(adapter_state& s, double idle_s) const;
  bool representative(const adapter_state& s) const;
  prefetch_window next_window(const adapter_state& s) const;

  histogram_prefetch_params params_;
  std::unordered_map<std::uint32_t, adapter_state> adapters_;
  std::map<window_key, double, window_order> pending_; ///< -> end_s
};

// -- registry ----------------------------------------------------------------------

/// Builds the named prefetch policy; nullptr when no policy has that name.
std::unique_ptr<prefetch_policy> make_prefetch_policy(const std::string& name);
/// Prefetch policy names, sorted.
std::vector<std::string> prefetch_policy_names();

} // namespace troupe::policies
