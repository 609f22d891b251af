// Google Benchmark: the scheduler core's cost per iteration (admission by the
// policy, batch building, step bookkeeping) with 10,000 requests waiting over
// 2,000 adapters and a full running batch, for every scheduling policy.
// Run: build/bin/troupe-scheduler-bench
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

  static scheduler_limits limits(std::uint32_t max_running) {
    scheduler_limits l;
    l.max_running = max_running;
    l.token_budget = 8192;
    l.max_waiting = 1u << 20;
    l.total_pages = 1u << 30;
    l.page_tokens = 16;
    return l;
  }

  harness(std::uint32_t max_running, const char* policy)
    : core(limits(max_running), policies::make_scheduling_policy(policy), nullptr) {
    // Four queues with room for everything (the tuner's output shape).
    core.on_tuning({{0.25, 0.5, 0.75}, {1u << 28, 1u << 28, 1u << 28, 1u << 28}});
  }

  void submit(std::uint32_t max_new) {
    request_spec s;
    s.request_id = next_id++;
    s.prompt.assign(64, 7);
    s.max_new_tokens = max_new;
    s.predicted_tokens = max_new;
    s.adapter_id = 1 + static_cast<std::uint32_t>(s.request_id % 2000);
    s.adapter_rank = 8u << (s.request_id % 5);
    s.adapter_pages = s.adapter_rank / 4;
    s.queue = static_cast<std::uint32_t>(s.request_id % 4);
    s.arrival_s = now;
    core.submit(std::move(s));
  }

  /// Grants whatever the core asks for, like an idle memory pool and a
  /// cache holding every adapter.
  void grant(scheduler_effects fx) {
    for (const auto& r : fx.reserves)
      core.on_pages(r.request_id, true, now);
    for (const auto& a : fx.acquires)
      core.on_adapter(a.request_id, true, now);
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

const char* const policy_names[] = {"fcfs", "slora", "chameleon", "sjf", "adaptive", "aptserve"};

void bm_scheduler_iteration(benchmark::State& state) {
  const auto waiting = static_cast<std::size_t>(state.range(0));
  const auto running = static_cast<std::uint32_t>(state.range(1));
  const char* policy = policy_names[state.range(2)];
  state.SetLabel(policy);
  harness h{running, policy};
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
  ->ArgNames({"waiting", "running", "policy"})
  ->ArgsProduct({{0, 10000}, {32, 256}, {0, 1, 2, 3, 4, 5}})
  ->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
