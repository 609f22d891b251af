// The cuda backend when CUDA refuses its step-graph captures, which only the
// emulated device can be made to do to the backend's own streams
// (emu::refuse_captures): step graphs switch off, notice() tells the
// operator why once, and every step launches directly with the tokens of a
// backend that never tried.
#include "tests/gpu/cuda/backend_test_support.hpp"

#include <gtest/gtest.h>

namespace troupe::gpu::cuda {
namespace {

using namespace backend_testing;

struct captures_refused {
  captures_refused() { emu::refuse_captures(true); }
  ~captures_refused() { emu::refuse_captures(false); }
};

TEST(cuda_backend_refused_capture, step_graphs_switch_off_once_noticed_and_the_tokens_stay) {
  auto [direct, graphs] = open_with_and_without_step_graphs(4);
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(graphs, nullptr);
  const auto p = prompt(20, 5);
  const std::uint32_t steps = 8;
  const auto want = generate(*direct, p, {0, 1, 2}, steps);
  {
    const captures_refused refused;
    EXPECT_EQ(generate(*graphs, p, {3, 4, 5}, steps), want);
  }
  EXPECT_EQ(graphs->steps_replayed(), 0u);
  const std::string note = graphs->notice();
  EXPECT_NE(note.find("step graphs are off"), std::string::npos) << note;
  EXPECT_NE(note.find("cudaStreamBeginCapture"), std::string::npos) << note;
  EXPECT_NE(note.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << note;
  EXPECT_EQ(graphs->notice(), ""); // once
  bool off = false;
  for (const auto& [k, v] : graphs->gauges())
    off = off || (k == "cuda_step_graphs_off" && v == 1);
  EXPECT_TRUE(off) << "stats say step graphs are off";
  EXPECT_EQ(direct->notice(), "");
  // Off for good: captures allowed again, the steps still launch directly.
  EXPECT_EQ(generate(*graphs, p, {3, 4, 5}, 4), std::vector<std::int32_t>(want.begin(), want.begin() + 4));
  EXPECT_EQ(graphs->steps_replayed(), 0u);
  EXPECT_EQ(graphs->notice(), "");
}

} // namespace
} // namespace troupe::gpu::cuda
