// Replays every input under tests/fuzz/corpus/<target>/ through its target:
// the seeds and the inputs that once broke one (regressions), in every build.
// Inputs named ok-* must be accepted, so that the seeds reach past refusals.
#include "tests/fuzz/targets.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <vector>

namespace troupe::fuzz {

void PrintTo(const target& t, std::ostream* os) { *os << t.name; }

namespace {

const std::filesystem::path corpus_root = "tests/fuzz/corpus";

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class corpus : public ::testing::TestWithParam<target> {};

TEST_P(corpus, every_input_keeps_the_invariants) {
  const auto& t = GetParam();
  const auto dir = corpus_root / std::string(t.name);
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir << " is missing: every target has seeds";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file())
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " holds no input";
  for (const auto& f : files) {
    const auto bytes = read_bytes(f);
    try {
      const bool accepted = t.run(bytes);
      if (f.filename().string().starts_with("ok-")) {
        EXPECT_TRUE(accepted) << f << " is refused: a seed named ok-* must be accepted";
      }
    } catch (const invariant_broken& e) {
      ADD_FAILURE() << f << ": " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(fuzz, corpus, ::testing::ValuesIn(targets().begin(), targets().end()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(fuzz, targets_are_found_by_name) {
  for (const auto& t : targets())
    EXPECT_EQ(find_target(t.name), &t);
  EXPECT_EQ(find_target("no_such_target"), nullptr);
}

} // namespace
} // namespace troupe::fuzz
