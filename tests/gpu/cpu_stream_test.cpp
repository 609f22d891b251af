// Layer-wise streaming on the cpu backend: a step over a cache that is still
// coming in from host pages (stream_in on another thread) computes each layer
// once that layer has landed, and gives the token a step over the cache in
// place gives; a stream that fails ends only its own entry, named with why;
// a refused entry answers only once its stream has landed.
#include "gpu/cpu_backend.hpp"
#include "tests/support/step_entry.hpp"
#include "tests/support/temp_model.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace troupe::gpu {
namespace {

std::unique_ptr<cpu_backend> open_backend(const std::string& dir) {
  auto b = cpu_backend::open(dir, 64, 8);
  if (auto* err = std::get_if<std::string>(&b)) {
    ADD_FAILURE() << *err;
    return nullptr;
  }
  return std::move(std::get<std::unique_ptr<cpu_backend>>(b));
}

using testing::greedy_entry;

TEST(cpu_stream, a_step_over_a_streaming_cache_gives_the_token_of_the_cache_in_place) {
  testing::temp_model model{"--hidden 64 --intermediate 128 --layers 4 --heads 4 --kv-heads 2"};
  ASSERT_FALSE(model.dir().empty()) << "troupe-mkmodel failed";
  auto b = open_backend(model.dir());
  ASSERT_NE(b, nullptr);
  std::vector<std::int32_t> history;
  for (int i = 0; i < 20; ++i)
    history.push_back(3 + (i * 7) % 200);
  const std::vector<std::int32_t> next_turn{40, 41, 42};
  // The history's cache in pages 0..2, then the next turn on top of it.
  auto first = greedy_entry(history, 0, {0, 1, 2});
  const auto history_token = b->run_step(std::span{&first, 1}).tokens.at(0);
  ASSERT_GE(history_token, 0);
  ASSERT_TRUE(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0, 1, 2},
                            std::vector<std::uint32_t>{10, 11, 12}, 0).error.empty());
  auto in_place = greedy_entry(next_turn, 20, {0, 1, 2, 3});
  const auto want = b->run_step(std::span{&in_place, 1}).tokens.at(0);
  ASSERT_GE(want, 0);

  // The cache streams from the host pages into other pages while the step
  // over them runs; the step starts first and waits layer by layer.
  auto streamed = greedy_entry(next_turn, 20, {20, 21, 22, 23});
  streamed.stream = 77;
  std::int32_t got = -2;
  std::thread step{[&] { got = b->run_step(std::span{&streamed, 1}).tokens.at(0); }};
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto r = b->stream_in(77, std::vector<std::uint32_t>{20, 21, 22}, std::vector<std::uint32_t>{10, 11, 12}, 0);
  step.join();
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(got, want);
  EXPECT_EQ(b->streams(), 0u) << "the step used the stream and forgot it";
  EXPECT_EQ(b->host_kv_pages(), 0u) << "host pages given back";

  // A stream whose host pages are gone fails, and only its entry fails.
  auto other = greedy_entry(history, 0, {30, 31, 32});
  other.request_id = 2;
  std::vector<step_entry> batch{streamed, other};
  batch[0].stream = 78;
  batch[0].pages = {40, 41, 42, 43};
  step_result result;
  std::thread step2{[&] { result = b->run_step(batch); }};
  const auto failed = b->stream_in(78, std::vector<std::uint32_t>{40, 41, 42}, std::vector<std::uint32_t>{10, 11, 12}, 0);
  step2.join();
  EXPECT_FALSE(failed.error.empty());
  ASSERT_EQ(result.tokens.size(), 2u);
  EXPECT_EQ(result.tokens[0], -1);
  EXPECT_EQ(result.tokens[1], history_token);
  ASSERT_EQ(result.failures.size(), 1u) << describe(result.failures);
  EXPECT_EQ(result.failures[0].request_id, 1u);
  EXPECT_NE(result.failures[0].reason.find(failed.error), std::string::npos) << result.failures[0].reason;
  // An entry the model refuses (a token outside the vocabulary) answers only
  // once its stream has landed: the runtime frees its pages on the answer.
  ASSERT_TRUE(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{30, 31, 32},
                            std::vector<std::uint32_t>{20, 21, 22}, 0).error.empty());
  const auto host = b->read_pages(true, std::vector<std::uint32_t>{20, 21, 22}, 0);
  ASSERT_TRUE(host.error.empty()) << host.error;
  auto refused = greedy_entry({1 << 20}, 20, {44, 45, 46, 47});
  refused.stream = 80;
  swap_result copied;
  std::thread copy{[&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    copied = b->stream_in(80, std::vector<std::uint32_t>{44, 45, 46}, std::vector<std::uint32_t>{20, 21, 22}, 0);
  }};
  const auto rejected = b->run_step(std::span{&refused, 1});
  const auto landed = b->read_pages(false, std::vector<std::uint32_t>{44, 45, 46}, 0);
  copy.join();
  EXPECT_EQ(rejected.tokens, std::vector<std::int32_t>{-1});
  ASSERT_EQ(rejected.failures.size(), 1u);
  EXPECT_NE(rejected.failures[0].reason.find("vocabulary"), std::string::npos) << rejected.failures[0].reason;
  EXPECT_TRUE(copied.error.empty()) << copied.error;
  ASSERT_TRUE(landed.error.empty()) << landed.error;
  EXPECT_TRUE(landed.data == host.data) << "the step answered before its stream's copy landed";
  EXPECT_EQ(b->streams(), 0u);

  // A stream no step used is forgotten on request.
  ASSERT_TRUE(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0}, std::vector<std::uint32_t>{50}, 0)
                .error.empty());
  EXPECT_TRUE(b->stream_in(79, std::vector<std::uint32_t>{60}, std::vector<std::uint32_t>{50}, 0).error.empty());
  EXPECT_EQ(b->streams(), 1u);
  b->end_stream(79);
  EXPECT_EQ(b->streams(), 0u);
}

} // namespace
} // namespace troupe::gpu
