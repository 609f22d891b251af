// Tests for sim_tokenizer and sim_backend: byte round trips, pseudo-words,
// deterministic tokens that ignore batch composition, and delegation of time
// to the cost model.
#include "gpu/sim_backend.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe::gpu {
namespace {

static_assert(std::is_nothrow_move_constructible_v<sim_tokenizer>);
static_assert(!std::is_abstract_v<sim_backend>);

std::string round_trip(const tokenizer& tok, const std::string& text) {
  std::string out;
  for (const auto id : tok.encode(text))
    out += tok.decode(id);
  return out;
}

sim_backend make_backend(std::uint64_t seed, std::string_view gpu = "H100-80GB") {
  return sim_backend{find_model_preset("llama-2-7b").value(), find_gpu_spec(gpu).value(), seed};
}

step_entry request(std::uint64_t seed, std::uint32_t output_index, std::uint32_t adapter_id = 0) {
  return step_entry{.request_id = seed * 1000 + output_index,
                    .adapter_id = adapter_id,
                    .adapter_rank = adapter_id == 0 ? 0u : 8u,
                    .new_tokens = output_index == 0 ? 64u : 1u,
                    .context_tokens = output_index == 0 ? 0u : 64u + output_index,
                    .output_index = output_index,
                    .seed = seed,
                    .temperature = 1.0f,
                    .top_p = 1.0f,
                    .top_k = 0,
                    .tokens = {},
                    .pages = {}};
}

// -- tokenizer --------------------------------------------------------------------

TEST(sim_tokenizer, ascii_round_trips_one_token_per_byte) {
  const sim_tokenizer tok{32000};
  const std::string text = "Hello, world! 0123456789 ~{}\n\t";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], sim_tokenizer::first_byte_token + 'H');
  EXPECT_EQ(round_trip(tok, text), text);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(sim_tokenizer, utf8_round_trips_byte_by_byte) {
  const sim_tokenizer tok{32000};
  const std::string text = "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82";  // "héllo 世界 🙂"
  EXPECT_EQ(tok.encode(text).size(), text.size());
  EXPECT_EQ(round_trip(tok, text), text);
  std::string all_bytes;
  for (int b = 0; b < 256; ++b)
    all_bytes += static_cast<char>(b);
  EXPECT_EQ(round_trip(tok, all_bytes), all_bytes);
}

TEST(sim_tokenizer, specials_and_out_of_range_decode_to_nothing) {
  const sim_tokenizer tok{32000};
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.eos_token(), 2);
  for (const std::int32_t id : {0, 1, 2, -1, 32000, 1 << 30})
    EXPECT_EQ(tok.decode(id), "") << id;
}

TEST(sim_tokenizer, words_are_deterministic_lowercase_syllables) {
  const sim_tokenizer a{32000};
  const sim_tokenizer b{32000};
  std::set<std::string> distinct;
  for (std::int32_t id = sim_tokenizer::first_word_token; id < 32000; id += 97) {
    const auto word = a.decode(id);
    EXPECT_EQ(word, b.decode(id));
    ASSERT_GE(word.size(), 3u);
    ASSERT_LE(word.size(), 7u);
    EXPECT_EQ(word[0], ' ');
    for (std::size_t i = 1; i < word.size(); ++i)
      EXPECT_TRUE(word[i] >= 'a' && word[i] <= 'z') << word;
    distinct.insert(word);
  }
  EXPECT_GT(distinct.size(), 200u);  // of 328 ids sampled
}

TEST(sim_tokenizer, tiny_vocab_is_raised_to_hold_every_byte) {
  const sim_tokenizer tok{10};
  EXPECT_EQ(tok.vocab_size(), sim_tokenizer::first_word_token + 1);
  EXPECT_EQ(round_trip(tok, "ok"), "ok");
}

// -- backend ---------------------------------------------------------------------

TEST(sim_backend, names_itself_and_serves_the_model_vocab) {
  const auto backend = make_backend(1);
  EXPECT_EQ(backend.name(), "sim");
  EXPECT_EQ(backend.vocab().vocab_size(), 32000);
  EXPECT_EQ(backend.vocab().eos_token(), 2);
}

TEST(sim_backend, tokens_are_in_range_and_never_special) {
  auto backend = make_backend(42);
  std::vector<step_entry> batch;
  for (std::uint64_t seed = 0; seed < 50; ++seed)
    for (std::uint32_t i = 0; i < 40; ++i)
      batch.push_back(request(seed, i));
  const auto result = backend.run_step(batch);
  ASSERT_EQ(result.tokens.size(), batch.size());
  std::set<std::int32_t> distinct;
  for (const auto token : result.tokens) {
    EXPECT_GE(token, sim_tokenizer::first_word_token);
    EXPECT_LT(token, 32000);
    distinct.insert(token);
  }
  EXPECT_GT(distinct.size(), 1800u);  // 2000 draws from ~31700 ids
}

TEST(sim_backend, tokens_are_deterministic) {
  auto a = make_backend(7);
  auto b = make_backend(7, "A100-80GB");  // the GPU does not change tokens
  const std::vector<step_entry> batch{request(1, 0), request(2, 5), request(3, 9, 4)};
  EXPECT_EQ(a.run_step(batch).tokens, b.run_step(batch).tokens);
  EXPECT_EQ(a.run_step(batch).tokens, a.run_step(batch).tokens);
}

TEST(sim_backend, tokens_do_not_depend_on_batch_composition) {
  auto backend = make_backend(7);
  const auto target = request(99, 3, 5);
  const std::vector<step_entry> alone{target};
  const std::vector<step_entry> crowded{request(1, 0), request(2, 17, 3), target, request(4, 1)};
  const std::vector<step_entry> reordered{request(8, 2), target};
  const auto expected = backend.run_step(alone).tokens.at(0);
  EXPECT_EQ(backend.run_step(crowded).tokens.at(2), expected);
  EXPECT_EQ(backend.run_step(reordered).tokens.at(1), expected);
  EXPECT_EQ(backend.token_for(target), expected);
}

TEST(sim_backend, seeds_change_the_tokens) {
  auto a = make_backend(1);
  auto b = make_backend(2);
  std::vector<step_entry> stream;
  for (std::uint32_t i = 0; i < 64; ++i)
    stream.push_back(request(5, i));
  const auto ta = a.run_step(stream).tokens;
  const auto tb = b.run_step(stream).tokens;
  int same = 0;
  for (std::size_t i = 0; i < ta.size(); ++i)
    same += ta[i] == tb[i];
  EXPECT_LE(same, 2);  // backend seed
  // The request seed matters too, and so does the output index.
  EXPECT_NE(a.token_for(request(5, 3)), a.token_for(request(6, 3)));
  EXPECT_NE(ta[3], ta[4]);
}

TEST(sim_backend, time_comes_from_the_cost_model) {
  auto backend = make_backend(3);
  EXPECT_EQ(backend.run_step({}).device_seconds, 0.0);
  EXPECT_TRUE(backend.run_step({}).tokens.empty());
  const std::vector<step_entry> batch{request(1, 0, 2), request(2, 8), request(3, 4, 9)};
  const auto result = backend.run_step(batch);
  EXPECT_DOUBLE_EQ(result.device_seconds, backend.cost_model().step_seconds(batch));
  EXPECT_GT(result.device_seconds, 0.0);
  EXPECT_DOUBLE_EQ(backend.transfer_seconds(1 << 20), backend.cost_model().transfer_seconds(1 << 20));
  EXPECT_EQ(backend.cost_model().gpu().name, "H100-80GB");
}

} // namespace
} // namespace troupe::gpu
