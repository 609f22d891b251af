#include "actors/metrics_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/request_state.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

namespace troupe {

namespace {

/// The last `capacity` samples, for percentiles.
class recent_samples {
public:
  void add(double x) {
    if (values_.size() < capacity)
      values_.push_back(x);
    else
      values_[next_++ % capacity] = x;
  }
  double percentile(double p) const {
    if (values_.empty())
      return 0;
    auto v = values_;
    const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }

private:
  static constexpr std::size_t capacity = 4096;
  std::vector<double> values_;
  std::size_t next_ = 0;
};

struct metrics_state {
  static inline const char* name = "metrics";
  metrics_options opts;
  double started_s = 0;
  std::uint64_t steps = 0;
  std::uint64_t step_tokens = 0;
  std::uint64_t batch_sum = 0;
  double device_seconds = 0;
  std::uint64_t output_tokens = 0;
  std::array<std::uint64_t, finish_reasons> finished{};
  recent_samples ttft_ms, e2e_ms, queue_ms;
  std::uint64_t last_tokens = 0;
  double last_log_s = 0;
};

using self_ptr = metrics_actor::stateful_pointer<metrics_state>;

metrics_actor::behavior_type metrics_impl(self_ptr self, metrics_options opts) {
  auto& st = self->state;
  st.opts = opts;
  st.started_s = st.last_log_s = monotonic_seconds();
  const auto interval = std::chrono::milliseconds(static_cast<long>(opts.log_interval_s * 1e3));
  if (opts.log_interval_s > 0)
    self->delayed_send(self, interval, tick_atom_v);
  return {
    [self](const step_metrics& m) {
      auto& st = self->state;
      ++st.steps;
      st.step_tokens += m.new_tokens;
      st.batch_sum += m.batch_size;
      st.device_seconds += m.device_seconds;
    },
    [self](const progress_batch& b) {
      auto& st = self->state;
      st.output_tokens += b.tokens.size();
      for (const auto& f : b.finished) {
        if (f.reason < st.finished.size())
          ++st.finished[f.reason];
        if (f.completion_tokens > 0)
          st.ttft_ms.add(f.ttft_ms);
        st.e2e_ms.add(f.e2e_ms);
        st.queue_ms.add(f.queue_ms);
      }
    },
    [self, interval](tick_atom) {
      auto& st = self->state;
      const auto now = monotonic_seconds();
      const auto dt = now - st.last_log_s;
      if (st.output_tokens != st.last_tokens)
        spdlog::info("metrics: {:.1f} tokens/s, {} steps, p50 ttft {:.1f} ms, p99 e2e {:.1f} ms",
                     static_cast<double>(st.output_tokens - st.last_tokens) / dt, st.steps,
                     st.ttft_ms.percentile(0.5), st.e2e_ms.percentile(0.99));
      st.last_tokens = st.output_tokens;
      st.last_log_s = now;
      self->delayed_send(self, interval, tick_atom_v);
    },
    [self](stats_atom) {
      const auto& st = self->state;
      auto count = [&](finish_reason r) {
        return static_cast<double>(st.finished[static_cast<std::size_t>(r)]);
      };
      return stat_values{
        {"uptime_s", monotonic_seconds() - st.started_s},
        {"steps", static_cast<double>(st.steps)},
        {"mean_batch_size", st.steps ? static_cast<double>(st.batch_sum) / static_cast<double>(st.steps) : 0.0},
        {"step_tokens", static_cast<double>(st.step_tokens)},
        {"device_seconds", st.device_seconds},
        {"output_tokens", static_cast<double>(st.output_tokens)},
        {"finished_length", count(finish_reason::length)},
        {"finished_eos", count(finish_reason::eos)},
        {"finished_stop", count(finish_reason::stop)},
        {"finished_cancelled", count(finish_reason::cancelled)},
        {"finished_error", count(finish_reason::error)},
        {"finished_adapter_error", count(finish_reason::adapter_error)},
        {"finished_aborted", count(finish_reason::aborted)},
        {"ttft_ms_p50", st.ttft_ms.percentile(0.5)},
        {"ttft_ms_p99", st.ttft_ms.percentile(0.99)},
        {"e2e_ms_p50", st.e2e_ms.percentile(0.5)},
        {"e2e_ms_p99", st.e2e_ms.percentile(0.99)},
        {"queue_ms_p50", st.queue_ms.percentile(0.5)},
      };
    },
  };
}

} // namespace

metrics_actor spawn_metrics(caf::actor_system& sys, metrics_options opts) {
  return sys.spawn(metrics_impl, opts);
}

} // namespace troupe
