// The cpu model's hybrid cache and recompute on models troupe-mkmodel writes:
// a request's greedy tokens are the same with a KV cache, with a hidden cache
// (K and V recomputed from stored hidden states, rotary embeddings at their
// original positions), with an adapter on q/v, after a recompute (a
// prefill of prompt + output so far) and after a swap (pages copied out to
// host memory and back into other pages); a hidden cache packs twice the tokens
// per page on a multi-head model, and a grouped-query model where it saves
// nothing refuses it.
#include "gpu/cpu_model.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/lora.hpp"
#include "tests/support/temp_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace troupe::gpu {
namespace {

using troupe::testing::temp_model;

std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

/// Greedy decoding of `steps` tokens after `prompt`: a prefill, then one
/// token per pass, on `pages`; `recompute_at` > 0 drops the cache after that
/// many outputs and re-prefills prompt + outputs on fresh pages.
struct decoded {
  std::vector<std::int32_t> tokens;
  std::vector<float> logits; ///< every step's, concatenated
  bool operator==(const decoded& o) const { return tokens == o.tokens; }
};

decoded decode(cpu_model& m, const std::vector<std::int32_t>& prompt, std::size_t steps,
               bool hidden, const lora_adapter* adapter, std::vector<std::uint32_t> pages,
               std::vector<std::uint32_t> fresh = {}, std::size_t recompute_at = 0,
               std::size_t swap_at = 0) {
  const auto vocab = m.config().vocab_size;
  decoded d;
  auto& out = d.tokens;
  std::vector<std::int32_t> feed = prompt;
  std::uint32_t start = 0;
  while (out.size() < steps) {
    cpu_sequence s{feed, start, pages, adapter, hidden};
    const auto logits = m.forward(std::span{&s, 1});
    if (logits.size() != vocab)
      return {};
    d.logits.insert(d.logits.end(), logits.begin(), logits.end());
    start += static_cast<std::uint32_t>(feed.size());
    out.push_back(argmax(logits));
    feed = {out.back()};
    if (swap_at > 0 && out.size() == swap_at) {
      // Preempted by swap: every page out to host memory, the device pages
      // scribbled over (another request used them), then back into others.
      std::vector<std::vector<float>> host(pages.size(), std::vector<float>(m.page_floats()));
      for (std::size_t i = 0; i < pages.size(); ++i)
        EXPECT_TRUE(m.read_page(pages[i], host[i]));
      const std::vector<float> junk(m.page_floats(), 7.0f);
      for (auto pg : pages)
        EXPECT_TRUE(m.write_page(pg, junk));
      for (std::size_t i = 0; i < fresh.size(); ++i)
        EXPECT_TRUE(m.write_page(fresh[i], host[i]));
      pages = fresh;
      swap_at = 0;
    }
    if (recompute_at > 0 && out.size() == recompute_at) {
      // Preempted by recompute: the cache is gone; prefill prompt + output.
      feed = prompt;
      feed.insert(feed.end(), out.begin(), out.end());
      start = 0;
      pages = fresh;
      recompute_at = 0;
    }
  }
  return d;
}

void greedy_tokens_match_with_kv_hidden_and_recompute(const std::string& arch) {
  const temp_model tm{"--hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 4 --adapters 1 "
                      "--ranks 8 --targets q_proj,v_proj --seed 3 --arch " + arch};
  const auto& dir = tm.dir();
  ASSERT_FALSE(dir.empty());
  auto w = load_llama(dir);
  ASSERT_TRUE(std::holds_alternative<llama_weights>(w)) << std::get<std::string>(w);
  const auto config = std::get<llama_weights>(w).config;
  auto a = load_peft_adapter(dir + "/adapters/lora-0", config);
  ASSERT_TRUE(std::holds_alternative<lora_adapter>(a)) << std::get<std::string>(a);
  const auto& adapter = std::get<lora_adapter>(a);
  cpu_model m{std::move(std::get<llama_weights>(w)), 64, 16};
  ASSERT_TRUE(m.hidden_saves());
  EXPECT_EQ(m.hidden_page_tokens(), 32u) << "multi-head: hidden size == K size, so twice the tokens";

  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 21; ++i)
    prompt.push_back(3 + (i * 37) % 200);
  const std::size_t steps = 24; // 45 positions: 3 KV pages, 2 hidden pages
  for (const lora_adapter* ad : {static_cast<const lora_adapter*>(nullptr), &adapter}) {
    SCOPED_TRACE(ad ? "with the adapter" : "base model");
    const auto kv = decode(m, prompt, steps, false, ad, {0, 1, 2});
    ASSERT_EQ(kv.tokens.size(), steps);
    const std::vector<std::pair<const char*, decoded>> others{
      {"hidden cache", decode(m, prompt, steps, true, ad, {10, 11})},
      {"recompute (KV)", decode(m, prompt, steps, false, ad, {20, 21, 22}, {30, 31, 32}, 9)},
      {"recompute into a hidden cache", decode(m, prompt, steps, true, ad, {40, 41}, {42, 43}, 9)},
      {"recompute after one token", decode(m, prompt, steps, false, ad, {50, 51, 52}, {53, 54, 55}, 1)},
      {"swapped out and in (KV)", decode(m, prompt, steps, false, ad, {56, 57, 58}, {59, 60, 61}, 0, 9)},
      {"swapped out and in (hidden)", decode(m, prompt, steps, true, ad, {44, 45}, {46, 47}, 0, 17)},
    };
    for (const auto& [what, d] : others) {
      EXPECT_EQ(d.tokens, kv.tokens) << what;
      // Not only the argmax: every step's logits, bit for bit (K and V
      // recomputed from hidden states or a prefill are the ones decoding
      // wrote: gpu/cpu_gemm's rows do not depend on their batch).
      EXPECT_EQ(d.logits, kv.logits) << what;
    }
  }
  // Page copies check their bounds.
  std::vector<float> page(m.page_floats());
  EXPECT_FALSE(m.read_page(64, page)) << "no page 64 in a store of 64";
  EXPECT_FALSE(m.write_page(64, page));
  page.pop_back();
  EXPECT_FALSE(m.read_page(0, page)) << "a buffer of the wrong size";
  // A hidden sequence given too few pages for its tokens is refused.
  cpu_sequence s{prompt, 0, std::vector<std::uint32_t>{}, nullptr, true};
  EXPECT_TRUE(m.forward(std::span{&s, 1}).empty());
}

TEST(hidden_cache, greedy_tokens_match_with_kv_hidden_and_recompute) {
  greedy_tokens_match_with_kv_hidden_and_recompute("llama");
}

// Qwen2's k and v biases are added when K and V are recomputed too, and
// Qwen3's k norm.
TEST(hidden_cache, greedy_tokens_match_with_kv_hidden_and_recompute_with_biases) {
  greedy_tokens_match_with_kv_hidden_and_recompute("qwen2");
}

TEST(hidden_cache, greedy_tokens_match_with_kv_hidden_and_recompute_with_qk_norms) {
  greedy_tokens_match_with_kv_hidden_and_recompute("qwen3");
}

TEST(hidden_cache, grouped_query_models_where_it_saves_nothing_refuse_it) {
  // kv-heads 2 of 8: K and V take half the hidden size together.
  const temp_model tm{"--hidden 64 --intermediate 128 --layers 1 --heads 8 --kv-heads 2"};
  const auto& dir = tm.dir();
  ASSERT_FALSE(dir.empty());
  auto w = load_llama(dir);
  ASSERT_TRUE(std::holds_alternative<llama_weights>(w));
  cpu_model m{std::move(std::get<llama_weights>(w)), 8, 16};
  EXPECT_FALSE(m.hidden_saves());
  const std::vector<std::int32_t> prompt{3, 4, 5};
  const std::vector<std::uint32_t> pages{0};
  cpu_sequence hidden{prompt, 0, pages, nullptr, true};
  EXPECT_TRUE(m.forward(std::span{&hidden, 1}).empty());
  cpu_sequence kv{prompt, 0, pages, nullptr, false};
  EXPECT_FALSE(m.forward(std::span{&kv, 1}).empty());
}

} // namespace
} // namespace troupe::gpu
