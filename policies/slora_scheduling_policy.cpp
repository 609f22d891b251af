#include "policies/slora_scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::policies {

std::string slora_scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"slora\""}
    .whole("cluster", cluster_)
    .number("slo_s", slo_s_)
    .number("abort_margin_s", margin_s_)
    .apply(params);
}

std::vector<std::pair<std::string, double>> slora_scheduling_policy::counters() const {
  return {{"slora_aborted", static_cast<double>(aborted_)},
          {"slora_newest_first_rounds", static_cast<double>(newest_first_rounds_)}};
}

schedule_decision slora_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;

  // Early abort, and the order the rest are considered in.
  std::vector<const waiting_view*> order;
  order.reserve(in.waiting.size());
  std::uint64_t arrivals = 0;
  for (const auto& w : in.waiting) {
    if (slo_s_ > 0 && in.now_s - w.arrival_s + margin_s_ >= slo_s_) {
      out.abort.push_back(w.request_id);
      continue;
    }
    arrivals += w.arrival_s > last_now_ ? 1 : 0;
    order.push_back(&w);
  }
  aborted_ += out.abort.size();
  bool newest_first = false;
  if (slo_s_ > 0) {
    rate_est_ = std::floor(0.7 * static_cast<double>(arrivals) + 0.3 * rate_est_);
    newest_first = rate_est_ >= bs_est_;
    if (newest_first) {
      std::reverse(order.begin(), order.end());
      ++newest_first_rounds_;
    }
  }
  last_now_ = in.now_s;

  batch_admission batch{in};
  std::vector<std::uint32_t> batch_adapters(in.adapters_in_use.begin(), in.adapters_in_use.end());
  std::sort(batch_adapters.begin(), batch_adapters.end());
  std::vector<char> taken(order.size(), 0);

  // One pass in `order`; stops at the first request that does not fit.
  // `only_batch_adapters`: skip (without stopping) requests for adapters not
  // in the batch yet.
  auto pass = [&](bool only_batch_adapters) {
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (taken[i])
        continue;
      const auto& w = *order[i];
      if (only_batch_adapters && w.adapter_id != 0
          && !std::binary_search(batch_adapters.begin(), batch_adapters.end(), w.adapter_id))
        continue;
      if (!batch.admit(w, out))
        return;
      taken[i] = 1;
      if (w.adapter_id != 0 && !std::binary_search(batch_adapters.begin(), batch_adapters.end(), w.adapter_id))
        batch_adapters.insert(std::upper_bound(batch_adapters.begin(), batch_adapters.end(), w.adapter_id),
                              w.adapter_id);
    }
  };
  if (cluster_ > 0 && batch_adapters.size() >= cluster_)
    pass(true);
  pass(false);
  if (slo_s_ > 0)
    bs_est_ = std::max(std::floor(0.7 * static_cast<double>(out.admit.size()) + 0.3 * bs_est_), 1.0);
  return out;
}

} // namespace troupe::policies
