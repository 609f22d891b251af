#include "policies/prefetch_policy.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace troupe::policies {

namespace {

std::string unknown_key(std::string_view policy, const std::string& key) {
  std::ostringstream out;
  out << "prefetch policy '" << policy << "': unknown parameter '" << key << "'";
  return out.str();
}

std::string bad_value(std::string_view policy, const std::string& key, double value,
                      std::string_view rule) {
  std::ostringstream out;
  out << "prefetch policy '" << policy << "': " << key << " = " << value << " " << rule;
  return out.str();
}

bool whole_in(double v, double lo, double hi) {
  return v >= lo && v <= hi && std::floor(v) == v;
}

} // namespace

// -- interface -------------------------------------------------------------------

std::string prefetch_policy::configure(const std::map<std::string, double>& params) {
  if (params.empty())
    return {};
  return unknown_key(name(), params.begin()->first);
}

// -- histogram ---------------------------------------------------------------------

bool histogram_prefetch_policy::window_order::operator()(const window_key& a,
                                                         const window_key& b) const noexcept {
  if (a.start_s != b.start_s)
    return a.start_s < b.start_s;
  if (a.requests != b.requests)
    return a.requests > b.requests;
  return a.adapter_id < b.adapter_id;
}

void histogram_prefetch_policy::on_request(std::uint32_t adapter_id, double now_s) {
  if (!std::isfinite(now_s))
    return;
  auto& s = adapters_[adapter_id];
  if (s.window)
    pending_.erase(window_key{s.window->start_s, s.requests, adapter_id});
  if (s.requests > 0) {
    // A clock that steps back counts as an idle time of 0.
    record_idle(s, std::max(0.0, now_s - s.last_s));
    s.last_s = std::max(s.last_s, now_s);
  } else {
    s.last_s = now_s;
  }
  ++s.requests;
  s.window = next_window(s);
  if (s.window->end_s > s.window->start_s)
    pending_.emplace(window_key{s.window->start_s, s.requests, adapter_id}, s.window->end_s);
}

std::vector<std::uint32_t> histogram_prefetch_policy::predict(double now_s,
                                                              std::size_t max_count) {
  std::vector<std::uint32_t> out;
  auto it = pending_.begin();
  while (out.size() < max_count && it != pending_.end() && it->first.start_s <= now_s) {
    if (it->second <= now_s) {
      it = pending_.erase(it);
      continue;
    }
    out.push_back(it->first.adapter_id);
    ++it;
  }
  return out;
}

std::string histogram_prefetch_policy::configure(const std::map<std::string, double>& params) {
  auto p = params_;
  for (const auto& [key, v] : params) {
    std::string_view rule;
    if (key == "bin_seconds") {
      if (!(v > 0 && std::isfinite(v)))
        rule = "must be finite and > 0";
      else
        p.bin_seconds = v;
    } else if (key == "bins") {
      if (!whole_in(v, 1, 1'000'000))
        rule = "must be a whole number in [1, 1000000]";
      else
        p.bins = static_cast<std::uint32_t>(v);
    } else if (key == "prewarm_percentile") {
      if (!(v >= 0 && v <= 100))
        rule = "must be in [0, 100]";
      else
        p.prewarm_percentile = v;
    } else if (key == "keepalive_percentile") {
      if (!(v >= 0 && v <= 100))
        rule = "must be in [0, 100]";
      else
        p.keepalive_percentile = v;
    } else if (key == "margin") {
      if (!(v >= 0 && v < 1))
        rule = "must be in [0, 1)";
      else
        p.margin = v;
    } else if (key == "min_samples") {
      if (!whole_in(v, 1, 1e9))
        rule = "must be a whole number in [1, 1e9]";
      else
        p.min_samples = static_cast<std::uint32_t>(v);
    } else if (key == "max_out_of_range") {
      if (!(v >= 0 && v <= 1))
        rule = "must be in [0, 1]";
      else
        p.max_out_of_range = v;
    } else if (key == "min_cv") {
      if (!(v >= 0 && std::isfinite(v)))
        rule = "must be finite and >= 0";
      else
        p.min_cv = v;
    } else if (key == "fallback_keepalive_s") {
      if (!(v >= 0 && std::isfinite(v)))
        rule = "must be finite and >= 0";
      else
        p.fallback_keepalive_s = v;
    } else {
      return unknown_key(name(), key);
    }
    if (!rule.empty())
      return bad_value(name(), key, v, rule);
  }
  if (p.prewarm_percentile > p.keepalive_percentile) {
    std::ostringstream out;
    out << "prefetch policy '" << name() << "': prewarm_percentile = " << p.prewarm_percentile
        << " must not exceed keepalive_percentile = " << p.keepalive_percentile;
    return out.str();
  }
  if (p.bin_seconds != params_.bin_seconds || p.bins != params_.bins) {
    adapters_.clear();
    pending_.clear();
  }
  params_ = p;
  // Windows already pending keep the tunables they were computed with; the
  // next request of each adapter uses the new ones.
  return {};
}

std::optional<prefetch_window> histogram_prefetch_policy::window(std::uint32_t adapter_id) const {
  auto it = adapters_.find(adapter_id);
  if (it == adapters_.end())
    return std::nullopt;
  return it->second.window;
}

void histogram_prefetch_policy::record_idle(adapter_state& s, double idle_s) const {
  const double bin = idle_s / params_.bin_seconds;
  if (!(bin < static_cast<double>(params_.bins))) {
    ++s.out_of_range;
    return;
  }
  if (s.counts.empty())
    s.counts.assign(params_.bins, 0);
  auto& c = s.counts[static_cast<std::size_t>(bin)];
  s.sum_squares += 2 * std::uint64_t{c} + 1; // (c + 1)^2 - c^2
  ++c;
  ++s.in_range;
}

bool histogram_prefetch_policy::representative(const adapter_state& s) const {
  const std::uint64_t samples = s.in_range + s.out_of_range;
  if (samples < params_.min_samples || s.in_range == 0)
    return false;
  if (static_cast<double>(s.out_of_range) > params_.max_out_of_range * static_cast<double>(samples))
    return false;
  // CV^2 = variance / mean^2 = bins * sum(c^2) / n^2 - 1 over all bins.
  const double n = static_cast<double>(s.in_range);
  const double cv2 =
    std::max(0.0, static_cast<double>(params_.bins) * static_cast<double>(s.sum_squares) / (n * n) - 1);
  return cv2 >= params_.min_cv * params_.min_cv;
}

prefetch_window histogram_prefetch_policy::next_window(const adapter_state& s) const {
  if (!representative(s))
    return {s.last_s, s.last_s + params_.fallback_keepalive_s, false};
  const std::uint64_t samples = s.in_range + s.out_of_range;
  // Nearest rank: the smallest rank r with r >= p% of the samples, at least 1.
  auto rank = [&](double percentile) {
    const auto r = static_cast<std::uint64_t>(std::ceil(percentile * static_cast<double>(samples) / 100));
    return std::max<std::uint64_t>(r, 1);
  };
  const std::uint64_t head_rank = rank(params_.prewarm_percentile);
  const std::uint64_t tail_rank = rank(params_.keepalive_percentile);
  // Out-of-range idle times rank after every bin: their edge is the range's end.
  const double range_s = params_.bin_seconds * params_.bins;
  double head_s = range_s;
  double tail_s = range_s;
  std::uint64_t seen = 0;
  bool head_found = false;
  for (std::size_t k = 0; k < s.counts.size(); ++k) {
    seen += s.counts[k];
    if (!head_found && seen >= head_rank) {
      head_s = params_.bin_seconds * static_cast<double>(k);
      head_found = true;
    }
    if (seen >= tail_rank) {
      tail_s = params_.bin_seconds * static_cast<double>(k + 1);
      break;
    }
  }
  return {s.last_s + (1 - params_.margin) * head_s, s.last_s + (1 + params_.margin) * tail_s, true};
}

// -- registry ----------------------------------------------------------------------

std::unique_ptr<prefetch_policy> make_prefetch_policy(const std::string& name) {
  if (name == "histogram")
    return std::make_unique<histogram_prefetch_policy>();
  if (name == "none")
    return std::make_unique<none_prefetch_policy>();
  return nullptr;
}

std::vector<std::string> prefetch_policy_names() { return {"histogram", "none"}; }

} // namespace troupe::policies
