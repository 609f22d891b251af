#include "policies/adaptive_preemption.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::policies {

double adaptive_priority(double now_s, double first_arrival_s, std::uint32_t seq_len) noexcept {
  return (now_s - first_arrival_s) / static_cast<double>(std::max<std::uint32_t>(seq_len, 1));
}

double mean_priority(std::span<const double> p) noexcept {
  if (p.empty())
    return -std::numeric_limits<double>::infinity();
  double sum = 0;
  for (double x : p)
    sum += x;
  return sum / static_cast<double>(p.size());
}

double swap_model::seconds(std::uint64_t kv_bytes) const noexcept {
  const double b = static_cast<double>(kv_bytes);
  const double out = d2h_bytes_per_s > 0 ? b / d2h_bytes_per_s : std::numeric_limits<double>::infinity();
  const double in = h2d_bytes_per_s > 0 ? b / h2d_bytes_per_s : std::numeric_limits<double>::infinity();
  return out + in;
}

double recompute_model::seconds(std::uint32_t tokens) const noexcept {
  const double n = tokens;
  return std::max(0.0, a + b * n + c * n * n);
}

recompute_model recompute_model::fit(std::span<const std::pair<std::uint32_t, double>> points) {
  // Normal equations of least squares in (1, n, n²), with n scaled to keep
  // them well conditioned, solved by Gaussian elimination.
  double scale = 1;
  for (const auto& [n, t] : points)
    scale = std::max(scale, static_cast<double>(n));
  double m[3][4] = {};
  for (const auto& [n, t] : points) {
    const double x = n / scale;
    const double row[3] = {1, x, x * x};
    // Relative least squares (weight 1/t²): short prefills count as much as
    // long ones, which is what a percentage error measures.
    const double w = t > 0 ? 1.0 / (t * t) : 1.0;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j)
        m[i][j] += w * row[i] * row[j];
      m[i][3] += w * row[i] * t;
    }
  }
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::abs(m[r][col]) > std::abs(m[pivot][col]))
        pivot = r;
    for (int k = 0; k < 4; ++k)
      std::swap(m[col][k], m[pivot][k]);
    if (std::abs(m[col][col]) < 1e-300)
      return {};
    for (int r = 0; r < 3; ++r) {
      if (r == col)
        continue;
      const double f = m[r][col] / m[col][col];
      for (int k = col; k < 4; ++k)
        m[r][k] -= f * m[col][k];
    }
  }
  recompute_model out;
  out.a = m[0][3] / m[0][0];
  out.b = m[1][3] / m[1][1] / scale;
  out.c = m[2][3] / m[2][2] / (scale * scale);
  return out;
}

double mape(std::span<const double> predicted, std::span<const double> measured) noexcept {
  const auto n = std::min(predicted.size(), measured.size());
  double sum = 0;
  std::size_t used = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (measured[i] == 0)
      continue;
    sum += std::abs(predicted[i] - measured[i]) / std::abs(measured[i]);
    ++used;
  }
  return used == 0 ? 0 : 100.0 * sum / static_cast<double>(used);
}

bool swap_beats_recompute(std::uint64_t pages, std::uint64_t kv_bytes, std::uint32_t seq_len,
                          std::uint64_t host_pages_free, const swap_model& swap,
                          const recompute_model& recompute) noexcept {
  // The predictors are consulted only when the host pool has room.
  return pages <= host_pages_free && swap.seconds(kv_bytes) < recompute.seconds(seq_len);
}

std::vector<preemption> choose_preemptions(std::span<const preempt_candidate> running,
                                           std::uint64_t pages_short, std::uint64_t host_pages_free,
                                           const swap_model& swap, const recompute_model& recompute) {
  std::vector<const preempt_candidate*> order;
  for (const auto& r : running)
    order.push_back(&r);
  // Lowest priority first; ties: the later id (the younger request) first.
  std::sort(order.begin(), order.end(), [](auto* x, auto* y) {
    if (x->priority != y->priority)
      return x->priority < y->priority;
    return x->request_id > y->request_id;
  });
  std::vector<preemption> out;
  std::uint64_t freed = 0;
  for (auto* r : order) {
    if (freed >= pages_short)
      break;
    preemption p{r->request_id, preempt_mode::recompute};
    if (swap_beats_recompute(r->pages, r->kv_bytes, r->seq_len, host_pages_free, swap, recompute)) {
      p.mode = preempt_mode::swap;
      host_pages_free -= r->pages;
    }
    out.push_back(p);
    freed += r->pages;
  }
  return out;
}

} // namespace troupe::policies
