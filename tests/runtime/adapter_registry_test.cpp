// Tests for runtime/adapter_registry: the catalog (explicit and generated
// entries, 1-based ids, page rounding, unknown lookups).
#include "runtime/adapter_registry.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe {
namespace {

static_assert(std::is_nothrow_move_constructible_v<adapter_entry>);
static_assert(std::is_nothrow_move_constructible_v<adapter_catalog>);

/// 1000 bytes per rank unit: rank 8 -> 8000 bytes.
std::uint64_t bytes_of(std::uint32_t rank) { return std::uint64_t{rank} * 1000; }

// -- catalog --------------------------------------------------------------------------

TEST(adapter_catalog, explicit_then_generated_entries_with_one_based_ids) {
  adapter_generate_options gen;
  gen.count = 5;
  gen.prefix = "gen-";
  gen.ranks = {8, 16};
  const adapter_catalog cat{{{"sql", 4, ""}, {"chat", 64, "/tmp/x"}}, gen, bytes_of, 4096};
  struct row {
    std::uint32_t id;
    std::string name;
    std::uint32_t rank;
    std::uint64_t bytes;
    std::uint64_t pages;
  };
  const std::vector<row> expected{
    {1, "sql", 4, 4000, 1},    {2, "chat", 64, 64000, 16}, {3, "gen-0", 8, 8000, 2},
    {4, "gen-1", 16, 16000, 4}, {5, "gen-2", 8, 8000, 2},   {6, "gen-3", 16, 16000, 4},
    {7, "gen-4", 8, 8000, 2},
  };
  ASSERT_EQ(cat.all().size(), expected.size());
  for (const auto& r : expected) {
    const auto* e = cat.by_id(r.id);
    ASSERT_NE(e, nullptr) << r.name;
    EXPECT_EQ(e->id, r.id) << r.name;
    EXPECT_EQ(e->name, r.name);
    EXPECT_EQ(e->rank, r.rank) << r.name;
    EXPECT_EQ(e->bytes, r.bytes) << r.name;
    EXPECT_EQ(e->pages, r.pages) << r.name;
    EXPECT_EQ(cat.find(r.name), e) << r.name;
    EXPECT_EQ(&cat.all().at(r.id), e) << r.name;
  }
}

TEST(adapter_catalog, pages_round_up) {
  struct pages_case {
    std::uint32_t rank;
    std::uint64_t page_bytes;
    std::uint64_t pages;
  };
  const std::vector<pages_case> table{
    {8, 8000, 1}, {8, 7999, 2}, {8, 8001, 1}, {8, 4000, 2}, {8, 3999, 3}, {8, 1, 8000},
    {8, 0, 0}, // no page size: no pages
  };
  for (const auto& c : table) {
    const adapter_catalog cat{{{"a", c.rank, ""}}, {}, bytes_of, c.page_bytes};
    ASSERT_EQ(cat.all().size(), 1u);
    EXPECT_EQ(cat.all().begin()->second.pages, c.pages) << "rank " << c.rank << " page_bytes " << c.page_bytes;
  }
}

TEST(adapter_catalog, unknown_lookups_give_nullptr) {
  adapter_generate_options gen;
  gen.count = 2;
  const adapter_catalog cat{{{"a", 8, ""}}, gen, bytes_of, 4096};
  EXPECT_EQ(cat.find("nope"), nullptr);
  EXPECT_EQ(cat.find(""), nullptr);
  EXPECT_EQ(cat.find("A"), nullptr);
  EXPECT_EQ(cat.by_id(0), nullptr); // the base model is no adapter
  EXPECT_EQ(cat.by_id(4), nullptr);
  EXPECT_EQ(cat.by_id(0xffffffffu), nullptr);
  ASSERT_NE(cat.find("lora-1"), nullptr); // default prefix
  EXPECT_EQ(cat.find("lora-1")->id, 3u);
  EXPECT_EQ(cat.find("lora-1")->rank, 16u); // default ranks 8, 16, 32, 64
  EXPECT_EQ(cat.find("lora-2"), nullptr);
}

TEST(adapter_catalog, empty_without_specs_or_ranks) {
  adapter_generate_options gen;
  gen.count = 3;
  gen.ranks = {};
  const adapter_catalog none{{}, gen, bytes_of, 4096};
  EXPECT_TRUE(none.all().empty());
  EXPECT_EQ(none.by_id(1), nullptr);
  const adapter_catalog def;
  EXPECT_TRUE(def.all().empty());
  EXPECT_EQ(def.find("lora-0"), nullptr);
}


TEST(adapter_catalog, add_and_remove_at_run_time_never_reuse_ids) {
  adapter_catalog cat{{{"a", 8, ""}, {"b", 16, ""}}, {}, bytes_of, 4096};
  auto added = cat.add({"c", 32, "/x"});
  ASSERT_TRUE(std::holds_alternative<adapter_entry>(added));
  EXPECT_EQ(std::get<adapter_entry>(added).id, 3u);
  EXPECT_EQ(std::get<adapter_entry>(added).path, "/x");
  EXPECT_TRUE(cat.remove("b"));
  EXPECT_FALSE(cat.remove("b"));
  EXPECT_EQ(cat.find("b"), nullptr);
  EXPECT_EQ(cat.by_id(2), nullptr);
  auto again = cat.add({"b", 16, ""});
  ASSERT_TRUE(std::holds_alternative<adapter_entry>(again));
  EXPECT_EQ(std::get<adapter_entry>(again).id, 4u) << "ids are never reused";
  EXPECT_EQ(cat.all().size(), 3u);
}

TEST(adapter_catalog, add_refusals_say_why) {
  adapter_catalog cat{{{"a", 8, ""}}, {}, bytes_of, 4096};
  struct row {
    adapter_spec spec;
    std::string mentions;
  };
  for (const auto& r : std::vector<row>{{{"a", 8, ""}, "already registered"},
                                        {{"", 8, ""}, "empty"},
                                        {{"has space", 8, ""}, "whitespace"},
                                        {{"z", 0, ""}, "rank"}}) {
    auto got = cat.add(r.spec);
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << r.spec.name;
    EXPECT_NE(std::get<std::string>(got).find(r.mentions), std::string::npos) << std::get<std::string>(got);
  }
  EXPECT_EQ(cat.all().size(), 1u);
}

TEST(adapter_catalog, scans_a_directory_of_peft_adapters) {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("troupe-scan-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (auto [name, rank] : {std::pair{"beta", 16}, {"alpha", 4}}) {
    fs::create_directories(dir / name);
    std::ofstream{dir / name / "adapter_config.json"}
      << R"({"r":)" << rank << R"(,"lora_alpha":8,"target_modules":["q_proj","v_proj"]})";
  }
  fs::create_directories(dir / "not-an-adapter");
  std::ofstream{dir / "README"} << "x";
  auto found = scan_adapter_directory(dir.string());
  ASSERT_TRUE(std::holds_alternative<std::vector<adapter_spec>>(found)) << std::get<std::string>(found);
  const auto& specs = std::get<std::vector<adapter_spec>>(found);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "alpha");
  EXPECT_EQ(specs[0].rank, 4u);
  EXPECT_EQ(specs[1].name, "beta");
  EXPECT_EQ(specs[1].rank, 16u);
  EXPECT_EQ(specs[1].path, (dir / "beta").string());
  // A broken config names its file.
  std::ofstream{dir / "beta" / "adapter_config.json"} << "{not json";
  auto broken = scan_adapter_directory(dir.string());
  ASSERT_TRUE(std::holds_alternative<std::string>(broken));
  EXPECT_NE(std::get<std::string>(broken).find("beta/adapter_config.json"), std::string::npos);
  auto missing = scan_adapter_directory((dir / "nope").string());
  ASSERT_TRUE(std::holds_alternative<std::string>(missing));
  EXPECT_NE(std::get<std::string>(missing).find("not a directory"), std::string::npos);
  fs::remove_all(dir);
}

} // namespace
} // namespace troupe
