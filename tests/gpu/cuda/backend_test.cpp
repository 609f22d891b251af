// The cuda executor backend through the calls the runtime makes: a cache
// swapped to the pinned host pool and back into other pages, streamed in
// layer by layer under a step that is already running, or read out and
// written back (a migration), gives the token the cache in place gives; an
// adapter loaded from PEFT files into scattered pool pages gives the same
// tokens wherever its pages are, beside base-model sequences in one batch;
// refusals (too few pages, an MLP target, missing files, a dropped adapter,
// a bad token) fail only what they concern, and a step answers only once no
// copy into its entries' pages is in flight; a checkpoint read from its
// files serves as its weights in memory do; log-probabilities come back for
// the entries that ask, the same within a batch as alone. Skipped where no
// CUDA device is visible.
#include "gpu/cuda/backend.hpp"
#include "gpu/lora.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/sim_tokenizer.hpp"

#include "tests/gpu/cuda/backend_test_support.hpp"
#include "tests/gpu/cuda/gpu_test_support.hpp"
#include "tests/gpu/cuda/lora_test_support.hpp"
#include "tests/gpu/cuda/random_llama.hpp"
#include "tests/support/logprobs_check.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

namespace troupe::gpu::cuda {
namespace {

namespace fs = std::filesystem;
using namespace backend_testing;

using troupe::testing::temp_dir;

/// A PEFT directory (adapter_config.json, adapter_model.safetensors) for
/// `a` on `targets`, written the way PEFT names things.
class peft_dir : public temp_dir {
public:
  peft_dir(const lora_adapter& a, const std::vector<lora_target>& targets) : temp_dir("troupe_cuda_peft") {
    if (dir().empty())
      return;
    std::string names;
    for (auto t : targets)
      names += std::string{names.empty() ? "" : ", "} + "\"" + std::string{to_string(t)} + "\"";
    std::ofstream{dir() / "adapter_config.json"} << "{\"peft_type\": \"LORA\", \"r\": " << a.rank
                                                 << ", \"lora_alpha\": " << a.alpha
                                                 << ", \"target_modules\": [" << names << "]}\n";
    std::vector<named_tensor> ts;
    for (std::uint32_t l = 0; l < a.layers.size(); ++l)
      for (auto t : targets) {
        const auto& m = a.layers[l][static_cast<std::size_t>(t)];
        const std::uint64_t in = m.a.size() / a.rank;
        const std::uint64_t out = m.b.size() / a.rank;
        ts.push_back({peft_tensor_name(l, t, 'A'), {a.rank, in}, m.a});
        ts.push_back({peft_tensor_name(l, t, 'B'), {out, a.rank}, m.b});
      }
    if (auto err = write_safetensors((dir() / "adapter_model.safetensors").string(), ts, gpu::dtype::f32))
      ADD_FAILURE() << *err;
  }
};

/// A Hugging Face checkpoint of `w`: config.json and model.safetensors, its
/// tensors stored as `stored`.
class checkpoint_dir : public temp_dir {
public:
  checkpoint_dir(const llama_weights& w, gpu::dtype stored) : temp_dir("troupe_cuda_model") {
    if (dir().empty())
      return;
    std::ofstream{dir() / "config.json"} << to_config_json(w.config);
    const auto ts =
      llama_checkpoint_named(w.config, [&](const llama_tensor_ref& t) { return w.tensor(t.which, t.layer); });
    if (auto err = write_safetensors((dir() / "model.safetensors").string(), ts, stored))
      ADD_FAILURE() << *err;
  }
};

const std::vector<lora_target> attention_targets{lora_target::q, lora_target::k, lora_target::v, lora_target::o};

TEST(cuda_backend, a_cache_swapped_to_the_host_and_back_into_other_pages_gives_the_same_token) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  const auto p = prompt(20, 1);
  const auto first = one(*b, greedy_entry(p, 0, {0, 1}));
  ASSERT_GE(first, 0);
  const auto want = one(*b, greedy_entry({first}, 20, {0, 1}));
  ASSERT_GE(want, 0);
  ASSERT_EQ(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0, 1}, std::vector<std::uint32_t>{5, 3}, 0)
              .error,
            "");
  ASSERT_EQ(b->swap_pages(swap_direction::in, std::vector<std::uint32_t>{40, 9}, std::vector<std::uint32_t>{5, 3}, 0)
              .error,
            "");
  EXPECT_EQ(one(*b, greedy_entry({first}, 20, {40, 9})), want);
  // Out of range: refused with the page named, nothing copied.
  const auto bad = b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0}, std::vector<std::uint32_t>{16}, 0);
  EXPECT_NE(bad.error.find("host page 16"), std::string::npos) << bad.error;
}

TEST(cuda_backend, a_step_over_a_cache_still_streaming_in_waits_layer_by_layer_on_the_gpu) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  const auto history = prompt(40, 2);
  const auto first = one(*b, greedy_entry(history, 0, {0, 1, 2}));
  const std::vector<std::int32_t> next_turn{40, 41, 42};
  ASSERT_EQ(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0, 1, 2},
                          std::vector<std::uint32_t>{10, 11, 12}, 0)
              .error,
            "");
  const auto want = one(*b, greedy_entry(next_turn, 40, {0, 1, 2, 3}));
  ASSERT_GE(want, 0);
  ASSERT_GE(first, 0);
  // The step starts first and waits for each layer's event.
  auto streamed = greedy_entry(next_turn, 40, {20, 21, 22, 23});
  streamed.stream = 77;
  std::int32_t got = -2;
  std::thread step{[&] { got = b->run_step(std::span{&streamed, 1}).tokens.at(0); }};
  const auto r = b->stream_in(77, std::vector<std::uint32_t>{20, 21, 22}, std::vector<std::uint32_t>{10, 11, 12}, 0);
  step.join();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(got, want);
  EXPECT_EQ(b->streams(), 0u) << "the step used the stream: it is forgotten";

  // A stream that fails ends its own entry only.
  auto broken = greedy_entry(next_turn, 40, {30, 31, 32, 33});
  broken.stream = 78;
  auto other = greedy_entry(next_turn, 40, {0, 1, 2, 3});
  other.request_id = 2;
  std::vector<step_entry> batch{broken, other};
  step_result result;
  std::thread step2{[&] { result = b->run_step(batch); }};
  const auto failed = b->stream_in(78, std::vector<std::uint32_t>{30, 31, 32}, std::vector<std::uint32_t>{10, 11, 99}, 0);
  step2.join();
  EXPECT_NE(failed.error, "");
  const auto& tokens = result.tokens;
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0], -1);
  EXPECT_EQ(tokens[1], want);
  ASSERT_EQ(result.failures.size(), 1u) << describe(result.failures);
  EXPECT_EQ(result.failures[0].request_id, 1u);
  EXPECT_NE(result.failures[0].reason.find(failed.error), std::string::npos) << result.failures[0].reason;
  EXPECT_EQ(b->streams(), 0u);
}

TEST(cuda_backend, a_rejected_entry_answers_only_once_its_stream_has_landed) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  ASSERT_GE(one(*b, greedy_entry(prompt(40, 8), 0, {0, 1, 2})), 0);
  ASSERT_EQ(b->swap_pages(swap_direction::out, std::vector<std::uint32_t>{0, 1, 2},
                          std::vector<std::uint32_t>{10, 11, 12}, 0)
              .error,
            "");
  const auto host = b->read_pages(true, std::vector<std::uint32_t>{10, 11, 12}, 0);
  ASSERT_EQ(host.error, "");
  // The planner rejects the entry (a token outside the vocabulary); its
  // stream starts only after the step has planned. The runtime frees the
  // entry's pages on the step's answer: the copy into them must be done by
  // then, and the stream forgotten, not left to a stream_in that came late.
  auto rejected = greedy_entry({static_cast<std::int32_t>(tiny.vocab)}, 40, {50, 51, 52, 53});
  rejected.stream = 80;
  swap_result copied;
  std::thread copy{[&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    copied = b->stream_in(80, std::vector<std::uint32_t>{50, 51, 52}, std::vector<std::uint32_t>{10, 11, 12}, 0);
  }};
  const auto result = b->run_step(std::span{&rejected, 1});
  const auto landed = b->read_pages(false, std::vector<std::uint32_t>{50, 51, 52}, 0);
  copy.join();
  EXPECT_EQ(result.tokens, std::vector<std::int32_t>{-1});
  ASSERT_EQ(result.failures.size(), 1u);
  EXPECT_NE(result.failures[0].reason.find("vocabulary"), std::string::npos) << result.failures[0].reason;
  EXPECT_EQ(copied.error, "");
  ASSERT_EQ(landed.error, "");
  EXPECT_TRUE(landed.data == host.data) << "the step answered before its stream's copy landed";
  EXPECT_EQ(b->streams(), 0u);
}

TEST(cuda_backend, a_cache_read_out_and_written_back_is_the_same_cache) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  const auto p = prompt(30, 3);
  const auto first = one(*b, greedy_entry(p, 0, {4, 5}));
  const auto want = one(*b, greedy_entry({first}, 30, {4, 5}));
  auto blob = b->read_pages(false, std::vector<std::uint32_t>{4, 5}, 0);
  ASSERT_EQ(blob.error, "");
  EXPECT_EQ(blob.data.size(), 2 * b->page_bytes());
  ASSERT_EQ(b->write_host_pages(std::vector<std::uint32_t>{7, 8}, blob.data, 0).error, "");
  auto host = b->read_pages(true, std::vector<std::uint32_t>{7, 8}, 0);
  ASSERT_EQ(host.error, "");
  EXPECT_EQ(host.data, blob.data);
  ASSERT_EQ(b->swap_pages(swap_direction::in, std::vector<std::uint32_t>{60, 61}, std::vector<std::uint32_t>{7, 8}, 0)
              .error,
            "");
  EXPECT_EQ(one(*b, greedy_entry({first}, 30, {60, 61})), want);
  // Another model's cache does not fit these pages.
  const auto wrong = b->write_host_pages(std::vector<std::uint32_t>{7}, std::string(100, 'x'), 0);
  EXPECT_NE(wrong.error.find("does not fill"), std::string::npos) << wrong.error;
  EXPECT_NE(b->read_pages(false, std::vector<std::uint32_t>{128}, 0).error, "");
}

TEST(cuda_backend, an_adapter_gives_the_same_tokens_wherever_its_pages_are_and_beside_the_base_model) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  const auto& l = b->lora();
  const auto a = lora_testing::random_adapter(l, 8, 2.0f, 11);
  peft_dir files{a, attention_targets};
  const auto need = l.pages(8);
  ASSERT_GT(need, 0u);
  ASSERT_LE(2 * need + 40, 128u);
  // Scattered, descending pages for one copy; others for a second copy.
  std::vector<std::uint32_t> pages_a, pages_b;
  for (std::uint64_t i = 0; i < need; ++i) {
    pages_a.push_back(static_cast<std::uint32_t>(127 - 2 * i));
    pages_b.push_back(static_cast<std::uint32_t>(40 + i));
  }
  const auto first = b->load_adapter(1, files.path(), 0, pages_a);
  ASSERT_EQ(first.error, "");
  EXPECT_FALSE(first.host_hit);
  const auto second = b->load_adapter(2, files.path(), 0, pages_b);
  ASSERT_EQ(second.error, "");
  EXPECT_EQ(b->device_adapters(), 2u);

  const auto p = prompt(24, 4);
  const auto base = generate(*b, p, {0, 1, 2}, 6);
  const auto with_a = generate(*b, p, {3, 4, 5}, 6, 1, 8);
  const auto with_b = generate(*b, p, {6, 7, 8}, 6, 2, 8);
  EXPECT_EQ(with_a, with_b);
  EXPECT_NE(with_a, base) << "an adapter of scale 2 on q, k, v and o changes the output";

  // One batch: base, adapter 1 and adapter 2 side by side, prefill.
  std::vector<step_entry> batch{greedy_entry(p, 0, {10, 11}), greedy_entry(p, 0, {12, 13}, 1, 8), greedy_entry(p, 0, {14, 15}, 2, 8)};
  const auto mixed = b->run_step(batch).tokens;
  EXPECT_EQ(mixed, (std::vector<std::int32_t>{base[0], with_a[0], with_a[0]}));

  // A dropped adapter fails its own entry; it comes back from the host tier.
  b->drop_adapter(2);
  const auto after_drop = b->run_step(batch).tokens;
  EXPECT_EQ(after_drop, (std::vector<std::int32_t>{base[0], with_a[0], -1}));
  const auto again = b->load_adapter(2, files.path(), 0, pages_b);
  EXPECT_EQ(again.error, "");
  EXPECT_TRUE(again.host_hit);
  b->forget_adapter(2);
  EXPECT_FALSE(b->load_adapter(2, files.path(), 0, pages_b).host_hit);
}

TEST(cuda_backend, adapter_loads_are_refused_with_the_reason_and_others_keep_serving) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend();
  ASSERT_NE(b, nullptr);
  const auto& l = b->lora();
  const auto a = lora_testing::random_adapter(l, 16, 1.0f, 12);
  peft_dir files{a, attention_targets};
  std::vector<std::uint32_t> few(l.pages(16) - 1);
  std::iota(few.begin(), few.end(), 50u);
  const auto short_of_pages = b->load_adapter(1, files.path(), 0, few);
  EXPECT_NE(short_of_pages.error.find("needs " + std::to_string(l.pages(16)) + " pool pages"), std::string::npos)
    << short_of_pages.error;

  // An adapter on the MLP: the cuda backend adapts q, k, v and o only.
  lora_adapter mlp = a;
  for (auto& layer : mlp.layers) {
    layer[static_cast<std::size_t>(lora_target::gate)].a.assign(16 * tiny.hidden, 0.01f);
    layer[static_cast<std::size_t>(lora_target::gate)].b.assign(tiny.inter * 16, 0.01f);
  }
  peft_dir mlp_files{mlp, {lora_target::q, lora_target::gate}};
  std::vector<std::uint32_t> enough(l.pages(16));
  std::iota(enough.begin(), enough.end(), 50u);
  const auto refused = b->load_adapter(2, mlp_files.path(), 0, enough);
  EXPECT_NE(refused.error.find("gate_proj"), std::string::npos) << refused.error;
  const auto missing = b->load_adapter(3, "/nowhere/at/all", 0, enough);
  EXPECT_NE(missing.error, "");
  EXPECT_EQ(b->device_adapters(), 0u);

  // Bad entries fail alone.
  std::vector<step_entry> batch{greedy_entry({static_cast<std::int32_t>(tiny.vocab)}, 0, {0}), greedy_entry(prompt(5, 5), 0, {1}),
                                greedy_entry(prompt(5, 5), 0, {2}, 9, 8)};
  for (std::size_t i = 0; i < batch.size(); ++i)
    batch[i].request_id = 10 + i;
  const auto result = b->run_step(batch);
  const auto& tokens = result.tokens;
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0], -1);
  EXPECT_GE(tokens[1], 0);
  EXPECT_EQ(tokens[2], -1);
  // Each failed entry is named, with why.
  ASSERT_EQ(result.failures.size(), 2u) << describe(result.failures);
  EXPECT_EQ(result.failures[0].request_id, 10u);
  EXPECT_NE(result.failures[0].reason.find("vocabulary"), std::string::npos) << result.failures[0].reason;
  EXPECT_EQ(result.failures[1].request_id, 12u);
  EXPECT_NE(result.failures[1].reason.find("adapter 9"), std::string::npos) << result.failures[1].reason;
}

// open() reads the checkpoint tensor by tensor into the model's type: from
// files in that type (the bits as stored) and from fp32 files (rounded on
// the way), it serves the tokens the same weights give from host memory.
TEST(cuda_backend, a_checkpoint_opened_from_its_files_serves_as_its_weights_in_memory_do) {
  TROUPE_REQUIRE_GPU();
  for (const dtype t : {dtype::f16, dtype::bf16})
    for (const bool same_type : {true, false}) {
      SCOPED_TRACE(std::string{to_string(t)} + (same_type ? " files" : " from fp32 files"));
      const auto w = make_weights(tiny, t, 7); // values exact in t, so every route gives the same bits
      const checkpoint_dir files{w, same_type ? (t == dtype::f16 ? gpu::dtype::f16 : gpu::dtype::bf16)
                                              : gpu::dtype::f32};
      auto opened = cuda_backend::open(files.path(), std::make_unique<sim_tokenizer>(tiny.vocab), options_for(t));
      ASSERT_TRUE(std::holds_alternative<std::unique_ptr<cuda_backend>>(opened)) << std::get<std::string>(opened);
      auto& from_files = *std::get<std::unique_ptr<cuda_backend>>(opened);
      // The device it runs on, by name, for the server's log.
      const std::string device = " (CUDA device 0)";
      EXPECT_GT(from_files.device_name().size(), device.size());
      EXPECT_TRUE(from_files.device_name().ends_with(device)) << from_files.device_name();
      auto in_memory = open_backend(t);
      ASSERT_NE(in_memory, nullptr);
      for (std::int32_t salt = 1; salt <= 3; ++salt) {
        const auto e = greedy_entry(prompt(9 + salt, salt), 0, {static_cast<std::uint32_t>(salt)});
        EXPECT_EQ(one(from_files, e), one(*in_memory, e)) << "prompt " << salt;
      }
    }
  // A checkpoint that does not match its config is refused, naming the tensor.
  auto w = make_weights(tiny, dtype::f16, 7);
  w.config.intermediate_size = tiny.inter * 2;
  const checkpoint_dir wrong{make_weights(tiny, dtype::f16, 7), gpu::dtype::f16};
  std::ofstream{wrong.dir() / "config.json"} << to_config_json(w.config);
  auto refused = cuda_backend::open(wrong.path(), std::make_unique<sim_tokenizer>(tiny.vocab),
                                    options_for(dtype::f16));
  ASSERT_TRUE(std::holds_alternative<std::string>(refused));
  EXPECT_NE(std::get<std::string>(refused).find("mlp.gate_proj"), std::string::npos) << std::get<std::string>(refused);
}

// A step too large for the device (the scheduler's token budget sets its
// rows) leaves no room for a page pool: refused at start, saying what took
// the memory.
TEST(cuda_backend, a_pool_with_no_room_left_is_refused_naming_what_took_the_memory) {
  TROUPE_REQUIRE_GPU();
  auto o = options_for(dtype::f16);
  o.pages = 0; // sized from the free memory
  o.max_rows = 1u << 26;
  auto b = cuda_backend::create(make_weights(tiny, o.type, 7), std::make_unique<sim_tokenizer>(tiny.vocab), o);
  ASSERT_TRUE(std::holds_alternative<std::string>(b));
  const auto& why = std::get<std::string>(b);
  for (const char* part : {"MiB free leave no room for a page pool", "MiB of weights", "MiB of step scratch",
                           "67108864 token rows", "16 sequences", "rank 16", "MiB margin"})
    EXPECT_NE(why.find(part), std::string::npos) << part << " in: " << why;
}

// backend.step_graphs: a sequence decoded step after step is replayed from
// a graph after its second decode step, and its tokens are those of a
// backend that launches every step.
TEST(cuda_backend, decode_steps_replayed_from_step_graphs_give_the_same_tokens) {
  TROUPE_REQUIRE_GPU();
  auto [direct, graphs] = open_with_and_without_step_graphs(4);
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(graphs, nullptr);
  const auto p = prompt(20, 3);
  const std::uint32_t steps = 12;
  const auto want = generate(*direct, p, {0, 1, 2}, steps);
  EXPECT_EQ(generate(*graphs, p, {0, 1, 2}, steps), want);
  EXPECT_EQ(direct->steps_replayed(), 0u);
  EXPECT_GE(graphs->steps_replayed(), steps - 3); // all but the prefill and the first decode step or two
  EXPECT_EQ(graphs->notice(), ""); // no capture was refused
  // The server's stats carry the same figures.
  const auto figure = [](const cuda_backend& b, const std::string& name) {
    for (const auto& figures : {b.counters(), b.gauges()})
      for (const auto& [k, v] : figures)
        if (k == name)
          return v;
    return -1.0;
  };
  EXPECT_EQ(figure(*graphs, "cuda_steps_replayed"), static_cast<double>(graphs->steps_replayed()));
  EXPECT_EQ(figure(*graphs, "cuda_step_graphs_kept"), 1);
  EXPECT_EQ(figure(*graphs, "cuda_step_graphs_off"), 0);
  EXPECT_GT(figure(*graphs, "cuda_h2d_gb_per_s"), 0);
}

TEST(cuda_backend, sampling_follows_each_requests_seed) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend(dtype::bf16);
  ASSERT_NE(b, nullptr);
  auto e = greedy_entry(prompt(12, 6), 0, {0});
  e.temperature = 1.0f;
  e.top_p = 0.9f;
  e.seed = 1234;
  const auto x = one(*b, e);
  EXPECT_EQ(one(*b, e), x);
  EXPECT_GT(b->transfer_seconds(1 << 20), 0.0);
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->vocab().vocab_size(), static_cast<std::int32_t>(tiny.vocab));
}

TEST(cuda_backend, log_probabilities_come_back_for_the_entries_that_ask_as_they_would_alone) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend(dtype::f16);
  ASSERT_NE(b, nullptr);
  // Prompts of different lengths (the plan orders sequences its own way),
  // asking for 0, none, 5 and 20 alternatives; one sampled, one refused.
  std::vector<step_entry> batch{greedy_entry(prompt(12, 1), 0, {0}), greedy_entry(prompt(3, 2), 0, {1}),
                                greedy_entry(prompt(30, 3), 0, {2, 3}), greedy_entry(prompt(7, 4), 0, {4}),
                                greedy_entry({3, 4, static_cast<std::int32_t>(tiny.vocab)}, 0, {5})};
  const std::int32_t asks[] = {0, -1, 5, 20, 3};
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].request_id = i + 1;
    batch[i].logprobs = asks[i];
  }
  batch[3].temperature = 1.0f;
  batch[3].seed = 42;
  troupe::testing::expect_logprobs_follow_each_entry(*b, batch, 0.05f);
}

TEST(cuda_backend, prompt_log_probabilities_are_those_of_each_prefix_alone_read_a_chunk_of_rows_at_a_time) {
  TROUPE_REQUIRE_GPU();
  auto o = options_for(dtype::f16);
  o.prompt_logits_rows = 4; // prompts of 7 and 13 rows: whole chunks and a part
  auto b = open_backend(o);
  ASSERT_NE(b, nullptr);
  // A prompt the model itself continues greedily: each token's own
  // log-probability is checked.
  std::vector<std::int32_t> greedy{5};
  for (int k = 0; k < 6; ++k)
    greedy.push_back(one(*b, greedy_entry(greedy, 0, {6})));
  std::vector<step_entry> batch{greedy_entry(greedy, 0, {0}), greedy_entry(prompt(3, 2), 0, {1}),
                                greedy_entry(prompt(13, 3), 0, {2}), greedy_entry(prompt(1, 4), 0, {3}),
                                greedy_entry({3, 4, static_cast<std::int32_t>(tiny.vocab)}, 0, {5})};
  const std::int32_t asks[] = {2, -1, 20, 0, 3};
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].request_id = i + 1;
    batch[i].prompt_logprobs = asks[i];
  }
  const auto checked = troupe::testing::expect_prompt_logprobs_match_prefixes(*b, batch, 0.05f);
  EXPECT_GE(checked, greedy.size() - 1) << "every token of the greedy prompt";
  const auto r = b->run_step(batch);
  ASSERT_EQ(r.prompt_logprobs.size(), batch.size());
  EXPECT_TRUE(r.prompt_logprobs[3].empty()) << "one token: nothing precedes";
  EXPECT_TRUE(r.prompt_logprobs[4].empty()) << "refused: none";
  for (auto& e : batch)
    e.prompt_logprobs = -1;
  const auto without = b->run_step(batch);
  EXPECT_EQ(without.tokens, r.tokens) << "asking changes no token";
  EXPECT_TRUE(without.prompt_logprobs.empty());
}

TEST(cuda_backend, logit_adjustments_steer_sampling_not_the_log_probabilities) {
  TROUPE_REQUIRE_GPU();
  auto b = open_backend(dtype::f16);
  ASSERT_NE(b, nullptr);
  troupe::testing::expect_logit_adjust_steers_sampling_only(*b, greedy_entry(prompt(9, 1), 0, {0}),
                                                            static_cast<std::int32_t>(tiny.vocab), 0.05f);
  troupe::testing::expect_min_p_one_draws_the_greedy_pick(*b, greedy_entry(prompt(9, 1), 0, {0}));
  // In a batch: only the entry that adjusts is steered.
  auto plain = greedy_entry(prompt(9, 1), 0, {0});
  auto steered = greedy_entry(prompt(5, 2), 0, {1});
  const auto alone = one(*b, steered);
  steered.logit_adjust = {{alone == 0 ? 1 : alone - 1, 100.0f}};
  const std::vector<step_entry> batch{plain, steered};
  const auto r = b->run_step(batch);
  ASSERT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(r.tokens[0], one(*b, plain));
  EXPECT_EQ(r.tokens[1], alone == 0 ? 1 : alone - 1);
}

} // namespace
} // namespace troupe::gpu::cuda
