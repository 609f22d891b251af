// The metrics actor on CAF's deterministic scheduler: step figures add up,
// every finish reason is counted under its own name, and the latency
// percentiles and histograms come from the finished requests (first-token
// latency only from those that produced a token).
#include "actors/metrics_actor.hpp"

#include "runtime/request_state.hpp"
#include "tests/support/actor_fixture.hpp"

#include <gtest/gtest.h>

#include <string>

namespace troupe {
namespace {

class metrics_actor_test : public testing::actor_fixture {
protected:
  metrics_actor metrics = spawn_metrics(sys(), metrics_options{true, 0.0}); // no periodic log
};

finish_event ended(std::uint64_t id, finish_reason why, std::uint32_t tokens, double ttft_ms, double e2e_ms) {
  return {id, static_cast<std::uint8_t>(why), 10, tokens, 1.0, ttft_ms, e2e_ms};
}

TEST_F(metrics_actor_test, steps_add_up_and_every_finish_reason_is_counted) {
  self->send(metrics, step_metrics{4, 4, 0.02, 0.02});
  self->send(metrics, step_metrics{2, 130, 0.05, 0.05});
  progress_batch b;
  b.tokens.resize(5);
  b.finished = {ended(1, finish_reason::length, 8, 10, 100), ended(2, finish_reason::eos, 3, 20, 200),
                ended(3, finish_reason::stop, 5, 30, 300),   ended(4, finish_reason::cancelled, 1, 40, 400),
                ended(5, finish_reason::error, 0, 0, 5),     ended(6, finish_reason::adapter_error, 0, 0, 6),
                ended(7, finish_reason::aborted, 0, 0, 7)};
  self->send(metrics, b);
  run();
  EXPECT_EQ(stat(metrics, "steps"), 2);
  EXPECT_EQ(stat(metrics, "mean_batch_size"), 3);
  EXPECT_EQ(stat(metrics, "step_tokens"), 134);
  EXPECT_DOUBLE_EQ(stat(metrics, "device_seconds"), 0.07);
  EXPECT_EQ(stat(metrics, "output_tokens"), 5);
  for (const char* name : {"finished_length", "finished_eos", "finished_stop", "finished_cancelled",
                           "finished_error", "finished_adapter_error", "finished_aborted"})
    EXPECT_EQ(stat(metrics, name), 1) << name;
  // First-token latency from the four that produced a token: 10, 20, 30, 40.
  EXPECT_EQ(stat(metrics, "ttft_ms_p50"), 20);
  EXPECT_EQ(stat(metrics, "ttft_ms_p99"), 30);
  EXPECT_EQ(stat(metrics, "e2e_ms_p99"), 300);
}

TEST_F(metrics_actor_test, latencies_fill_cumulative_histograms_in_seconds) {
  progress_batch b;
  b.finished = {ended(1, finish_reason::length, 11, 40, 1040),   // 0.1 s between its tokens
                ended(2, finish_reason::eos, 1, 300, 300),       // one token: no time between
                ended(3, finish_reason::error, 0, 0, 7)};        // no token: no first-token latency
  self->send(metrics, b);
  run();
  EXPECT_EQ(stat(metrics, "ttft_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(stat(metrics, "ttft_seconds_sum"), 0.34);
  EXPECT_EQ(stat(metrics, "ttft_seconds_bucket_le_0.025"), 0);
  EXPECT_EQ(stat(metrics, "ttft_seconds_bucket_le_0.05"), 1) << "cumulative";
  EXPECT_EQ(stat(metrics, "ttft_seconds_bucket_le_0.25"), 1);
  EXPECT_EQ(stat(metrics, "ttft_seconds_bucket_le_0.5"), 2);
  EXPECT_EQ(stat(metrics, "ttft_seconds_bucket_le_+Inf"), 2);
  EXPECT_EQ(stat(metrics, "time_per_output_token_seconds_count"), 1);
  EXPECT_EQ(stat(metrics, "time_per_output_token_seconds_bucket_le_0.075"), 0);
  EXPECT_EQ(stat(metrics, "time_per_output_token_seconds_bucket_le_0.1"), 1) << "a bound holds what equals it";
  EXPECT_EQ(stat(metrics, "e2e_seconds_count"), 3);
  EXPECT_EQ(stat(metrics, "e2e_seconds_bucket_le_0.1"), 1);
  EXPECT_EQ(stat(metrics, "e2e_seconds_bucket_le_2.5"), 3);
  EXPECT_EQ(stat(metrics, "queue_seconds_count"), 3);
  EXPECT_EQ(stat(metrics, "queue_seconds_bucket_le_0.005"), 3) << "1 ms each";
}

} // namespace
} // namespace troupe
