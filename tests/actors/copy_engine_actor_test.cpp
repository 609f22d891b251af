// The copy engine actor on CAF's deterministic scheduler, over a backend
// whose copies each take a modelled second: at most max_inflight transfers
// run, the most urgent class first (a demand load, a swap-in, a prefetch, a
// swap-out), each order gets one report when its copy is done, loads of one
// adapter share one copy, a failed load is reported and counted without
// holding up the rest, and the disk tier's file copies run one at a time in
// a lane of their own.
#include "actors/copy_engine_actor.hpp"

#include "runtime/transfer_queue.hpp"
#include "tests/support/actor_fixture.hpp"
#include "tests/support/scripted_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::scripted_backend;

transfer_order load(std::uint32_t adapter, transfer_class c = transfer_class::demand_load) {
  transfer_order o;
  o.adapter_id = adapter;
  o.kind = static_cast<std::uint8_t>(c);
  o.bytes = 1000;
  return o;
}

transfer_order swap(std::uint64_t request, transfer_class c, std::uint32_t page) {
  transfer_order o;
  o.request_id = request;
  o.kind = static_cast<std::uint8_t>(c);
  o.device_pages = {page};
  o.host_pages = {page};
  o.bytes = 1000;
  return o;
}

/// A session cache's write to its file (the disk tier).
transfer_order file_write(std::uint64_t owner, std::uint32_t page, const std::string& path) {
  transfer_order o;
  o.request_id = owner;
  o.kind = static_cast<std::uint8_t>(transfer_class::swap_out);
  o.kv_op = static_cast<std::uint8_t>(kv_op::host_to_file);
  o.host_pages = {page};
  o.bytes = 1000;
  o.path = path;
  return o;
}

class copy_engine_actor_test : public testing::actor_fixture {
protected:
  copy_engine_actor_test() { backend->copy_seconds = 1.0; }
  copy_engine_actor engine(std::uint32_t max_inflight) {
    return spawn_copy_engine(sys(), {backend, 1.0, false, max_inflight});
  }
  /// The reports waiting for `self`.
  std::vector<transfer_report> reports() {
    std::vector<transfer_report> out;
    while (auto r = receive_now<transfer_report>())
      out.push_back(std::move(*r));
    return out;
  }
  std::shared_ptr<scripted_backend> backend = std::make_shared<scripted_backend>();
};

TEST_F(copy_engine_actor_test, one_copy_at_a_time_the_most_urgent_class_first) {
  auto e = engine(1);
  self->send(e, load_atom_v, swap(9, transfer_class::swap_out, 9)); // starts at once: nothing else waits
  self->send(e, load_atom_v, load(3, transfer_class::prefetch));
  self->send(e, load_atom_v, swap(8, transfer_class::swap_in, 8));
  self->send(e, load_atom_v, load(4));
  run();
  EXPECT_EQ(backend->calls, std::vector<std::string>{"swap out 9"});
  EXPECT_TRUE(reports().empty());
  const std::vector<std::string> order = {"swap out 9", "load 4", "swap in 8", "load 3"};
  for (std::size_t done = 1; done <= order.size(); ++done) {
    advance(999ms);
    EXPECT_EQ(reports().size(), 0u) << "copy " << done << " is not over";
    advance(1ms);
    EXPECT_EQ(reports().size(), 1u) << "copy " << done;
    // The next one starts as this one ends.
    EXPECT_EQ(backend->calls, std::vector<std::string>(order.begin(), order.begin() + std::min(done + 1, order.size())));
  }
  EXPECT_EQ(stat(e, "copy_demand_load_transfers"), 1);
  EXPECT_EQ(stat(e, "copy_swap_in_transfers"), 1);
  EXPECT_EQ(stat(e, "copy_prefetch_transfers"), 1);
  EXPECT_EQ(stat(e, "copy_swap_out_transfers"), 1);
}

TEST_F(copy_engine_actor_test, up_to_max_inflight_copies_run_side_by_side) {
  auto e = engine(2);
  for (std::uint32_t a = 1; a <= 3; ++a)
    self->send(e, load_atom_v, load(a));
  run();
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"load 1", "load 2"}));
  advance(1s);
  EXPECT_EQ(reports().size(), 2u);
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"load 1", "load 2", "load 3"}));
  advance(1s);
  EXPECT_EQ(reports().size(), 1u);
}

TEST_F(copy_engine_actor_test, the_disk_tiers_file_copies_run_in_a_lane_of_their_own_one_at_a_time) {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("troupe-copy-lane-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto e = engine(1);
  self->send(e, load_atom_v, file_write(5, 5, (dir / "a").string()));
  self->send(e, load_atom_v, file_write(6, 6, (dir / "b").string()));
  self->send(e, load_atom_v, swap(8, transfer_class::swap_in, 8));
  run();
  // The swap-in runs beside the first write though one copy runs at a
  // time: the disk has a lane of its own, where the second write waits.
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"read host 5", "swap in 8"}));
  advance(1100ms);
  EXPECT_EQ(reports().size(), 2u);
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"read host 5", "swap in 8", "read host 6"}));
  advance(1100ms);
  const auto last = reports();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_TRUE(last[0].error.empty()) << last[0].error;
  EXPECT_EQ(fs::file_size(dir / "b"), 1000u);
  EXPECT_EQ(stat(e, "copy_file_writes"), 2);
  EXPECT_EQ(stat(e, "copy_swap_out_transfers"), 0) << "not counted as PCIe copies";
  EXPECT_EQ(stat(e, "copy_swap_in_transfers"), 1);
  fs::remove_all(dir);
}

TEST_F(copy_engine_actor_test, loads_of_one_adapter_share_its_copy_and_each_gets_the_report) {
  auto e = engine(4);
  self->send(e, load_atom_v, load(5));
  run();
  self->send(e, load_atom_v, load(5)); // while the first is copying
  run();
  advance(1s);
  const auto got = reports();
  ASSERT_EQ(got.size(), 2u);
  for (const auto& r : got) {
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.copy_seconds, 1.0);
  }
  EXPECT_EQ(backend->calls, std::vector<std::string>{"load 5"});
}

TEST_F(copy_engine_actor_test, a_failed_load_is_reported_and_counted_and_the_next_copy_runs) {
  backend->failing = {6};
  auto e = engine(1);
  self->send(e, load_atom_v, load(6));
  self->send(e, load_atom_v, load(7));
  run(); // the failed load took no modelled time: its report comes at once, and 7 starts
  auto got = reports();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].error.find("adapter 6 is scripted to fail"), std::string::npos) << got[0].error;
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"load 6", "load 7"}));
  advance(1s);
  got = reports();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(stat(e, "copy_failures"), 1);
  EXPECT_EQ(stat(e, "copy_disk_reads"), 1);
}

TEST_F(copy_engine_actor_test, evicted_and_forgotten_adapters_go_to_the_backend) {
  auto e = engine(1);
  self->send(e, evict_atom_v, std::uint32_t{3});
  self->send(e, forget_atom_v, std::uint32_t{4});
  run();
  EXPECT_EQ(backend->calls, (std::vector<std::string>{"drop 3", "forget 4"}));
}

} // namespace
} // namespace troupe
