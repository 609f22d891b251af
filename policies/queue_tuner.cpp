#include "policies/queue_tuner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe::policies {

kmeans_result kmeans_1d(std::vector<double> values, std::size_t k) {
  kmeans_result out;
  if (values.empty() || k == 0)
    return out;
  std::sort(values.begin(), values.end());
  k = std::min(k, values.size());
  // Seed at evenly spaced quantiles, then Lloyd's iterations; in 1-D with
  // sorted data the clusters are contiguous ranges.
  std::vector<double> c(k);
  for (std::size_t j = 0; j < k; ++j)
    c[j] = values[(2 * j + 1) * values.size() / (2 * k)];
  std::vector<std::size_t> assign(values.size());
  for (int iter = 0; iter < 100; ++iter) {
    bool changed = false;
    std::size_t j = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      while (j + 1 < k && std::abs(values[i] - c[j + 1]) <= std::abs(values[i] - c[j]))
        ++j;
      changed = changed || assign[i] != j || iter == 0;
      assign[i] = j;
    }
    std::vector<double> sum(k, 0);
    std::vector<std::size_t> n(k, 0);
    for (std::size_t i = 0; i < values.size(); ++i) {
      sum[assign[i]] += values[i];
      ++n[assign[i]];
    }
    for (std::size_t q = 0; q < k; ++q)
      if (n[q] > 0)
        c[q] = sum[q] / static_cast<double>(n[q]);
    std::sort(c.begin(), c.end());
    if (!changed)
      break;
  }
  out.wcss = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    double best = INFINITY;
    for (double x : c)
      best = std::min(best, (values[i] - x) * (values[i] - x));
    out.wcss += best;
  }
  c.erase(std::unique(c.begin(), c.end()), c.end());
  out.centroids = std::move(c);
  return out;
}

queue_tuning tune_queues(std::span<const tuner_sample> samples, const tuner_params& p) {
  queue_tuning t;
  if (samples.empty() || p.max_queues <= 1) {
    t.quotas = {p.total_tokens};
    return t;
  }
  std::vector<double> wrs;
  for (const auto& s : samples)
    wrs.push_back(s.wrs);
  // K: add queues while each removes at least `elbow` of the one-queue
  // WCSS; sizes that hardly spread get one queue.
  auto best = kmeans_1d(wrs, 1);
  const double total = best.wcss;
  const bool spread = std::sqrt(total / static_cast<double>(wrs.size())) >= p.min_spread;
  for (std::size_t k = 2; spread && k <= p.max_queues; ++k) {
    auto next = kmeans_1d(wrs, k);
    if (next.centroids.size() < k || total <= 0 || (best.wcss - next.wcss) / total < p.elbow)
      break;
    best = std::move(next);
  }
  const auto& c = best.centroids;
  for (std::size_t j = 0; j + 1 < c.size(); ++j)
    t.cutoffs.push_back((c[j] + c[j + 1]) / 2);
  const std::size_t k = t.queues();

  // Per queue: largest and total cost, total duration, count (for S, the
  // mean duration T and the arrival rate λ).
  std::vector<double> s_max(k, 0), s_sum(k, 0), t_sum(k, 0), n(k, 0);
  for (const auto& s : samples) {
    const auto q = queue_of(t, s.wrs);
    s_max[q] = std::max(s_max[q], static_cast<double>(s.cost_tokens));
    s_sum[q] += static_cast<double>(s.cost_tokens);
    t_sum[q] += s.duration_s;
    n[q] += 1;
  }
  const double window = p.window_s > 0 ? p.window_s : 1.0;
  std::vector<double> q_min(k, 0), weight(k, 0);
  double min_sum = 0, weight_sum = 0;
  for (std::size_t q = 0; q < k; ++q) {
    const double mean_t = n[q] > 0 ? t_sum[q] / n[q] : 0;
    const double lambda = n[q] / window;
    const double size = p.size == tuner_params::quota_size::mean && n[q] > 0 ? s_sum[q] / n[q] : s_max[q];
    q_min[q] = size * mean_t * (lambda + (p.slo_s > 0 ? 1.0 / p.slo_s : 0.0));
    min_sum += q_min[q];
    weight[q] = static_cast<double>(k - q); // smaller-request queues get more
    weight_sum += weight[q];
  }
  const double pool = static_cast<double>(p.total_tokens);
  for (std::size_t q = 0; q < k; ++q) {
    double quota = 0;
    if (min_sum >= pool) // overloaded: shrink every minimum alike
      quota = min_sum > 0 ? q_min[q] * pool / min_sum : pool / static_cast<double>(k);
    else
      quota = q_min[q] + (pool - min_sum) * weight[q] / weight_sum;
    t.quotas.push_back(static_cast<std::uint64_t>(std::floor(quota)));
  }
  return t;
}

double weighted_request_size(std::uint32_t prompt_tokens, std::uint32_t predicted_tokens,
                             std::uint32_t rank, const wrs_weights& w) {
  auto norm = [](double x, double scale) { return scale > 0 ? std::min(x / scale, 1.0) : 0.0; };
  return w.input * norm(prompt_tokens, w.input_scale) + w.output * norm(predicted_tokens, w.output_scale)
         + w.rank * norm(rank, w.rank_scale);
}

} // namespace troupe::policies
