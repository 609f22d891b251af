// The step's failure report for the log: failures grouped by reason in the
// order they first appear, each naming its requests, long lists cut short.
#include "gpu/step.hpp"

#include <gtest/gtest.h>

namespace troupe::gpu {
namespace {

TEST(step_failures, nothing_failed_says_nothing) {
  EXPECT_EQ(describe({}), "");
}

TEST(step_failures, are_grouped_by_reason_in_order_of_first_appearance) {
  const std::vector<step_failure> f{{3, "adapter 2 is not on the device"},
                                    {9, "token 600 is outside the vocabulary of 512"},
                                    {4, "adapter 2 is not on the device"}};
  EXPECT_EQ(describe(f), "requests 3, 4: adapter 2 is not on the device; "
                         "request 9: token 600 is outside the vocabulary of 512");
}

TEST(step_failures, long_lists_name_the_first_requests_and_count_the_rest) {
  std::vector<step_failure> f;
  for (std::uint64_t id = 1; id <= 5; ++id)
    f.push_back({id, "the step failed on the GPU: out of memory"});
  EXPECT_EQ(describe(f, 3), "requests 1, 2, 3 and 2 more: the step failed on the GPU: out of memory");
  EXPECT_EQ(describe(f, 5), "requests 1, 2, 3, 4, 5: the step failed on the GPU: out of memory");
}

} // namespace
} // namespace troupe::gpu
