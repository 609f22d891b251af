// Google Benchmark: the scheduler core's cost per iteration (admission by the
// policy, batch building, step bookkeeping) with 10,000 requests waiting and
// a full running batch. Run: build/bin/troupe-scheduler-bench
#include "policies/registry.hpp"
#include "runtime/scheduler_core.hpp"

#include <benchmark/benchmark.h>

#include <vector>

namespace {

using namespace troupe;

struct harness {
  scheduler_core core;
  std::uint64_t next_id = 1;
  double now = 0;

  explicit harness(std::uint32_t max_running)
    : core({max_running, 8192, 1u << 20, 1u << 30, 16}, policies::make_scheduling_policy("fcfs"),
           nullptr) {
  }

  void submit(std::uint32_t max_new) {
    request_spec s;
    s.request_id = next_id++;
    s.prompt.assign(64, 7);
    s.max_new_tokens = max_new;
    s.arrival_s = now;
    core.submit(std::move(s));
  }

  /// Grants whatever the core asks for, like an idle memory pool.
  void grant(scheduler_effects fx) {
    for (const auto& r : fx.reserves)
      core.on_pages(r.request_id, true, now);
  }

  /// One scheduler iteration: admit, build the step, take its tokens; keeps
  /// the waiting queue at its size by submitting one request per finish.
  std::size_t iterate(std::vector<std::int32_t>& tokens) {
    now += 0.001;
    grant(core.admit(now));
    auto batch = core.next_step(now);
    tokens.assign(batch.size(), 100);
    auto fx = core.on_step_done(batch, tokens, now);
    for (std::size_t i = 0; i < fx.finished.size(); ++i)
      submit(64);
    return batch.size();
  }
};

void bm_scheduler_iteration(benchmark::State& state) {
  const auto waiting = static_cast<std::size_t>(state.range(0));
  const auto running = static_cast<std::uint32_t>(state.range(1));
  harness h{running};
  for (std::size_t i = 0; i < waiting + running; ++i)
    h.submit(64);
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 4; ++i) // fill the running batch
    h.iterate(tokens);
  std::size_t batch = 0;
  for (auto _ : state)
    batch += h.iterate(tokens);
  state.counters["waiting"] = static_cast<double>(h.core.waiting());
  state.counters["batch"] = static_cast<double>(batch) / static_cast<double>(state.iterations());
}

BENCHMARK(bm_scheduler_iteration)
  ->Args({0, 256})
  ->Args({10000, 256})
  ->Args({10000, 32})
  ->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
