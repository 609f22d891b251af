// A fault on the device breaks the cuda backend, which says why. The fault
// poisons the process's CUDA context, so the test runs in a child process
// started afresh (the threadsafe death-test style re-runs the binary; a fork
// after CUDA's start would not work), and ctest runs it alone (RUN_SERIAL),
// beside no other test's context. The child exits 0 only when every check
// holds and prints what the backend said. Skipped where no CUDA device is
// visible.
#include "tests/gpu/cuda/backend_test_support.hpp"
#include "tests/gpu/cuda/device_fault.hpp"
#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace troupe::gpu::cuda {
namespace {

using namespace backend_testing;

TEST(cuda_backend_death, a_device_fault_breaks_the_backend_which_says_why) {
  TROUPE_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
    {
      auto b = open_backend();
      if (b == nullptr)
        std::exit(2);
      const auto e = greedy_entry(prompt(5, 1), 0, {0});
      const auto healthy = b->run_step(std::span{&e, 1});
      if (!healthy.failures.empty() || healthy.tokens.at(0) < 0 || !b->broken().empty())
        std::exit(3);
      if (testing::fault_the_device() != cudaErrorIllegalAddress)
        std::exit(4);
      // The next step fails, every entry of it with the fault named, and
      // the backend is broken from then on.
      const auto after = b->run_step(std::span{&e, 1});
      if (after.tokens.at(0) != -1 || after.failures.size() != 1 ||
          after.failures[0].reason.find("illegal") == std::string::npos) {
        std::fprintf(stderr, "step after the fault: %s\n", describe(after.failures).c_str());
        std::exit(5);
      }
      std::fprintf(stderr, "broken: %s\n", b->broken().c_str());
      std::exit(b->broken().find("cudaErrorIllegalAddress") == std::string::npos ? 6 : 0);
    },
    ::testing::ExitedWithCode(0), "broken: CUDA context on device 0: cudaErrorIllegalAddress");
}

} // namespace
} // namespace troupe::gpu::cuda
