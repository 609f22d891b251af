// Symphony's disk tier under AdaptiveLLM's rule: a turn whose session cache
// waits in a file reads it back only when that is predicted to be no slower
// than computing the cached tokens again. The read's time counts what the
// disk has queued ahead of it, so a busy disk sends turns to the GPU and an
// idle GPU takes short histories itself. Pure: the scheduler core asks, the
// live server and the simulator fit it the same way at start-up.
#pragma once

#include "policies/adaptive_preemption.hpp"
#include "policies/cost_calibration.hpp"

#include <cstdint>

namespace troupe::policies {

struct disk_fetch_model {
  double disk_bytes_per_s = 0; ///< the disk's sustained rate (one transfer at a time)
  double h2d_bytes_per_s = 0;  ///< host to GPU (0: unmeasured, not counted)
  recompute_model recompute;
  bool fitted = false; ///< the recompute model came from at least 3 measured points
  /// The longest a turn (or a cache leaving the GPU) may wait on the disk.
  double max_wait_s = 1.0;

  /// Seconds until a cache of `bytes` asked for now is on the GPU: the
  /// disk's work queued ahead (`queued_bytes`), its own read, the copy up.
  double read_seconds(std::uint64_t bytes, std::uint64_t queued_bytes) const noexcept;
  /// True: read the cache back; false: recompute its `tokens`. True whenever
  /// the model cannot tell (not fitted, or no disk rate).
  bool read(std::uint64_t bytes, std::uint32_t tokens, std::uint64_t queued_bytes,
            std::size_t running = 0) const noexcept;
  /// A host cache pushed out on demand (something waits for its pages):
  /// true to write it to disk, false to drop it, when the write would end
  /// later than recomputing its `tokens` would take. True whenever the
  /// model cannot tell.
  bool write(std::uint64_t bytes, std::uint32_t tokens, std::uint64_t queued_bytes,
             std::size_t running = 0) const noexcept;
  /// From the start-up measurements and the disk's rate.
  static disk_fetch_model from(const cost_calibration& c, double disk_bytes_per_s);

private:
  /// Whether `disk_seconds` on the disk beats recomputing `tokens` while
  /// `running` requests wait on the GPU for it, within max_wait_s.
  bool worth(double disk_seconds, std::uint32_t tokens, std::size_t running) const noexcept;
};

} // namespace troupe::policies
