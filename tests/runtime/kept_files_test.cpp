// The front's stores written through to a directory: each id's file whole,
// read back oldest first, removed on request; what is not one is passed over.

#include "runtime/kept_files.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace troupe {
namespace {

TEST(kept_files, files_are_written_whole_read_back_oldest_first_and_removed) {
  testing::temp_dir tmp("kept_files");
  auto opened = kept_files::open(tmp.dir() / "a" / "b");
  ASSERT_TRUE(std::holds_alternative<kept_files>(opened)) << std::get<std::string>(opened);
  const auto& files = std::get<kept_files>(opened);
  std::string why;
  ASSERT_TRUE(files.write("conv_2", R"({"n": 2})", why)) << why;
  ASSERT_TRUE(files.write("conv_1", R"({"n": 1})", why)) << why;
  ASSERT_TRUE(files.write("resp_3", R"({"n": 3})", why)) << why;
  const auto t0 = std::filesystem::file_time_type::clock::now();
  std::filesystem::last_write_time(files.dir() / "conv_2.json", t0 - std::chrono::hours(2));
  std::filesystem::last_write_time(files.dir() / "conv_1.json", t0 - std::chrono::hours(1));
  std::filesystem::last_write_time(files.dir() / "resp_3.json", t0 - std::chrono::minutes(30));
  ASSERT_TRUE(files.write("conv_2", R"({"n": 22})", why)) << why; // written again: now the newest
  const auto all = files.read_all();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], (std::pair<std::string, std::string>{"conv_1", R"({"n": 1})"}));
  EXPECT_EQ(all[2].first, "conv_2");
  EXPECT_EQ(all[2].second, R"({"n": 22})");
  files.remove("conv_1");
  files.remove("conv_1"); // (none: nothing happens)
  EXPECT_EQ(files.read_all().size(), 2u);
  // Temporaries a stop left, other files and names that are no id are passed over.
  std::ofstream(files.dir() / "conv_9.json.tmp") << "{";
  std::ofstream(files.dir() / "notes.txt") << "x";
  std::ofstream(files.dir() / "bad name.json") << "{}";
  EXPECT_EQ(files.read_all().size(), 2u);
  // Only ids the front makes name files.
  EXPECT_FALSE(files.write("../escape", "{}", why));
  EXPECT_NE(why.find("not an id"), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(tmp.dir() / "a" / "escape.json"));
}

TEST(kept_files, synced_files_are_written_replaced_and_removed_alike) {
  testing::temp_dir tmp("kept_files_sync");
  auto opened = kept_files::open(tmp.dir() / "s", true);
  ASSERT_TRUE(std::holds_alternative<kept_files>(opened)) << std::get<std::string>(opened);
  const auto& files = std::get<kept_files>(opened);
  std::string why;
  const std::string big(300000, 'x'); // (more than one write's worth on some systems)
  ASSERT_TRUE(files.write("file_1", big, why)) << why;
  ASSERT_TRUE(files.write("file_2", "{}", why)) << why;
  ASSERT_TRUE(files.write("file_2", R"({"again": true})", why)) << why;
  files.remove("file_1");
  const auto all = files.read_all();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], (std::pair<std::string, std::string>{"file_2", R"({"again": true})"}));
  EXPECT_FALSE(std::filesystem::exists(files.dir() / "file_2.json.tmp"));
}

TEST(kept_files, a_log_is_appended_read_cleared_and_goes_with_its_file) {
  testing::temp_dir tmp("kept_files_log");
  for (const bool sync : {false, true}) {
    SCOPED_TRACE(sync ? "synced" : "not synced");
    auto opened = kept_files::open(tmp.dir() / (sync ? "s" : "n"), sync);
    ASSERT_TRUE(std::holds_alternative<kept_files>(opened)) << std::get<std::string>(opened);
    const auto& files = std::get<kept_files>(opened);
    std::string why;
    EXPECT_EQ(files.read_log("batch_1"), "") << "none yet";
    ASSERT_TRUE(files.write("batch_1", "{}", why)) << why;
    ASSERT_TRUE(files.append("batch_1", "one\n", why)) << why;
    ASSERT_TRUE(files.append("batch_1", std::string(200000, 'x') + "\n", why)) << why;
    EXPECT_EQ(files.read_log("batch_1"), "one\n" + std::string(200000, 'x') + "\n");
    ASSERT_EQ(files.read_all().size(), 1u) << "a log is no file of its own";
    EXPECT_EQ(files.read_all()[0].second, "{}");
    files.remove_log("batch_1");
    EXPECT_EQ(files.read_log("batch_1"), "");
    ASSERT_TRUE(files.append("batch_1", "two\n", why)) << why;
    EXPECT_EQ(files.read_log("batch_1"), "two\n");
    files.remove("batch_1");
    EXPECT_FALSE(std::filesystem::exists(files.dir() / "batch_1.log")) << "removed with its file";
    EXPECT_FALSE(files.append("../up", "x", why));
    EXPECT_NE(why.find("not an id"), std::string::npos) << why;
    // A log a crash left without its file is removed by the next open; one
    // with its file stays.
    ASSERT_TRUE(files.write("batch_2", "{}", why)) << why;
    ASSERT_TRUE(files.append("batch_2", "kept\n", why)) << why;
    std::ofstream(files.dir() / "batch_3.log") << "orphan\n";
    auto again = kept_files::open(files.dir(), sync);
    ASSERT_TRUE(std::holds_alternative<kept_files>(again));
    EXPECT_FALSE(std::filesystem::exists(files.dir() / "batch_3.log"));
    EXPECT_EQ(std::get<kept_files>(again).read_log("batch_2"), "kept\n");
  }
}

// With sync, appends are flushed in the background: those that come while
// a flush is held back (as while one is under way) share the next, one
// fsync per log however many records it took.
TEST(kept_files, synced_appends_are_flushed_together_in_the_background) {
  testing::temp_dir tmp("kept_files_group");
  auto opened = kept_files::open(tmp.dir() / "g", true);
  ASSERT_TRUE(std::holds_alternative<kept_files>(opened)) << std::get<std::string>(opened);
  const auto& files = std::get<kept_files>(opened);
  EXPECT_EQ(files.log_flushes(), 0u);
  files.flush_logs(); // nothing appended: at once
  std::string why;
  files.hold_log_flushes(true);
  std::string want_1, want_2;
  for (int i = 0; i < 50; ++i) {
    const auto record = "answer " + std::to_string(i) + "\n";
    ASSERT_TRUE(files.append(i % 2 == 0 ? "batch_1" : "batch_2", record, why)) << why;
    (i % 2 == 0 ? want_1 : want_2) += record;
  }
  EXPECT_EQ(files.log_flushes(), 0u) << "held";
  EXPECT_EQ(files.read_log("batch_1"), want_1) << "written at once, flushed later";
  files.hold_log_flushes(false);
  files.flush_logs();
  EXPECT_EQ(files.log_flushes(), 1u) << "50 records of 2 logs in one flush";
  ASSERT_TRUE(files.append("batch_1", "more\n", why)) << why;
  files.flush_logs();
  EXPECT_EQ(files.log_flushes(), 2u);
  EXPECT_EQ(files.read_log("batch_1"), want_1 + "more\n");
  EXPECT_EQ(files.read_log("batch_2"), want_2);

  // A log removed while its flush waits is passed over; a copy shares the
  // flusher, and the last one's end flushes what is pending.
  files.hold_log_flushes(true);
  ASSERT_TRUE(files.append("batch_3", "gone\n", why)) << why;
  files.remove_log("batch_3");
  ASSERT_TRUE(files.append("batch_4", "last\n", why)) << why;
  {
    const kept_files copy = files;
    copy.hold_log_flushes(false);
    copy.flush_logs();
    EXPECT_EQ(files.log_flushes(), 3u);
  }
  EXPECT_EQ(files.read_log("batch_4"), "last\n");

  // Without sync there is no flusher.
  auto plain = kept_files::open(tmp.dir() / "p", false);
  ASSERT_TRUE(std::holds_alternative<kept_files>(plain));
  ASSERT_TRUE(std::get<kept_files>(plain).append("batch_1", "x\n", why)) << why;
  std::get<kept_files>(plain).flush_logs();
  EXPECT_EQ(std::get<kept_files>(plain).log_flushes(), 0u);
}

TEST(kept_files, a_directory_that_cannot_be_made_is_refused_naming_it) {
  testing::temp_dir tmp("kept_files");
  std::ofstream(tmp.dir() / "plain") << "a file";
  auto opened = kept_files::open(tmp.dir() / "plain" / "under");
  ASSERT_TRUE(std::holds_alternative<std::string>(opened));
  EXPECT_NE(std::get<std::string>(opened).find("plain"), std::string::npos) << std::get<std::string>(opened);
}

} // namespace
} // namespace troupe
