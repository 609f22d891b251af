// Predictive adapter prefetch policies: from the arrivals seen per adapter,
// which adapters will be wanted soon, so the adapter cache can load them
// into idle GPU memory before their requests arrive (Chameleon's optional
// predictive prefetch). Wrapped by the prefetcher policy actor. Built-ins:
//   none       predicts nothing (the default: prefetch of queued requests only)
//   histogram  per-adapter histograms of idle times (gaps between arrivals),
//              as in Shahrad et al., "Serverless in the Wild" (ATC'20): after
//              an arrival the adapter is wanted from the gap's low percentile
//              (pre-warm) until its high percentile (keep-alive); with too few
//              or too scattered samples, for a fixed keep-alive instead.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace troupe::policies {

class prefetch_policy {
public:
  virtual ~prefetch_policy() = default;
  /// A request for `adapter_id` arrived.
  virtual void on_request(std::uint32_t adapter_id, double now_s) = 0;
  /// Adapters worth having resident now, most urgent first, at most `max_count`.
  virtual std::vector<std::uint32_t> predict(double now_s, std::size_t max_count) = 0;
  virtual std::string_view name() const noexcept = 0;
  /// "" when accepted, otherwise what was wrong; the default takes none.
  virtual std::string configure(const std::map<std::string, double>& params);
};

class none_prefetch_policy final : public prefetch_policy {
public:
  void on_request(std::uint32_t, double) override {}
  std::vector<std::uint32_t> predict(double, std::size_t) override { return {}; }
  std::string_view name() const noexcept override { return "none"; }
};

struct histogram_params {
  double bin_seconds = 1.0;        ///< width of an idle-time bin
  double bins = 600;               ///< bins; gaps beyond bins·bin_seconds are out of range
  double prewarm_percentile = 5;   ///< wanted from this percentile of the gaps ...
  double keepalive_percentile = 99; ///< ... until this one
  double min_samples = 4;          ///< fewer gaps: fixed keep-alive
  double max_out_of_range = 0.5;   ///< a larger share of long gaps: fixed keep-alive
  double fallback_keepalive_s = 60; ///< the fixed keep-alive after an arrival
};

class histogram_prefetch_policy final : public prefetch_policy {
public:
  explicit histogram_prefetch_policy(histogram_params p = {}) : p_(p) {}
  void on_request(std::uint32_t adapter_id, double now_s) override;
  std::vector<std::uint32_t> predict(double now_s, std::size_t max_count) override;
  std::string_view name() const noexcept override { return "histogram"; }
  /// Keys: the fields of histogram_params.
  std::string configure(const std::map<std::string, double>& params) override;

  /// The window [from, until] in which `adapter_id` is wanted; {0, -1} if none.
  std::pair<double, double> window(std::uint32_t adapter_id) const;

private:
  struct adapter {
    double last_s = -1;
    std::uint64_t arrivals = 0;
    std::uint64_t gaps = 0;
    std::uint64_t out_of_range = 0;
    std::vector<std::uint32_t> counts; // allocated on the first in-range gap
    double from = 0, until = -1;       // the pending window
  };
  /// (window start, -arrivals, id): earliest first, then the busier adapter.
  using key = std::tuple<double, std::int64_t, std::uint32_t>;

  double percentile_gap(const adapter& a, double pct, bool upper_edge) const;

  histogram_params p_;
  std::unordered_map<std::uint32_t, adapter> adapters_;
  std::set<key> pending_;
};

/// Builds the named prefetch policy; nullptr when unknown.
std::unique_ptr<prefetch_policy> make_prefetch_policy(const std::string& name);
/// Known names, sorted.
std::vector<std::string> prefetch_policy_names();

} // namespace troupe::policies
