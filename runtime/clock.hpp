// The wall clock the live server's shells use (the cores take time as a
// parameter; the simulator passes its virtual clock instead).
#pragma once

#include <chrono>

namespace troupe {

/// Seconds on a monotonic clock; only differences are meaningful.
inline double monotonic_seconds() noexcept {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// `seconds` as a delay for a timer (microseconds; CAF's delayed_send).
inline std::chrono::microseconds seconds_span(double seconds) noexcept {
  using namespace std::chrono;
  return duration_cast<microseconds>(duration<double>(seconds));
}

} // namespace troupe
