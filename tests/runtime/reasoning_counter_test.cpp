// Tests for runtime/reasoning_counter: thinking tokens counted as the chat
// answer's reasoning parser reads the text, however the marks fall across
// tokens.
#include "runtime/reasoning_counter.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace troupe {
namespace {

reasoning_counter fed(const std::vector<std::string>& tokens, std::string open = "<think>",
                      std::string close = "</think>") {
  reasoning_counter c{std::move(open), std::move(close)};
  for (const auto& t : tokens)
    c.feed(t);
  return c;
}

TEST(reasoning_counter, counts_the_thinking_up_to_the_token_that_closes_it) {
  const auto c = fed({"<think>", "\n", "Let", " me", " see", "</think>", "\n\n", "It", " is", " 4"});
  EXPECT_EQ(c.count(), 6u);
  EXPECT_TRUE(c.done());
  // Marks cut across tokens, and text on either side of them in one token.
  EXPECT_EQ(fed({"<th", "ink>", "a", "</", "think>", "b"}).count(), 5u);
  EXPECT_EQ(fed({"<think>", "a</think>b", "c"}).count(), 2u);
  EXPECT_EQ(fed({"<think>x</think>", "y", "z"}).count(), 1u);
  EXPECT_EQ(fed({"<think>", "a", "</thi", "nk", ">", "b"}).count(), 5u);
  // Blanks before the opening mark count with the thinking.
  EXPECT_EQ(fed({"\n", " ", "<think>", "x", "</think>", "y"}).count(), 5u);
}

TEST(reasoning_counter, output_that_does_not_begin_with_the_mark_is_all_content) {
  auto c = fed({"Hello", "<think>", "a", "</think>"});
  EXPECT_EQ(c.count(), 0u);
  EXPECT_TRUE(c.done());
  EXPECT_EQ(fed({"<th", "e", " end"}).count(), 0u); // began like the mark, then did not
  // Any blanks first, as the chat answer's reader takes them.
  EXPECT_EQ(fed({std::string(100, ' '), "\n\t", "<think>", "a", "</think>"}).count(), 5u);
  // Blanks alone, or the mark's beginning, are not decided yet.
  c = fed({"  ", "<thi"});
  EXPECT_EQ(c.count(), 0u);
  EXPECT_FALSE(c.done());
  c.feed("nk>");
  EXPECT_EQ(c.count(), 3u);
}

TEST(reasoning_counter, a_prompt_that_opened_the_thinking_counts_from_the_first_token) {
  EXPECT_EQ(fed({"a", "b", "</think>", "c"}, "").count(), 3u);
  auto c = fed({"a", "b"}, "");
  EXPECT_EQ(c.count(), 2u);
  EXPECT_FALSE(c.done()); // never closed: all of it is thinking
  c.feed("</think>");
  c.feed("answer");
  c.feed("more");
  EXPECT_EQ(c.count(), 3u);
  EXPECT_TRUE(c.done());
  EXPECT_THROW(reasoning_counter("<think>", ""), std::invalid_argument);
}

} // namespace
} // namespace troupe
