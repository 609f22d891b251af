// Which session cache leaves a tier first.
#include "policies/session_eviction.hpp"

#include <gtest/gtest.h>

namespace troupe::policies {
namespace {

TEST(session_eviction, lru_takes_the_least_recently_used_and_largest_the_biggest) {
  const std::vector<session_view> c{{1, 5.0, 2}, {2, 1.0, 3}, {3, 3.0, 9}, {4, 1.0, 9}};
  EXPECT_EQ(pick_session_victim(session_eviction::lru, c), 1u) << "oldest; the lower id on a tie";
  EXPECT_EQ(pick_session_victim(session_eviction::largest, c), 3u) << "most pages; the older on a tie";
  EXPECT_EQ(pick_session_victim(session_eviction::lru, std::span{c}.first(1)), 0u);
}

TEST(session_eviction, names) {
  EXPECT_EQ(session_eviction_named("lru"), session_eviction::lru);
  EXPECT_EQ(session_eviction_named("largest"), session_eviction::largest);
  EXPECT_EQ(session_eviction_named("fifo"), std::nullopt);
  EXPECT_EQ(session_eviction_names().size(), 2u);
}

} // namespace
} // namespace troupe::policies
