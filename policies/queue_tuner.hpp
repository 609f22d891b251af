// The queue tuner (Chameleon §4.7-4.9): from the weighted request sizes (WRS)
// of recent requests, choose K <= 4 queues by 1-D K-means with an elbow rule,
// cut-offs at the midpoints between sorted centroids, and per-queue token
// quotas: each queue gets Q_min = S·T·(λ + 1/SLO) (S its largest request in
// tokens, T its mean duration, λ its arrival rate), and what the pool holds
// beyond the sum is split by weights that fall with the queue's size. Pure
// functions; the queue_tuner policy actor runs them every period.
#pragma once

#include "policies/queue_tuning.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::policies {

/// One recent request.
struct tuner_sample {
  double arrival_s = 0;
  double wrs = 0;
  std::uint64_t cost_tokens = 0; ///< input + predicted output + adapter tokens
  double duration_s = 0;         ///< predicted or measured time in the system
};

struct tuner_params {
  std::size_t max_queues = 4;
  /// Stop adding queues once one more lowers the within-cluster sum of
  /// squares by less than this share of the one-queue sum (the elbow).
  double elbow = 0.05;
  /// One queue when the WRS values spread less than this (standard deviation).
  double min_spread = 0.02;
  double slo_s = 5.0;
  /// S in each queue's minimum quota S·T·(λ + 1/SLO): the largest cost in
  /// the queue (Chameleon's slot model: Q/S slots of the biggest request),
  /// or the mean cost (Little's law: the tokens the queue's requests hold
  /// on average), which sizes queues of widely spread requests by what they
  /// use rather than by their largest.
  enum class quota_size { max, mean } size = quota_size::max;
  /// Seconds of history the samples span (for arrival rates).
  double window_s = 300.0;
  /// Tokens the pool holds (pages × tokens per page).
  std::uint64_t total_tokens = 0;
};

/// Sorted centroids of `values` for `k` clusters and their within-cluster sum
/// of squares; deterministic (quantile seeding, Lloyd iterations).
struct kmeans_result {
  std::vector<double> centroids;
  double wcss = 0;
};
kmeans_result kmeans_1d(std::vector<double> values, std::size_t k);

/// Cut-offs and quotas for `samples`; one queue holding every token when
/// there are no samples.
queue_tuning tune_queues(std::span<const tuner_sample> samples, const tuner_params& p);

/// Chameleon's weighted request size: 0.3·input + 0.5·predicted output +
/// 0.2·rank, each normalised to [0, 1] by the given scales.
struct wrs_weights {
  double input = 0.3, output = 0.5, rank = 0.2;
  double input_scale = 4096, output_scale = 1024, rank_scale = 128;
};
double weighted_request_size(std::uint32_t prompt_tokens, std::uint32_t predicted_tokens,
                             std::uint32_t rank, const wrs_weights& w = {});

} // namespace troupe::policies
