#include "actors/metrics_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/request_state.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <string>
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

/// Samples (seconds) counted at or below each bound, with their sum and
/// count: a Prometheus histogram, which (unlike a percentile) adds up over
/// the nodes of a deployment and over any window a dashboard takes.
class histogram {
public:
  explicit histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void add(double seconds) {
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      if (seconds <= bounds_[i])
        ++counts_[i];
    ++count_;
    sum_ += seconds;
  }
  /// NAME_bucket_le_BOUND (cumulative, the last +Inf), NAME_sum, NAME_count:
  /// the names openai::prometheus_text turns into one histogram.
  void append(stat_values& out, const std::string& name) const {
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      char bound[32];
      const auto end = std::to_chars(bound, bound + sizeof bound, bounds_[i]).ptr;
      out.push_back(stat_counter(name + "_bucket_le_" + std::string(bound, end), static_cast<double>(counts_[i])));
    }
    out.push_back(stat_counter(name + "_bucket_le_+Inf", static_cast<double>(count_)));
    out.push_back(stat_counter(name + "_sum", sum_));
    out.push_back(stat_counter(name + "_count", static_cast<double>(count_)));
  }

private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

/// Bounds for waits (time to first token, queueing), whole requests and the
/// time between output tokens, in seconds.
const std::vector<double> wait_bounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
const std::vector<double> request_bounds{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
const std::vector<double> token_bounds{0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5};

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
  histogram ttft_s{wait_bounds}, queue_s{wait_bounds}, e2e_s{request_bounds}, tpot_s{token_bounds};
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
        if (f.completion_tokens > 0) {
          st.ttft_ms.add(f.ttft_ms);
          st.ttft_s.add(f.ttft_ms / 1e3);
        }
        // The mean time between its output tokens.
        if (f.completion_tokens > 1)
          st.tpot_s.add((f.e2e_ms - f.ttft_ms) / 1e3 / static_cast<double>(f.completion_tokens - 1));
        st.e2e_ms.add(f.e2e_ms);
        st.e2e_s.add(f.e2e_ms / 1e3);
        st.queue_ms.add(f.queue_ms);
        st.queue_s.add(f.queue_ms / 1e3);
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
      stat_values out{
        stat_level("uptime_s", monotonic_seconds() - st.started_s),
        stat_counter("steps", static_cast<double>(st.steps)),
        stat_level("mean_batch_size", st.steps ? static_cast<double>(st.batch_sum) / static_cast<double>(st.steps) : 0.0),
        stat_counter("step_tokens", static_cast<double>(st.step_tokens)),
        stat_counter("device_seconds", st.device_seconds),
        stat_counter("output_tokens", static_cast<double>(st.output_tokens)),
        stat_counter("finished_length", count(finish_reason::length)),
        stat_counter("finished_eos", count(finish_reason::eos)),
        stat_counter("finished_stop", count(finish_reason::stop)),
        stat_counter("finished_cancelled", count(finish_reason::cancelled)),
        stat_counter("finished_error", count(finish_reason::error)),
        stat_counter("finished_adapter_error", count(finish_reason::adapter_error)),
        stat_counter("finished_aborted", count(finish_reason::aborted)),
        stat_level("ttft_ms_p50", st.ttft_ms.percentile(0.5)),
        stat_level("ttft_ms_p99", st.ttft_ms.percentile(0.99)),
        stat_level("e2e_ms_p50", st.e2e_ms.percentile(0.5)),
        stat_level("e2e_ms_p99", st.e2e_ms.percentile(0.99)),
        stat_level("queue_ms_p50", st.queue_ms.percentile(0.5)),
      };
      st.ttft_s.append(out, "ttft_seconds");
      st.tpot_s.append(out, "time_per_output_token_seconds");
      st.e2e_s.append(out, "e2e_seconds");
      st.queue_s.append(out, "queue_seconds");
      return out;
    },
  };
}

} // namespace

metrics_actor spawn_metrics(caf::actor_system& sys, metrics_options opts) {
  return sys.spawn(metrics_impl, opts);
}

} // namespace troupe
