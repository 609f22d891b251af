#include "policies/disk_fetch.hpp"

#include <set>

namespace troupe::policies {

double disk_fetch_model::read_seconds(std::uint64_t bytes, std::uint64_t queued_bytes) const noexcept {
  const double b = static_cast<double>(bytes);
  double s = (static_cast<double>(queued_bytes) + b) / disk_bytes_per_s;
  if (h2d_bytes_per_s > 0)
    s += b / h2d_bytes_per_s;
  return s;
}

bool disk_fetch_model::worth(double disk_seconds, std::uint32_t tokens, std::size_t running) const noexcept {
  return disk_seconds <= max_wait_s && disk_seconds <= recompute.seconds(tokens) * static_cast<double>(1 + running);
}

bool disk_fetch_model::read(std::uint64_t bytes, std::uint32_t tokens, std::uint64_t queued_bytes,
                            std::size_t running) const noexcept {
  return !fitted || !(disk_bytes_per_s > 0) || worth(read_seconds(bytes, queued_bytes), tokens, running);
}

bool disk_fetch_model::write(std::uint64_t bytes, std::uint32_t tokens, std::uint64_t queued_bytes,
                             std::size_t running) const noexcept {
  return !fitted || !(disk_bytes_per_s > 0)
         || worth((static_cast<double>(queued_bytes) + static_cast<double>(bytes)) / disk_bytes_per_s, tokens,
                  running);
}

disk_fetch_model disk_fetch_model::from(const cost_calibration& c, double disk_bytes_per_s) {
  disk_fetch_model m;
  m.disk_bytes_per_s = disk_bytes_per_s;
  m.h2d_bytes_per_s = c.h2d_bytes_per_s;
  std::set<std::uint32_t> lengths;
  for (const auto& [n, t] : c.prefill_points)
    if (t > 0)
      lengths.insert(n);
  m.fitted = lengths.size() >= 3;
  if (m.fitted)
    m.recompute = recompute_model::fit(c.prefill_points);
  return m;
}

} // namespace troupe::policies
