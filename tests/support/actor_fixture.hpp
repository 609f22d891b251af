// Deterministic actor tests (STYLE 25): an actor system whose scheduler is
// CAF's test_coordinator, run by hand; its clock moves only when a test
// advances it, so a timer fires exactly when the test says and no test
// sleeps. Replies to `self` wait in its mailbox for receive_now().
#pragma once

#include "messages/type_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace troupe::testing {

class actor_fixture : public ::testing::Test {
protected:
  actor_fixture() : sys_(configured(cfg_)), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())), self(sys_) {}
  ~actor_fixture() override { sched_.run(); }

  caf::actor_system& sys() { return sys_; }
  /// Lets every actor handle everything in its mailbox, and what that sends;
  /// the number of messages handled.
  std::size_t run() { return sched_.run(); }
  /// Moves the clock on by `d`, firing the timers due by then, and runs
  /// what they sent; the number of timers fired.
  std::size_t advance(std::chrono::microseconds d) {
    const auto fired = sched_.advance_time(d);
    run();
    return fired;
  }
  /// A message of type T waiting for `self`, if the first waiting is one;
  /// nullopt when none is waiting (nothing blocks).
  template <class T>
  std::optional<T> receive_now() {
    std::optional<T> out;
    self->receive([&](T& x) { out = std::move(x); }, caf::after(std::chrono::seconds(0)) >> [] {});
    return out;
  }

  /// Statistic `name` in `actor`'s stats reply; fails the test where it has none.
  template <class Handle>
  double stat(const Handle& actor, const std::string& name) {
    self->send(actor, stats_atom_v);
    run();
    const auto values = receive_now<stat_values>();
    EXPECT_TRUE(values.has_value()) << "no stats reply";
    if (values)
      for (const auto& v : *values)
        if (v.name == name)
          return v.value;
    ADD_FAILURE() << "no stat " << name;
    return -1;
  }

private:
  static caf::actor_system_config& configured(caf::actor_system_config& cfg) {
    register_message_types(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    return cfg;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;

protected:
  caf::scoped_actor self;
};

} // namespace troupe::testing
