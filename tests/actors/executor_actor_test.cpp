// The executor actor on CAF's deterministic scheduler: it answers a step
// with the backend's result, at once where steps take no modelled time, and
// otherwise only once the step's device time, scaled by time_scale, has
// passed on the actor system's clock; its stats are the backend's figures.
#include "actors/executor_actor.hpp"

#include "tests/support/actor_fixture.hpp"
#include "tests/support/scripted_backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::scripted_backend;

class executor_actor_test : public testing::actor_fixture {
protected:
  std::shared_ptr<scripted_backend> backend = std::make_shared<scripted_backend>();
};

TEST_F(executor_actor_test, answers_at_once_where_steps_take_no_modelled_time) {
  backend->step_seconds = 0.5;
  auto exec = spawn_executor(sys(), {backend, 0.0, false});
  self->send(exec, run_step_atom_v, std::vector<gpu::step_entry>(2));
  run();
  const auto r = receive_now<gpu::step_result>();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tokens, (std::vector<std::int32_t>{7, 7}));
  EXPECT_EQ(r->device_seconds, 0.5);
  EXPECT_EQ(backend->calls, std::vector<std::string>{"step 2"});
}

TEST_F(executor_actor_test, holds_each_answer_until_the_steps_scaled_device_time_has_passed) {
  backend->step_seconds = 0.25;
  auto exec = spawn_executor(sys(), {backend, 4.0, false}); // 1 s of wall time per step
  self->send(exec, run_step_atom_v, std::vector<gpu::step_entry>(1));
  run();
  EXPECT_EQ(backend->calls, std::vector<std::string>{"step 1"}); // computed at once ...
  EXPECT_FALSE(receive_now<gpu::step_result>().has_value());     // ... answered later
  advance(500ms);
  self->send(exec, run_step_atom_v, std::vector<gpu::step_entry>(3));
  run();
  EXPECT_FALSE(receive_now<gpu::step_result>().has_value());
  advance(499ms);
  EXPECT_FALSE(receive_now<gpu::step_result>().has_value());
  advance(1ms);
  auto first = receive_now<gpu::step_result>();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tokens.size(), 1u);
  EXPECT_FALSE(receive_now<gpu::step_result>().has_value()); // the second's second is not over
  advance(500ms);
  auto second = receive_now<gpu::step_result>();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->tokens.size(), 3u);
}

TEST_F(executor_actor_test, stats_are_the_backends_own_figures) {
  auto exec = spawn_executor(sys(), {backend, 0.0, false});
  self->send(exec, run_step_atom_v, std::vector<gpu::step_entry>(2));
  self->send(exec, run_step_atom_v, std::vector<gpu::step_entry>(1));
  run();
  EXPECT_EQ(stat(exec, "scripted_calls"), 2);
}

} // namespace
} // namespace troupe
