// The cpu backend's adapter lifecycle on a model troupe-mkmodel writes: an
// adapter is unusable until load_adapter(); the first load reads the files
// (disk), a reload after drop_adapter() comes from the host tier and decodes
// the same tokens; a bounded host tier re-reads evicted adapters; a corrupt
// file fails only that adapter, naming the file; entries the model cannot
// run fail alone, each named with why; log-probabilities follow each entry,
// with an adapter or none, and so do prompt log-probabilities.
#include "gpu/cpu_backend.hpp"
#include "tests/support/logprobs_check.hpp"
#include "tests/support/temp_model.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace troupe::gpu {
namespace {

namespace fs = std::filesystem;

class cpu_backend_adapters : public ::testing::Test {
protected:
  void SetUp() override {
    model_ = std::make_unique<testing::temp_model>(
      "--hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --adapters 2 --ranks 4,8 "
      "--targets q_proj,v_proj");
    dir_ = model_->dir();
    ASSERT_FALSE(dir_.empty()) << "troupe-mkmodel failed";
  }

  std::unique_ptr<cpu_backend> open(std::uint64_t host_bytes = 0) {
    auto b = cpu_backend::open(dir_, 64, 16, host_bytes);
    if (auto* err = std::get_if<std::string>(&b)) {
      ADD_FAILURE() << *err;
      return nullptr;
    }
    return std::move(std::get<std::unique_ptr<cpu_backend>>(b));
  }

  /// A greedy prefill of `tokens` in `pages`, through `adapter` (rank 4) or
  /// none, asking for `logprobs`.
  static step_entry entry(std::uint64_t id, std::vector<std::int32_t> tokens, std::vector<std::uint32_t> pages,
                          std::uint32_t adapter, std::int32_t logprobs = -1) {
    step_entry e;
    e.request_id = id;
    e.adapter_id = adapter;
    e.adapter_rank = adapter == 0 ? 0 : 4;
    e.tokens = std::move(tokens);
    e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
    e.temperature = 0;
    e.pages = std::move(pages);
    e.logprobs = logprobs;
    return e;
  }

  /// The greedy first token of a fixed prompt through `adapter`.
  static std::int32_t first_token(cpu_backend& b, std::uint32_t adapter) {
    const auto e = entry(1, {1, 5, 9, 13, 17}, {0}, adapter);
    return b.run_step(std::span{&e, 1}).tokens.at(0);
  }

  std::string adapter_dir(int i) const { return dir_ + "/adapters/lora-" + std::to_string(i); }

  std::unique_ptr<testing::temp_model> model_;
  std::string dir_;
};

TEST_F(cpu_backend_adapters, load_drop_reload_from_the_host_tier) {
  auto b = open();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(first_token(*b, 1), -1) << "unusable before it is loaded";
  const auto base = first_token(*b, 0);
  EXPECT_GE(base, 0);

  auto first = b->load_adapter(1, adapter_dir(0), 0, {});
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_FALSE(first.host_hit);
  EXPECT_EQ(b->device_adapters(), 1u);
  EXPECT_EQ(b->host_adapters(), 1u);
  const auto with_adapter = first_token(*b, 1);
  EXPECT_GE(with_adapter, 0);

  b->drop_adapter(1);
  EXPECT_EQ(b->device_adapters(), 0u);
  EXPECT_EQ(first_token(*b, 1), -1) << "dropped from the device";
  auto again = b->load_adapter(1, adapter_dir(0), 0, {});
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_TRUE(again.host_hit) << "the host tier kept it";
  EXPECT_EQ(again.disk_seconds, 0.0);
  EXPECT_EQ(first_token(*b, 1), with_adapter);

  b->forget_adapter(1);
  EXPECT_EQ(b->host_adapters(), 0u);
  EXPECT_FALSE(b->load_adapter(1, adapter_dir(0), 0, {}).host_hit);
}

TEST_F(cpu_backend_adapters, a_bounded_host_tier_rereads_what_it_dropped) {
  auto b = open(1); // one byte: holds only the adapter being loaded
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->load_adapter(1, adapter_dir(0), 0, {}).error.empty());
  ASSERT_TRUE(b->load_adapter(2, adapter_dir(1), 0, {}).error.empty());
  EXPECT_EQ(b->host_adapters(), 1u);
  EXPECT_EQ(b->device_adapters(), 2u) << "the device set is not bounded by the host tier";
  EXPECT_FALSE(b->load_adapter(1, adapter_dir(0), 0, {}).host_hit);
}

TEST_F(cpu_backend_adapters, a_corrupt_file_fails_only_that_adapter) {
  const auto broken = dir_ + "/broken";
  fs::copy(adapter_dir(1), broken);
  const auto weights = broken + "/adapter_model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 3);
  auto b = open();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->load_adapter(1, adapter_dir(0), 0, {}).error.empty());
  auto r = b->load_adapter(2, broken, 0, {});
  EXPECT_FALSE(r.error.empty());
  EXPECT_NE(r.error.find("adapter_model.safetensors"), std::string::npos) << r.error;
  EXPECT_EQ(first_token(*b, 2), -1);
  EXPECT_GE(first_token(*b, 1), 0) << "the good adapter still serves";
  auto missing = b->load_adapter(3, dir_ + "/nowhere", 0, {});
  EXPECT_NE(missing.error.find("nowhere"), std::string::npos) << missing.error;
}

TEST_F(cpu_backend_adapters, entries_it_cannot_run_fail_alone_each_named_with_why) {
  auto b = open();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->load_adapter(1, adapter_dir(0), 0, {}).error.empty());
  const auto alone = first_token(*b, 1);
  ASSERT_GE(alone, 0);
  std::vector<step_entry> batch{
    entry(10, {1, 5, 512}, {1}, 0),                 // a token outside the vocabulary of 512
    entry(11, std::vector<std::int32_t>(20, 7), {2}, 0), // 20 tokens in one page of 16
    entry(12, {1, 5, 9}, {3}, 2),                   // adapter 2 was never loaded
    entry(13, {1, 5, 9, 13, 17}, {0}, 1),           // runs
    entry(14, {1, 5, 9}, {64}, 0),                  // a page outside the pool of 64
  };
  const auto r = b->run_step(batch);
  ASSERT_EQ(r.tokens.size(), batch.size());
  EXPECT_EQ(r.tokens[3], alone) << "the good entry runs as it would alone";
  for (std::size_t i : {0u, 1u, 2u, 4u})
    EXPECT_EQ(r.tokens[i], -1) << "entry " << i;
  ASSERT_EQ(r.failures.size(), 4u) << describe(r.failures);
  const std::vector<std::pair<std::uint64_t, std::string>> want{
    {10, "token 512"}, {11, "1 cache pages for 20 tokens"}, {12, "adapter 2"}, {14, "page 64"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r.failures[i].request_id, want[i].first);
    EXPECT_NE(r.failures[i].reason.find(want[i].second), std::string::npos) << r.failures[i].reason;
  }
  EXPECT_EQ(first_token(*b, 1), alone) << "no failed entry touched the cache of another";
}

TEST_F(cpu_backend_adapters, log_probabilities_follow_each_entry_with_an_adapter_or_none) {
  auto b = open();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->load_adapter(1, adapter_dir(0), 0, {}).error.empty());
  std::vector<step_entry> batch{
    entry(1, {1, 5, 9, 13, 17}, {0}, 1, 5), entry(2, {2, 4, 6}, {1}, 0), entry(3, {3, 8, 1, 1}, {2}, 0, 0),
    entry(4, {1, 5, 512}, {3}, 0, 3), // a token outside the vocabulary: fails, no log-probabilities
    entry(5, {7, 7, 7, 7, 7, 7}, {4}, 0, 20)};
  batch[4].temperature = 1.0f;
  batch[4].seed = 99;
  testing::expect_logprobs_follow_each_entry(*b, batch, 1e-4f);
  // None asking: none given.
  for (auto& e : batch)
    e.logprobs = -1;
  EXPECT_TRUE(b->run_step(batch).logprobs.empty());
}

TEST_F(cpu_backend_adapters, prompt_log_probabilities_are_those_of_each_prefix_alone) {
  auto b = open();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->load_adapter(1, adapter_dir(0), 0, {}).error.empty());
  // A prompt the model itself would continue greedily: every input token's
  // own log-probability is checked (it is the one sampled alone).
  std::vector<std::int32_t> greedy{3};
  for (int k = 0; k < 6; ++k) {
    const auto e = entry(9, greedy, {5}, 1);
    greedy.push_back(b->run_step(std::span{&e, 1}).tokens.at(0));
  }
  std::vector<step_entry> batch{entry(1, greedy, {0}, 1), entry(2, {2, 4, 6}, {1}, 0, 2),
                                entry(3, {3, 8, 1, 1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53}, {2, 6}, 0),
                                entry(4, {1, 5, 512}, {3}, 0), // outside the vocabulary: fails, none given
                                entry(5, {7}, {4}, 1)};        // one token: nothing to give
  const std::int32_t asked[] = {4, -1, 20, 3, 0};
  for (std::size_t i = 0; i < batch.size(); ++i)
    batch[i].prompt_logprobs = asked[i];
  const auto checked = testing::expect_prompt_logprobs_match_prefixes(*b, batch, 1e-4f);
  EXPECT_GE(checked, greedy.size() - 1) << "every token of the greedy prompt";
  // The sampled token and its own log-probabilities are those of a prefill
  // that asked for none: asking changes nothing else.
  const auto with = b->run_step(batch);
  for (auto& e : batch)
    e.prompt_logprobs = -1;
  const auto without = b->run_step(batch);
  EXPECT_EQ(with.tokens, without.tokens);
  EXPECT_TRUE(without.prompt_logprobs.empty()) << "none asking: none given";
  ASSERT_EQ(with.prompt_logprobs.size(), batch.size());
  EXPECT_TRUE(with.prompt_logprobs[4].empty());
  EXPECT_TRUE(with.prompt_logprobs[3].empty());
}

TEST_F(cpu_backend_adapters, logit_adjustments_steer_sampling_not_the_log_probabilities) {
  auto b = open();
  ASSERT_NE(b, nullptr);
  testing::expect_logit_adjust_steers_sampling_only(*b, entry(1, {1, 5, 9, 13, 17}, {0}, 0), b->vocab().vocab_size(),
                                                    1e-4f);
  testing::expect_min_p_one_draws_the_greedy_pick(*b, entry(1, {1, 5, 9, 13, 17}, {0}, 0));
}

TEST(cpu_backend_rope, a_longrope_model_says_where_its_passes_change_factors) {
  // The scheduler recomputes a request there (scheduler_limits::rope_long_after).
  const testing::temp_model phi4{"--arch phi3 --hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 "
                                 "--max-context 64 --partial-rotary 0.75 --longrope 20"};
  const testing::temp_model llama{"--hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2"};
  ASSERT_FALSE(phi4.dir().empty() || llama.dir().empty()) << "troupe-mkmodel failed";
  for (const auto& [dir, want] : {std::pair{phi4.dir(), 20u}, std::pair{llama.dir(), 0u}}) {
    auto b = cpu_backend::open(dir, 8, 16);
    ASSERT_TRUE(std::holds_alternative<std::unique_ptr<cpu_backend>>(b)) << std::get<std::string>(b);
    EXPECT_EQ(std::get<std::unique_ptr<cpu_backend>>(b)->rope_long_after(), want) << dir;
  }
}

} // namespace
} // namespace troupe::gpu
