#include "policies/prefetch_policy.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::policies {

std::string prefetch_policy::configure(const std::map<std::string, double>& params) {
  if (params.empty())
    return {};
  return "predictor \"" + std::string{name()} + "\" takes no parameters; got \"" + params.begin()->first
         + "\"";
}

double histogram_prefetch_policy::percentile_gap(const adapter& a, double pct, bool upper_edge) const {
  std::uint64_t in_range = 0;
  for (auto c : a.counts)
    in_range += c;
  const double target = std::max(1.0, std::ceil(pct / 100.0 * static_cast<double>(in_range)));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < a.counts.size(); ++b) {
    seen += a.counts[b];
    if (static_cast<double>(seen) >= target)
      return (static_cast<double>(b) + (upper_edge ? 1.0 : 0.0)) * p_.bin_seconds;
  }
  return static_cast<double>(a.counts.size()) * p_.bin_seconds;
}

void histogram_prefetch_policy::on_request(std::uint32_t id, double now_s) {
  auto& a = adapters_[id];
  if (a.until >= a.from)
    pending_.erase({a.from, -static_cast<std::int64_t>(a.arrivals), id});
  if (a.last_s >= 0) {
    const double gap = std::max(0.0, now_s - a.last_s);
    ++a.gaps;
    const auto bins = static_cast<std::size_t>(std::max(1.0, p_.bins));
    const auto bin = static_cast<std::size_t>(gap / p_.bin_seconds);
    if (bin >= bins) {
      ++a.out_of_range;
    } else {
      if (a.counts.empty())
        a.counts.assign(bins, 0);
      ++a.counts[bin];
    }
  }
  ++a.arrivals;
  a.last_s = now_s;
  const std::uint64_t in_range = a.gaps - a.out_of_range;
  const bool representative = static_cast<double>(a.gaps) >= p_.min_samples && in_range > 0
                              && static_cast<double>(a.out_of_range)
                                   <= p_.max_out_of_range * static_cast<double>(a.gaps);
  if (representative) {
    a.from = now_s + percentile_gap(a, p_.prewarm_percentile, false);
    a.until = now_s + percentile_gap(a, p_.keepalive_percentile, true);
  } else {
    a.from = now_s;
    a.until = now_s + p_.fallback_keepalive_s;
  }
  pending_.insert({a.from, -static_cast<std::int64_t>(a.arrivals), id});
}

std::vector<std::uint32_t> histogram_prefetch_policy::predict(double now_s, std::size_t max_count) {
  std::vector<std::uint32_t> out;
  for (auto i = pending_.begin(); i != pending_.end() && std::get<0>(*i) <= now_s;) {
    const auto id = std::get<2>(*i);
    auto& a = adapters_.at(id);
    if (a.until < now_s) {
      // The window passed without an arrival: not wanted any more.
      a.until = a.from - 1;
      i = pending_.erase(i);
      continue;
    }
    if (out.size() < max_count)
      out.push_back(id);
    ++i;
  }
  return out;
}

std::pair<double, double> histogram_prefetch_policy::window(std::uint32_t id) const {
  auto i = adapters_.find(id);
  if (i == adapters_.end() || i->second.until < i->second.from)
    return {0, -1};
  return {i->second.from, i->second.until};
}

std::string histogram_prefetch_policy::configure(const std::map<std::string, double>& params) {
  histogram_params p = p_;
  for (const auto& [key, value] : params) {
    double* slot = key == "bin_seconds"            ? &p.bin_seconds
                   : key == "bins"                 ? &p.bins
                   : key == "prewarm_percentile"   ? &p.prewarm_percentile
                   : key == "keepalive_percentile" ? &p.keepalive_percentile
                   : key == "min_samples"          ? &p.min_samples
                   : key == "max_out_of_range"     ? &p.max_out_of_range
                   : key == "fallback_keepalive_s" ? &p.fallback_keepalive_s
                                                   : nullptr;
    if (slot == nullptr)
      return "predictor \"histogram\" has no parameter \"" + key + "\"";
    if (!std::isfinite(value) || value < 0)
      return "parameter \"" + key + "\" must be a finite number >= 0, got " + std::to_string(value);
    *slot = value;
  }
  if (p.bin_seconds <= 0 || p.bins < 1)
    return "bin_seconds must be positive and bins at least 1";
  if (p.prewarm_percentile > p.keepalive_percentile || p.keepalive_percentile > 100)
    return "need prewarm_percentile <= keepalive_percentile <= 100";
  p_ = p;
  return {};
}

std::unique_ptr<prefetch_policy> make_prefetch_policy(const std::string& name) {
  if (name == "none")
    return std::make_unique<none_prefetch_policy>();
  if (name == "histogram")
    return std::make_unique<histogram_prefetch_policy>();
  return nullptr;
}

std::vector<std::string> prefetch_policy_names() { return {"histogram", "none"}; }

} // namespace troupe::policies
