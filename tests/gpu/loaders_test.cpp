// Tests for the model loaders: safetensors round trips and sharding, Llama
// config.json parsing, a small Llama checkpoint, PEFT adapters, and a table
// of malformed inputs whose errors must name the file and the tensor or key.
#include "gpu/llama_config.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/lora.hpp"
#include "gpu/rope.hpp"
#include "gpu/safetensors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <regex>
#include <type_traits>
#include <unistd.h>

namespace troupe::gpu {
namespace {

static_assert(std::is_nothrow_move_constructible_v<safetensors_archive>);
static_assert(std::is_nothrow_move_assignable_v<safetensors_archive>);

namespace fs = std::filesystem;

// -- helpers -------------------------------------------------------------------

/// A fresh directory per test, removed afterwards.
class loaders : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("troupe_loaders_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// `name` under the test dir, its parent directory created.
  std::string path(const std::string& name) const {
    fs::create_directories((dir_ / name).parent_path());
    return (dir_ / name).string();
  }

  void write_text(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path{path(name)}.parent_path());
    std::ofstream{path(name), std::ios::binary} << text;
  }

  std::string read_bytes(const std::string& name) const {
    std::ifstream in{path(name), std::ios::binary};
    return {std::istreambuf_iterator<char>{in}, {}};
  }

  /// A safetensors file with a hand-made header and `data_bytes` zero bytes.
  void write_raw(const std::string& name, const std::string& header, std::size_t data_bytes) const {
    std::string bytes(8, '\0');
    const std::uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes += header;
    bytes.append(data_bytes, '\0');
    write_text(name, bytes);
  }

  fs::path dir_;
};

template <class T>
T expect_ok(std::variant<T, std::string> r) {
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return T{};
  }
  return std::move(std::get<T>(r));
}

safetensors_archive open_ok(const std::string& p) {
  auto r = safetensors_archive::open(p);
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    std::abort();
  }
  return std::move(std::get<safetensors_archive>(r));
}

std::vector<float> ramp(std::size_t n, float scale = 0.01f, float offset = 0.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = offset + scale * static_cast<float>(static_cast<int>(i % 97) - 48);
  return v;
}

std::string small_config_json(const std::string& extra = "") {
  return R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
             "max_position_embeddings": 64, "model_type": "llama")" +
         extra + "}";
}

llama_config small_config(bool tied = false) {
  auto c = expect_ok(parse_llama_config(
      small_config_json(tied ? R"(, "tie_word_embeddings": true)" : ""), "config.json"));
  return c;
}

/// Every tensor of a Llama checkpoint for `c`, with distinct values.
std::vector<named_tensor> llama_tensors(const llama_config& c, bool with_lm_head) {
  const std::uint64_t h = c.hidden_size, q = std::uint64_t{c.num_heads} * c.head_dim,
                      kv = std::uint64_t{c.num_kv_heads} * c.head_dim, in = c.intermediate_size,
                      v = c.vocab_size;
  std::vector<named_tensor> t;
  float offset = 0.0f;
  const auto add = [&t, &offset](std::string name, std::vector<std::uint64_t> shape) {
    std::size_t n = 1;
    for (auto d : shape)
      n *= d;
    offset += 0.125f;
    t.push_back({std::move(name), std::move(shape), ramp(n, 0.01f, offset)});
  };
  add("model.embed_tokens.weight", {v, h});
  for (std::uint32_t i = 0; i < c.num_layers; ++i) {
    add(llama_tensor_name(i, "input_layernorm"), {h});
    add(llama_tensor_name(i, "self_attn.q_proj"), {q, h});
    add(llama_tensor_name(i, "self_attn.k_proj"), {kv, h});
    add(llama_tensor_name(i, "self_attn.v_proj"), {kv, h});
    add(llama_tensor_name(i, "self_attn.o_proj"), {h, q});
    add(llama_tensor_name(i, "post_attention_layernorm"), {h});
    add(llama_tensor_name(i, "mlp.gate_proj"), {in, h});
    add(llama_tensor_name(i, "mlp.up_proj"), {in, h});
    add(llama_tensor_name(i, "mlp.down_proj"), {h, in});
  }
  add("model.norm.weight", {h});
  if (with_lm_head)
    add("lm_head.weight", {v, h});
  return t;
}

/// PEFT A/B tensors for `targets` of every layer, rank `r`.
std::vector<named_tensor> peft_tensors(const llama_config& c, std::uint32_t r,
                                       const std::vector<lora_target>& targets) {
  const std::uint64_t h = c.hidden_size, q = std::uint64_t{c.num_heads} * c.head_dim,
                      kv = std::uint64_t{c.num_kv_heads} * c.head_dim, in = c.intermediate_size;
  std::vector<named_tensor> t;
  for (std::uint32_t i = 0; i < c.num_layers; ++i) {
    for (const auto target : targets) {
      std::uint64_t fan_in = h, fan_out = h;
      switch (target) {
        case lora_target::q:
          fan_out = q;
          break;
        case lora_target::k:
        case lora_target::v:
          fan_out = kv;
          break;
        case lora_target::o:
          fan_in = q;
          break;
        case lora_target::gate:
        case lora_target::up:
          fan_out = in;
          break;
        case lora_target::down:
          fan_in = in;
          break;
      }
      t.push_back({peft_tensor_name(i, target, 'A'), {r, fan_in}, ramp(r * fan_in, 0.02f)});
      t.push_back({peft_tensor_name(i, target, 'B'), {fan_out, r}, ramp(fan_out * r, 0.03f)});
    }
  }
  return t;
}

const std::vector<lora_target> all_targets{lora_target::q,    lora_target::k,  lora_target::v,
                                           lora_target::o,    lora_target::gate, lora_target::up,
                                           lora_target::down};

// -- safetensors ---------------------------------------------------------------

TEST_F(loaders, f32_round_trip_is_exact_and_names_are_sorted) {
  const std::vector<float> special{0.0f, -0.0f, 1.0f, -2.5f, std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::denorm_min(), 3.14159265f};
  ASSERT_FALSE(write_safetensors(path("a.safetensors"),
                                 {{"zeta", {7}, special}, {"alpha", {2, 3}, ramp(6)}}, dtype::f32,
                                 {{"format", "pt"}}));
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, read_bytes("a.safetensors").data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  const auto a = open_ok(path("a.safetensors"));
  EXPECT_EQ(a.names(), (std::vector<std::string>{"alpha", "zeta"}));
  ASSERT_NE(a.find("alpha"), nullptr);
  EXPECT_EQ(a.find("alpha")->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(a.find("alpha")->type, dtype::f32);
  EXPECT_EQ(a.find("nope"), nullptr);
  const std::uint64_t shape[] = {7};
  const auto got = expect_ok(a.read_f32("zeta", shape));
  ASSERT_EQ(got.size(), special.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::memcmp(&got[i], &special[i], 4), 0) << i;
  // NaN survives too.
  ASSERT_FALSE(write_safetensors(path("n.safetensors"), {{"x", {1}, {std::nanf("")}}}, dtype::f32));
  const std::uint64_t one[] = {1};
  EXPECT_TRUE(std::isnan(expect_ok(open_ok(path("n.safetensors")).read_f32("x", one))[0]));
}

TEST_F(loaders, f16_round_trip_within_precision_and_special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = ramp(200, 0.37f);
  const std::vector<float> special{65504.0f, 65519.0f, 65520.0f, -1e6f,    inf,        -inf,
                                   0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f, -0x1.ff8p-15f, -0.0f,
                                   1.0f + 0x1p-11f, 1.0f + 0x1.8p-10f, std::nanf("")};
  values.insert(values.end(), special.begin(), special.end());
  ASSERT_FALSE(write_safetensors(path("h.safetensors"), {{"h", {values.size()}, values}}, dtype::f16));
  const auto a = open_ok(path("h.safetensors"));
  EXPECT_EQ(a.find("h")->type, dtype::f16);
  const std::uint64_t shape[] = {values.size()};
  const auto got = expect_ok(a.read_f32("h", shape));
  ASSERT_EQ(got.size(), values.size());
  for (std::size_t i = 0; i < 200; ++i)
    EXPECT_NEAR(got[i], values[i], std::abs(values[i]) * 0x1p-11f + 1e-7f) << i;
  const float* s = got.data() + 200;
  EXPECT_EQ(s[0], 65504.0f);           // largest half
  EXPECT_EQ(s[1], 65504.0f);           // rounds down
  EXPECT_EQ(s[2], inf);                // rounds to inf
  EXPECT_EQ(s[3], -inf);               // overflow
  EXPECT_EQ(s[4], inf);
  EXPECT_EQ(s[5], -inf);
  EXPECT_EQ(s[6], 0x1p-24f);           // smallest subnormal
  EXPECT_EQ(s[7], 0.0f);               // half of it: ties to even (zero)
  EXPECT_EQ(s[8], 0x1p-23f);           // 1.5 ulp: ties to even (2 ulp)
  EXPECT_EQ(s[9], 0x1p-14f);           // smallest normal
  EXPECT_EQ(s[10], -0x1.ff8p-15f);     // largest subnormal, exact
  EXPECT_TRUE(std::signbit(s[11]));    // -0 keeps its sign
  EXPECT_EQ(s[12], 1.0f);              // tie between 1 and 1+2^-10: even
  EXPECT_EQ(s[13], 1.0f + 0x1p-9f);    // tie between 1+2^-10 and 1+2^-9: even
  EXPECT_TRUE(std::isnan(s[14]));
}

TEST_F(loaders, bf16_round_trip_within_precision_and_special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = ramp(200, 13.7f);
  const std::vector<float> special{1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f, 3.0e38f, inf, -inf, std::nanf(""),
                                   std::numeric_limits<float>::max()};
  values.insert(values.end(), special.begin(), special.end());
  ASSERT_FALSE(write_safetensors(path("b.safetensors"), {{"b", {values.size()}, values}}, dtype::bf16));
  const auto a = open_ok(path("b.safetensors"));
  EXPECT_EQ(a.find("b")->type, dtype::bf16);
  const std::uint64_t shape[] = {values.size()};
  const auto got = expect_ok(a.read_f32("b", shape));
  ASSERT_EQ(got.size(), values.size());
  for (std::size_t i = 0; i < 200; ++i)
    EXPECT_NEAR(got[i], values[i], std::abs(values[i]) * 0x1p-8f) << i;
  const float* s = got.data() + 200;
  EXPECT_EQ(s[0], 1.0f);                    // tie: even
  EXPECT_EQ(s[1], 1.0f + 0x1p-6f);          // tie: even
  EXPECT_NEAR(s[2], 3.0e38f, 3.0e38f * 0x1p-8f);
  EXPECT_EQ(s[3], inf);
  EXPECT_EQ(s[4], -inf);
  EXPECT_TRUE(std::isnan(s[5]));
  EXPECT_EQ(s[6], inf);                     // max float rounds up to inf
}

TEST_F(loaders, sharded_index_and_directory_preference) {
  ASSERT_FALSE(write_safetensors(path("m/model-00001-of-00002.safetensors"),
                                 {{"a", {2}, {1, 2}}, {"b", {1}, {3}}}, dtype::f32));
  ASSERT_FALSE(write_safetensors(path("m/model-00002-of-00002.safetensors"), {{"c", {2, 2}, {4, 5, 6, 7}}},
                                 dtype::bf16));
  write_text("m/model.safetensors.index.json",
             R"({"metadata": {"total_size": 28}, "weight_map": {
                   "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00002-of-00002.safetensors"}})");
  // A stray single file is ignored: the index comes first.
  ASSERT_FALSE(write_safetensors(path("m/model.safetensors"), {{"z", {1}, {0}}}, dtype::f32));
  for (const auto& p : {path("m"), path("m/model.safetensors.index.json")}) {
    const auto a = open_ok(p);
    EXPECT_EQ(a.names(), (std::vector<std::string>{"a", "b", "c"}));
    const std::uint64_t shape[] = {2, 2};
    EXPECT_EQ(expect_ok(a.read_f32("c", shape)), (std::vector<float>{4, 5, 6, 7}));
    EXPECT_NE(a.find("a")->file.find("model-00001-of-00002"), std::string::npos);
  }
  // Without an index, model.safetensors; without that, adapter_model.safetensors.
  fs::remove(path("m/model.safetensors.index.json"));
  EXPECT_EQ(open_ok(path("m")).names(), (std::vector<std::string>{"z"}));
  ASSERT_FALSE(write_safetensors(path("ad/adapter_model.safetensors"), {{"y", {1}, {0}}}, dtype::f16));
  EXPECT_EQ(open_ok(path("ad")).names(), (std::vector<std::string>{"y"}));
}

TEST_F(loaders, archive_moves_keep_views_valid) {
  ASSERT_FALSE(write_safetensors(path("a.safetensors"), {{"x", {3}, {1, 2, 3}}}, dtype::f32));
  auto a = open_ok(path("a.safetensors"));
  auto b = std::move(a);
  const std::uint64_t shape[] = {3};
  EXPECT_EQ(expect_ok(b.read_f32("x", shape)), (std::vector<float>{1, 2, 3}));
}

TEST_F(loaders, write_rejects_bad_input) {
  const auto err = write_safetensors(path("w.safetensors"), {{"x", {2, 2}, {1, 2, 3}}}, dtype::f32);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("'x'"), std::string::npos) << *err;
  EXPECT_TRUE(write_safetensors(path("w.safetensors"), {{"x", {1}, {1}}, {"x", {1}, {2}}}, dtype::f32));
  EXPECT_TRUE(write_safetensors((dir_ / "no/such/dir/w.safetensors").string(), {}, dtype::f32));
}

// -- config.json ---------------------------------------------------------------

TEST_F(loaders, config_defaults) {
  const auto c = expect_ok(parse_llama_config(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
          "num_attention_heads": 8, "vocab_size": 100, "some_unknown_key": [1, 2]})",
      "config.json"));
  EXPECT_EQ(c.num_kv_heads, 8u);
  EXPECT_EQ(c.head_dim, 8u);
  EXPECT_EQ(c.max_position_embeddings, 4096u);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope.type, "");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{2}));
  EXPECT_EQ(c.torch_dtype, "float32");
  const auto s = c.to_shape("tiny");
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.num_layers, 3u);
  EXPECT_EQ(s.hidden_size, 64u);
  EXPECT_EQ(s.intermediate_size, 128u);
  EXPECT_EQ(s.num_heads, 8u);
  EXPECT_EQ(s.num_kv_heads, 8u);
  EXPECT_EQ(s.head_dim, 8u);
  EXPECT_EQ(s.vocab_size, 100u);
  EXPECT_EQ(s.max_context, 4096u);
  EXPECT_EQ(s.dtype_bytes, 4u);
}

TEST_F(loaders, config_llama3_full) {
  // Values from meta-llama/Llama-3.2-1B's config.json.
  const auto c = expect_ok(parse_llama_config(
      R"({"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000,
          "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_size": 2048,
          "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "llama",
          "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
          "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
          "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
          "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
          "vocab_size": 128256})",
      "config.json"));
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.num_kv_heads, 8u);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192u);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  const auto s = c.to_shape("llama-3.2-1b");
  EXPECT_EQ(s.dtype_bytes, 2u);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.max_context, 131072u);

  // to_config_json round-trips, and says what HF says.
  const std::string text = to_config_json(c);
  for (const char* needle : {"\"LlamaForCausalLM\"", "\"model_type\": \"llama\"", "\"hidden_act\": \"silu\"",
                             "\"attention_bias\": false", "\"mlp_bias\": false", "\"rms_norm_eps\": 1e-05",
                             "\"rope_type\": \"llama3\""})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  const auto back = expect_ok(parse_llama_config(text, "back.json"));
  EXPECT_EQ(back.eos_token_ids, c.eos_token_ids);
  EXPECT_EQ(back.rope.type, "llama3");
  EXPECT_EQ(back.head_dim, 64u);
  EXPECT_EQ(back.num_kv_heads, 8u);
  EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.torch_dtype, "bfloat16");
  EXPECT_TRUE(back.tie_word_embeddings);
}

TEST_F(loaders, config_qwen2_and_mistral) {
  // Values from Qwen/Qwen2.5-0.5B-Instruct's config.json.
  const auto c = expect_ok(parse_llama_config(
      R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
          "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
          "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
          "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
          "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
          "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
          "use_sliding_window": false, "vocab_size": 151936})",
      "config.json"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.num_kv_heads, 2u);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{151645}));
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  // The checkpoint has q, k and v biases, and no o bias.
  std::vector<std::string> biases;
  for (const auto& t : llama_checkpoint_tensors(c))
    if (t.name.ends_with(".bias") && t.layer == 3)
      biases.push_back(t.name + " " + std::to_string(t.shape.at(0)));
  EXPECT_EQ(biases, (std::vector<std::string>{"model.layers.3.self_attn.q_proj.bias 896",
                                              "model.layers.3.self_attn.k_proj.bias 128",
                                              "model.layers.3.self_attn.v_proj.bias 128"}));
  const std::string text = to_config_json(c);
  for (const char* needle : {"\"Qwen2ForCausalLM\"", "\"model_type\": \"qwen2\"", "\"use_sliding_window\": false"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  EXPECT_EQ(text.find("attention_bias"), std::string::npos) << text;
  const auto back = expect_ok(parse_llama_config(text, "back.json"));
  EXPECT_EQ(back.model_type, "qwen2");
  EXPECT_TRUE(back.qkv_bias);
  EXPECT_FALSE(back.o_bias);

  // Llama's attention_bias: all four attention projections.
  const auto biased = expect_ok(parse_llama_config(
      R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "vocab_size": 16,
          "num_attention_heads": 2, "attention_bias": true})",
      "config.json"));
  EXPECT_TRUE(biased.qkv_bias);
  EXPECT_TRUE(biased.o_bias);
  std::size_t bias_count = 0;
  for (const auto& t : llama_checkpoint_tensors(biased))
    bias_count += t.name.ends_with(".bias") ? 1 : 0;
  EXPECT_EQ(bias_count, 4u);
  // Mistral 7B v0.2 on: no window, Llama's architecture.
  const auto mistral = expect_ok(parse_llama_config(
      R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "vocab_size": 16,
          "num_attention_heads": 2, "model_type": "mistral", "sliding_window": null})",
      "config.json"));
  EXPECT_EQ(mistral.model_type, "mistral");
  EXPECT_FALSE(mistral.qkv_bias);
  EXPECT_NE(to_config_json(mistral).find("\"MistralForCausalLM\""), std::string::npos);
  EXPECT_EQ(mistral.sliding_window, 0u);
  // Mistral 7B v0.1: a window of 4,096 in a context of 32,768, written back
  // as read; a window that holds the whole context is none.
  const auto v01 = expect_ok(parse_llama_config(
      R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "vocab_size": 16,
          "num_attention_heads": 2, "model_type": "mistral", "sliding_window": 4096,
          "max_position_embeddings": 32768})",
      "config.json"));
  EXPECT_EQ(v01.sliding_window, 4096u);
  EXPECT_EQ(expect_ok(parse_llama_config(to_config_json(v01), "again.json")).sliding_window, 4096u);
  const auto whole = expect_ok(parse_llama_config(
      R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "vocab_size": 16,
          "num_attention_heads": 2, "model_type": "mistral", "sliding_window": 4096,
          "max_position_embeddings": 4096})",
      "config.json"));
  EXPECT_EQ(whole.sliding_window, 0u);
  // Llama's architecture has no window: the key is not read.
  const auto llama = expect_ok(parse_llama_config(
      R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "vocab_size": 16,
          "num_attention_heads": 2, "sliding_window": 16})",
      "config.json"));
  EXPECT_EQ(llama.sliding_window, 0u);
}

TEST_F(loaders, config_qwen3) {
  // Values from Qwen/Qwen3-0.6B's config.json: heads * head_dim (2048) is
  // not the hidden size (1024).
  const auto c = expect_ok(parse_llama_config(
      R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
          "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
          "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
          "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
          "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
          "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
          "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
          "use_sliding_window": false, "vocab_size": 151936})",
      "config.json"));
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.to_shape("qwen3").num_heads * c.head_dim, 2048u);
  std::vector<std::string> norms;
  for (const auto& t : llama_checkpoint_tensors(c))
    if (t.layer == 27 && t.name.find("_norm.") != std::string::npos)
      norms.push_back(t.name + " " + std::to_string(t.shape.at(0)));
  EXPECT_EQ(norms, (std::vector<std::string>{"model.layers.27.self_attn.q_norm.weight 128",
                                             "model.layers.27.self_attn.k_norm.weight 128"}));
  const std::string text = to_config_json(c);
  EXPECT_NE(text.find("\"Qwen3ForCausalLM\""), std::string::npos) << text;
  const auto back = expect_ok(parse_llama_config(text, "back.json"));
  EXPECT_TRUE(back.qk_norm);
  EXPECT_EQ(back.head_dim, 128u);
}

TEST_F(loaders, config_errors_name_file_and_key) {
  const std::string base = R"("hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
                              "vocab_size": 16)";
  struct row {
    std::string json;
    std::string key;
  };
  const std::vector<row> rows{
    {"{" + base + "}", "num_attention_heads"},
    {"{" + base + R"(, "num_attention_heads": 0})", "num_attention_heads"},
    {"{" + base + R"(, "num_attention_heads": -4})", "num_attention_heads"},
    {"{" + base + R"(, "num_attention_heads": "4"})", "num_attention_heads"},
    {"{" + base + R"(, "num_attention_heads": 4, "num_key_value_heads": 3})", "num_key_value_heads"},
    {"{" + base + R"(, "num_attention_heads": 3})", "hidden_size"},
    {"{" + base + R"(, "num_attention_heads": 4, "model_type": "gemma"})", "model_type"},
    {"{" + base + R"(, "num_attention_heads": 4, "model_type": "mistral", "sliding_window": 0})",
     "sliding_window"},
    {"{" + base + R"(, "num_attention_heads": 4, "model_type": "qwen2", "use_sliding_window": true})",
     "use_sliding_window"},
    {"{" + base + R"(, "num_attention_heads": 4, "hidden_act": "gelu"})", "hidden_act"},
    {"{" + base + R"(, "num_attention_heads": 4, "mlp_bias": true})", "mlp_bias"},
    {"{" + base + R"(, "num_attention_heads": 4, "attention_bias": "yes"})", "attention_bias"},
    {"{" + base + R"(, "num_attention_heads": 4, "eos_token_id": [2, "x"]})", "eos_token_id"},
    {"{" + base + R"(, "num_attention_heads": 4, "tie_word_embeddings": 1})", "tie_word_embeddings"},
    {"{" + base + R"(, "num_attention_heads": 4, "torch_dtype": "int8"})", "torch_dtype"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "ntk-by-parts", "factor": 2}})",
     "rope_scaling.type"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"rope_type": "dynamic", "factor": 2}})",
     "rope_scaling.rope_type"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "linear", "factor": 0.5}})",
     "rope_scaling.factor"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "linear"}})", "rope_scaling.factor"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "yarn"}})", "rope_scaling.factor"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": -32}})",
     "rope_scaling.beta_fast"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 4,
                      "attention_factor": 0}})",
     "rope_scaling.attention_factor"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 4,
                      "original_max_position_embeddings": 0}})",
     "rope_scaling.original_max_position_embeddings"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 4, "truncate": 1}})",
     "rope_scaling.truncate"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_scaling": {"rope_type": "llama3", "factor": 8}})",
     "rope_scaling."},
    {"{" + base + R"(, "num_attention_heads": 4, "rms_norm_eps": 0})", "rms_norm_eps"},
    // Past a float's range: it would become infinity (or 0) in the model.
    {"{" + base + R"(, "num_attention_heads": 4, "rms_norm_eps": 3e110})", "rms_norm_eps"},
    {"{" + base + R"(, "num_attention_heads": 4, "rms_norm_eps": 1e-50})", "rms_norm_eps"},
    {"{" + base + R"(, "num_attention_heads": 4, "rope_theta": 1e39})", "rope_theta"},
    {"[1, 2]", "object"},
  };
  for (const auto& r : rows) {
    const auto got = parse_llama_config(r.json, "/x/config.json");
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << r.json;
    const auto& err = std::get<std::string>(got);
    EXPECT_NE(err.find("/x/config.json"), std::string::npos) << err;
    EXPECT_NE(err.find(r.key), std::string::npos) << err;
  }
  const auto unknown = parse_llama_config(rows[15].json, "c.json");
  EXPECT_NE(std::get<std::string>(unknown).find("\"ntk-by-parts\": unsupported rope scaling type (llama3, "
                                                "longrope, linear and yarn are supported)"),
            std::string::npos)
    << std::get<std::string>(unknown);
  const auto dynamic = parse_llama_config(rows[16].json, "c.json");
  EXPECT_NE(std::get<std::string>(dynamic).find("a cached key would not match"), std::string::npos)
    << std::get<std::string>(dynamic);
}

// YaRN and linear scaling: Hugging Face's defaults and attention factors,
// the context the server admits (the pretrained one stretched by factor,
// as vLLM derives it), and to_config_json reads back the same.
TEST_F(loaders, config_yarn_and_linear_scaling) {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                              "vocab_size": 16, "num_attention_heads": 4)";
  // Qwen2.5's setting: max_position_embeddings stays the pretrained 32,768.
  const auto qwen = expect_ok(parse_llama_config("{" + base + R"(, "model_type": "qwen2",
      "max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768,
      "type": "yarn"}})", "q.json"));
  EXPECT_EQ(qwen.rope.type, "yarn");
  EXPECT_EQ(qwen.rope.factor, 4.0);
  EXPECT_EQ(qwen.rope.original_max_position_embeddings, 32768u);
  EXPECT_EQ(qwen.rope.beta_fast, 32.0);
  EXPECT_EQ(qwen.rope.beta_slow, 1.0);
  EXPECT_TRUE(qwen.rope.truncate);
  EXPECT_DOUBLE_EQ(qwen.rope.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(qwen.context_limit(), 131072u);
  EXPECT_EQ(qwen.to_shape("q").max_context, 131072u);
  EXPECT_EQ(qwen.max_position_embeddings, 32768u);
  EXPECT_EQ(rope_for(qwen).scale, static_cast<float>(0.1 * std::log(4.0) + 1.0));

  // DeepSeek's: max_position_embeddings already stretched; mscale over
  // mscale_all_dim; a beta of 0 takes its default, as Python's `or` does.
  const auto deepseek = expect_ok(parse_llama_config("{" + base + R"(, "max_position_embeddings": 163840,
      "rope_scaling": {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
      "beta_fast": 0, "beta_slow": null, "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": false}})", "d.json"));
  EXPECT_EQ(deepseek.context_limit(), 163840u);
  EXPECT_EQ(deepseek.rope.beta_fast, 32.0);
  EXPECT_EQ(deepseek.rope.beta_slow, 1.0);
  EXPECT_FALSE(deepseek.rope.truncate);
  EXPECT_DOUBLE_EQ(deepseek.rope.attention_factor,
                   (0.1 * 0.707 * std::log(40.0) + 1.0) / (0.1 * std::log(40.0) + 1.0));
  EXPECT_DOUBLE_EQ(yarn_attention_factor(40, 0.707, 0), 0.1 * std::log(40.0) + 1.0) << "mscale alone is ignored";
  EXPECT_EQ(yarn_attention_factor(1.0), 1.0);

  // Without a stated pretrained context, max_position_embeddings is it.
  const auto stated = expect_ok(parse_llama_config("{" + base + R"(, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "yarn", "factor": 2.5, "attention_factor": 1.25}})", "s.json"));
  EXPECT_EQ(stated.rope.original_max_position_embeddings, 4096u);
  EXPECT_EQ(stated.rope.attention_factor, 1.25);
  EXPECT_EQ(stated.context_limit(), 10240u);

  const auto vicuna = expect_ok(parse_llama_config("{" + base + R"(, "max_position_embeddings": 4096,
      "rope_scaling": {"factor": 4.0, "type": "linear"}})", "v.json"));
  EXPECT_EQ(vicuna.rope.type, "linear");
  EXPECT_EQ(vicuna.context_limit(), 16384u);
  EXPECT_EQ(rope_for(vicuna).scale, 1.0f);
  const auto plain = rope_inv_freq(16, 10000.0f, rope_scaling{});
  const auto linear = rope_for(vicuna);
  ASSERT_EQ(linear.inv_freq.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(linear.inv_freq[i], plain[i] / 4.0f) << i;

  // A factor of 1 stretches nothing.
  EXPECT_EQ(expect_ok(parse_llama_config("{" + base + R"(, "max_position_embeddings": 4096,
      "rope_scaling": {"factor": 1, "rope_type": "yarn"}})", "one.json")).context_limit(), 4096u);

  for (const auto* c : {&qwen, &deepseek, &stated, &vicuna}) {
    const auto again = expect_ok(parse_llama_config(to_config_json(*c), "again.json"));
    EXPECT_EQ(again.rope.type, c->rope.type);
    EXPECT_EQ(again.rope.factor, c->rope.factor);
    EXPECT_EQ(again.context_limit(), c->context_limit());
    EXPECT_EQ(rope_for(again).inv_freq, rope_for(*c).inv_freq);
    EXPECT_EQ(rope_for(again).scale, rope_for(*c).scale);
    if (c->rope.type == "yarn") {
      EXPECT_EQ(again.rope.original_max_position_embeddings, c->rope.original_max_position_embeddings);
      EXPECT_EQ(again.rope.truncate, c->rope.truncate);
      EXPECT_EQ(again.rope.attention_factor, c->rope.attention_factor);
    }
  }
}

// YaRN's frequencies by the paper's rule, in double: a pair that turns
// more than beta_fast times over the pretrained context keeps its
// frequency, one that turns fewer than beta_slow times is divided by
// factor, and those between blend.
TEST_F(loaders, yarn_keeps_fast_pairs_divides_slow_ones_and_blends_between) {
  rope_scaling s;
  s.type = "yarn";
  s.factor = 8;
  s.original_max_position_embeddings = 2048;
  const std::uint32_t dim = 64;
  const float theta = 10000.0f;
  const auto plain = rope_inv_freq(dim, theta, rope_scaling{});
  const auto yarn = rope_inv_freq(dim, theta, s);
  ASSERT_EQ(yarn.size(), plain.size());
  std::size_t kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < yarn.size(); ++i) {
    const double turns = 2048.0 * plain[i] / (2 * std::numbers::pi);
    if (turns > 32 * 1.5) { // clear of the rounded-out ends
      EXPECT_EQ(yarn[i], plain[i]) << i;
      ++kept;
    } else if (turns < 1 / 1.5) {
      EXPECT_NEAR(yarn[i], plain[i] / 8, 1e-6 * plain[i]) << i;
      ++divided;
    } else {
      EXPECT_LE(yarn[i], plain[i] * (1 + 1e-6)) << i;
      EXPECT_GE(yarn[i], plain[i] / 8 * (1 - 1e-6)) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0u);
  EXPECT_GT(divided, 0u);
  EXPECT_GT(blended, 0u);
  for (std::size_t i = 1; i < yarn.size(); ++i)
    EXPECT_LT(yarn[i], yarn[i - 1]) << "frequencies fall with the pair, " << i;
}

// -- Llama checkpoint ----------------------------------------------------------

TEST_F(loaders, llama_dir_loads_with_every_shape) {
  const auto c = small_config();
  write_text("llama/config.json", to_config_json(c));
  const auto tensors = llama_tensors(c, true);
  ASSERT_FALSE(write_safetensors(path("llama/model.safetensors"), tensors, dtype::f32));
  const auto w = expect_ok(load_llama(path("llama")));
  EXPECT_EQ(w.config.head_dim, 2u);
  EXPECT_EQ(w.embed, tensors[0].values);
  ASSERT_EQ(w.layers.size(), 2u);
  const auto& l = w.layers[1];
  EXPECT_EQ(l.attn_norm.size(), 8u);
  EXPECT_EQ(l.q.size(), 8u * 8u);
  EXPECT_EQ(l.k.size(), 4u * 8u);
  EXPECT_EQ(l.v.size(), 4u * 8u);
  EXPECT_EQ(l.o.size(), 8u * 8u);
  EXPECT_EQ(l.mlp_norm.size(), 8u);
  EXPECT_EQ(l.gate.size(), 12u * 8u);
  EXPECT_EQ(l.up.size(), 12u * 8u);
  EXPECT_EQ(l.down.size(), 8u * 12u);
  EXPECT_EQ(l.up, tensors[1 + 9 + 7].values);
  EXPECT_EQ(w.final_norm.size(), 8u);
  EXPECT_EQ(w.lm_head, tensors.back().values);
}

TEST_F(loaders, phi3_fused_projections_load_as_their_parts_and_are_written_back_fused) {
  // Values of microsoft/Phi-3-mini-4k-instruct's config.json, shrunk.
  const auto c = expect_ok(parse_llama_config(
      R"({"architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
          "eos_token_id": 15, "hidden_act": "silu", "hidden_size": 8, "initializer_range": 0.02,
          "intermediate_size": 12, "max_position_embeddings": 64, "model_type": "phi3",
          "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
          "original_max_position_embeddings": 64, "pad_token_id": 15, "resid_pdrop": 0.0,
          "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 31,
          "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 16})",
      "config.json"));
  EXPECT_EQ(c.model_type, "phi3");
  EXPECT_TRUE(c.fused_projections);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, 31u);
  // The checkpoint holds qkv_proj [q + 2 kv, hidden] and gate_up_proj [2 inter, hidden].
  std::uint64_t next = 0;
  const auto named = llama_checkpoint_named(c, [&](const llama_tensor_ref& t) {
    return ramp(static_cast<std::size_t>(t.shape[0] * (t.shape.size() > 1 ? t.shape[1] : 1)), 0.01f,
                0.125f * static_cast<float>(++next));
  });
  const auto find = [&](const std::string& name) -> const named_tensor* {
    for (const auto& t : named)
      if (t.name == name)
        return &t;
    return nullptr;
  };
  const auto* qkv = find(llama_tensor_name(1, "self_attn.qkv_proj"));
  const auto* gate_up = find(llama_tensor_name(1, "mlp.gate_up_proj"));
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(gate_up, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<std::uint64_t>{8 + 4 + 4, 8}));
  EXPECT_EQ(gate_up->shape, (std::vector<std::uint64_t>{24, 8}));
  EXPECT_EQ(find(llama_tensor_name(1, "self_attn.q_proj")), nullptr);
  write_text("phi/config.json", to_config_json(c));
  ASSERT_FALSE(write_safetensors(path("phi/model.safetensors"), named, dtype::bf16));
  const auto w = expect_ok(load_llama(path("phi")));
  EXPECT_TRUE(w.config.fused_projections);
  EXPECT_EQ(w.config.sliding_window, 31u);
  const auto& l = w.layers[1];
  ASSERT_EQ(l.q.size(), 8u * 8u);
  ASSERT_EQ(l.k.size(), 4u * 8u);
  ASSERT_EQ(l.v.size(), 4u * 8u);
  ASSERT_EQ(l.gate.size(), 12u * 8u);
  ASSERT_EQ(l.up.size(), 12u * 8u);
  // Each part is its rows of the stored tensor (bf16 rounding aside).
  EXPECT_NEAR(l.q[0], qkv->values[0], 1e-2f);
  EXPECT_NEAR(l.k[0], qkv->values[8 * 8], 1e-2f);
  EXPECT_NEAR(l.v.back(), qkv->values.back(), 1e-2f);
  EXPECT_NEAR(l.gate[5], gate_up->values[5], 1e-2f);
  EXPECT_NEAR(l.up[0], gate_up->values[12 * 8], 1e-2f);
  EXPECT_NE(l.k[0], l.q[0]);
  // A file without the fused tensor names it.
  std::vector<named_tensor> missing;
  for (const auto& t : named)
    if (t.name != qkv->name)
      missing.push_back(t);
  write_text("phi_bad/config.json", to_config_json(c));
  ASSERT_FALSE(write_safetensors(path("phi_bad/model.safetensors"), missing, dtype::f32));
  const auto bad = load_llama(path("phi_bad"));
  ASSERT_TRUE(std::holds_alternative<std::string>(bad));
  EXPECT_NE(std::get<std::string>(bad).find("model.layers.1.self_attn.qkv_proj.weight"), std::string::npos)
    << std::get<std::string>(bad);
  // A rotation over part of a head that turns no whole pairs is refused.
  const auto partial = parse_llama_config(
    R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 16, "model_type": "phi3", "partial_rotary_factor": 0.75})",
    "c.json");
  ASSERT_TRUE(std::holds_alternative<std::string>(partial));
  EXPECT_NE(std::get<std::string>(partial).find("partial_rotary_factor"), std::string::npos) << std::get<std::string>(partial);
}

/// Phi-4 mini's config.json, its 48 factors of each list shortened to `n`.
std::string phi4_mini_config(std::size_t n) {
  std::string shorts, longs;
  for (std::size_t i = 0; i < n; ++i) {
    shorts += (i ? ", " : "") + std::to_string(1.0 + 0.001 * static_cast<double>(i));
    longs += (i ? ", " : "") + std::to_string(1.0 + static_cast<double>(i));
  }
  return R"({"architectures": ["Phi3ForCausalLM"], "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [)" + longs + R"(], "short_factor": [)" + shorts +
         R"(], "type": "longrope"}, "rope_theta": 10000.0, "sliding_window": 262144,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 200064})";
}

TEST_F(loaders, phi4_mini_turns_three_quarters_of_each_head_with_longrope) {
  const auto parsed = parse_llama_config(phi4_mini_config(48), "phi4/config.json");
  ASSERT_TRUE(std::holds_alternative<llama_config>(parsed)) << std::get<std::string>(parsed);
  const auto& c = std::get<llama_config>(parsed);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.rotary_dim, 96u);
  EXPECT_EQ(c.rotary_dims(), 96u);
  EXPECT_EQ(c.sliding_window, 0u); // 262,144 holds the whole context
  EXPECT_EQ(c.rope.type, "longrope");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096u);
  ASSERT_EQ(c.rope.short_factor.size(), 48u);
  ASSERT_EQ(c.rope.long_factor.size(), 48u);
  EXPECT_DOUBLE_EQ(c.rope.long_factor[47], 48.0);
  // Hugging Face's: sqrt(1 + ln(131072 / 4096) / ln(4096)).
  EXPECT_NEAR(c.rope.attention_factor, 1.1902380714238083, 1e-12);

  // The older name, and an attention factor the config states.
  const auto stated = parse_llama_config(
    std::regex_replace(phi4_mini_config(48), std::regex{R"("type": "longrope")"},
                       R"("type": "su", "attention_factor": 1.5)"),
    "su/config.json");
  ASSERT_TRUE(std::holds_alternative<llama_config>(stated)) << std::get<std::string>(stated);
  EXPECT_EQ(std::get<llama_config>(stated).rope.type, "longrope");
  EXPECT_DOUBLE_EQ(std::get<llama_config>(stated).rope.attention_factor, 1.5);
  const auto stated_back = parse_llama_config(to_config_json(std::get<llama_config>(stated)), "back.json");
  ASSERT_TRUE(std::holds_alternative<llama_config>(stated_back)) << std::get<std::string>(stated_back);
  EXPECT_DOUBLE_EQ(std::get<llama_config>(stated_back).rope.attention_factor, 1.5) << "written back";

  // A phi3 file without the pretrained context has Phi3Config's 4,096.
  const auto unstated = parse_llama_config(
    std::regex_replace(phi4_mini_config(48), std::regex{R"("original_max_position_embeddings": 4096,)"}, ""),
    "unstated/config.json");
  ASSERT_TRUE(std::holds_alternative<llama_config>(unstated)) << std::get<std::string>(unstated);
  EXPECT_EQ(std::get<llama_config>(unstated).rope.original_max_position_embeddings, 4096u);
  EXPECT_NEAR(std::get<llama_config>(unstated).rope.attention_factor, 1.1902380714238083, 1e-12);

  // Written back as Hugging Face writes it, read again the same.
  const auto back = parse_llama_config(to_config_json(c), "back.json");
  ASSERT_TRUE(std::holds_alternative<llama_config>(back)) << std::get<std::string>(back);
  const auto& b = std::get<llama_config>(back);
  EXPECT_EQ(b.rotary_dim, 96u);
  EXPECT_EQ(b.rope.short_factor, c.rope.short_factor);
  EXPECT_EQ(b.rope.long_factor, c.rope.long_factor);
  EXPECT_EQ(b.rope.original_max_position_embeddings, 4096u);
  EXPECT_DOUBLE_EQ(b.rope.attention_factor, c.rope.attention_factor);
}

TEST_F(loaders, a_partial_rotation_is_written_back_as_int_head_dim_times_factor_reads_it) {
  // 30 of 44: 30 / 44 * 44 is just below 30 in doubles (and in Python).
  auto c = small_config();
  c.model_type = "phi3";
  c.fused_projections = true;
  c.hidden_size = 176;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 44;
  for (const std::uint32_t rotary : {30u, 32u, 40u}) {
    c.rotary_dim = rotary;
    const auto back = parse_llama_config(to_config_json(c), "back.json");
    ASSERT_TRUE(std::holds_alternative<llama_config>(back)) << std::get<std::string>(back);
    EXPECT_EQ(std::get<llama_config>(back).rotary_dims(), rotary);
  }
  // The top-level pretrained context is read only with LongRoPE.
  const auto plain = parse_llama_config(
    R"({"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2,
        "vocab_size": 16, "original_max_position_embeddings": 0})", "c.json");
  EXPECT_TRUE(std::holds_alternative<llama_config>(plain)) << std::get<std::string>(plain);
}

TEST_F(loaders, longrope_and_partial_rotary_refusals_name_the_key) {
  const std::pair<std::string, std::string> bad[] = {
    {phi4_mini_config(64), "rope_scaling.short_factor' must be a list of 48 numbers"},
    {std::regex_replace(phi4_mini_config(48), std::regex{R"("long_factor": \[1\.0+)"}, R"("long_factor": [-1)"),
     "rope_scaling.long_factor' must hold positive numbers"},
    {std::regex_replace(phi4_mini_config(48), std::regex{R"("partial_rotary_factor": 0\.75)"},
                        R"("partial_rotary_factor": 1.5)"),
     "partial_rotary_factor"},
    {std::regex_replace(phi4_mini_config(48), std::regex{R"("type": "longrope")"},
                        R"("type": "longrope", "attention_factor": 0)"),
     "rope_scaling.attention_factor"},
    {std::regex_replace(phi4_mini_config(48), std::regex{R"("type": "longrope")"}, R"("type": "longrope2")"),
     "llama3, longrope, linear and yarn are supported"},
    {std::regex_replace(phi4_mini_config(48), std::regex{R"("original_max_position_embeddings": 4096)"},
                        R"("original_max_position_embeddings": 1)"),
     "key 'original_max_position_embeddings' must be at least 2"},
  };
  for (const auto& [text, want] : bad) {
    const auto parsed = parse_llama_config(text, "c.json");
    ASSERT_TRUE(std::holds_alternative<std::string>(parsed)) << want;
    EXPECT_NE(std::get<std::string>(parsed).find(want), std::string::npos) << std::get<std::string>(parsed);
  }
}

TEST_F(loaders, phi3_adapters_name_the_fused_projections_and_split_into_their_parts) {
  auto c = small_config();
  c.model_type = "phi3";
  c.fused_projections = true;
  const std::uint64_t h = 8, qkv = 8 + 4 + 4, r = 4;
  std::vector<named_tensor> t;
  for (std::uint32_t i = 0; i < c.num_layers; ++i) {
    t.push_back({peft_tensor_name(i, "self_attn.qkv_proj", 'A'), {r, h}, ramp(r * h, 0.01f, 0.5f + i)});
    t.push_back({peft_tensor_name(i, "self_attn.qkv_proj", 'B'), {qkv, r}, ramp(qkv * r, 0.01f, 1.5f + i)});
  }
  write_text("ad/adapter_config.json", R"({"r": 4, "lora_alpha": 8, "target_modules": ["qkv_proj"]})");
  ASSERT_FALSE(write_safetensors(path("ad/adapter_model.safetensors"), t, dtype::f32));
  const auto a = expect_ok(load_peft_adapter(path("ad"), c));
  EXPECT_TRUE(a.names_fused);
  for (const auto target : {lora_target::q, lora_target::k, lora_target::v}) {
    const auto& m = a.layers[1][static_cast<std::size_t>(target)];
    EXPECT_TRUE(a.targets[static_cast<std::size_t>(target)]);
    EXPECT_EQ(m.a, t[2].values) << "every part reads the fused A";
  }
  EXPECT_FALSE(a.targets[static_cast<std::size_t>(lora_target::o)]);
  const auto& k = a.layers[1][static_cast<std::size_t>(lora_target::k)].b;
  ASSERT_EQ(k.size(), 4u * r);
  EXPECT_EQ(k.front(), t[3].values[8 * r]) << "k's rows follow q's";
  EXPECT_EQ(a.layers[1][static_cast<std::size_t>(lora_target::v)].b.back(), t[3].values.back());
  // Names of the other kind are refused, naming what the base model has.
  write_text("sep/adapter_config.json", R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})");
  ASSERT_FALSE(write_safetensors(path("sep/adapter_model.safetensors"), peft_tensors(small_config(), 4,
                                 {lora_target::q, lora_target::v}), dtype::f32));
  const auto sep = load_peft_adapter(path("sep"), c);
  ASSERT_TRUE(std::holds_alternative<std::string>(sep));
  EXPECT_NE(std::get<std::string>(sep).find("stores them fused, as qkv_proj and gate_up_proj"), std::string::npos)
    << std::get<std::string>(sep);
  const auto on_llama = load_peft_adapter(path("ad"), small_config());
  ASSERT_TRUE(std::holds_alternative<std::string>(on_llama));
  EXPECT_NE(std::get<std::string>(on_llama).find("names qkv_proj or gate_up_proj, which the base model (llama)"),
            std::string::npos)
    << std::get<std::string>(on_llama);
  write_text("mixed/adapter_config.json", R"({"r": 4, "lora_alpha": 8, "target_modules": ["qkv_proj", "up_proj"]})");
  const auto mixed = read_peft_config(path("mixed"));
  ASSERT_TRUE(std::holds_alternative<std::string>(mixed));
  EXPECT_NE(std::get<std::string>(mixed).find("names both fused projections"), std::string::npos)
    << std::get<std::string>(mixed);
}

TEST_F(loaders, llama_tied_embeddings_need_no_lm_head_and_bf16_loads) {
  const auto c = small_config(true);
  write_text("llama/config.json", to_config_json(c));
  ASSERT_FALSE(write_safetensors(path("llama/model.safetensors"), llama_tensors(c, false), dtype::bf16));
  const auto w = expect_ok(load_llama(path("llama")));
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(w.embed.size(), 16u * 8u);

  // Untied, the same files fail and the error names lm_head.
  write_text("llama/config.json", to_config_json(small_config(false)));
  const auto r = load_llama(path("llama"));
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find("lm_head.weight"), std::string::npos);
  EXPECT_NE(std::get<std::string>(r).find("model.safetensors"), std::string::npos);
}

TEST_F(loaders, llama_tensors_are_visited_one_at_a_time_in_order_in_the_files_type) {
  const auto c = small_config();
  write_text("llama/config.json", to_config_json(c));
  const auto tensors = llama_tensors(c, true);
  ASSERT_FALSE(write_safetensors(path("llama/model.safetensors"), tensors, dtype::bf16));
  std::vector<std::pair<llama_tensor, std::uint32_t>> seen;
  std::size_t i = 0;
  const auto problem = visit_llama_tensors(path("llama"), c, [&](llama_tensor which, std::uint32_t layer,
                                                                 const tensor_view& t) {
    seen.emplace_back(which, layer);
    ASSERT_LT(i, tensors.size());
    EXPECT_EQ(t.name, tensors[i].name); // the helper writes them in the documented order
    EXPECT_EQ(t.type, dtype::bf16);     // as stored: no conversion on the way
    EXPECT_EQ(t.shape, tensors[i].shape);
    // Each tensor's values, as load_llama reads them.
    const auto values = to_f32(t);
    ASSERT_EQ(values.size(), tensors[i].values.size());
    for (std::size_t k = 0; k < values.size(); ++k)
      EXPECT_NEAR(values[k], tensors[i].values[k], 1e-2f * std::abs(tensors[i].values[k]) + 1e-6f);
    ++i;
  });
  EXPECT_FALSE(problem) << *problem;
  ASSERT_EQ(seen.size(), 1 + 9 * 2 + 2u);
  using lt = llama_tensor;
  EXPECT_EQ(seen.front(), std::make_pair(lt::embed, 0u));
  const lt per_layer[] = {lt::attn_norm, lt::q, lt::k, lt::v, lt::o, lt::mlp_norm, lt::gate, lt::up, lt::down};
  for (std::uint32_t l = 0; l < 2; ++l)
    for (std::size_t k = 0; k < 9; ++k)
      EXPECT_EQ(seen[1 + l * 9 + k], std::make_pair(per_layer[k], l)) << l << " " << k;
  EXPECT_EQ(seen[19], std::make_pair(lt::final_norm, 0u));
  EXPECT_EQ(seen[20], std::make_pair(lt::lm_head, 0u));
}

TEST_F(loaders, llama_tensors_are_all_checked_before_any_is_visited) {
  const auto c = small_config();
  write_text("llama/config.json", to_config_json(c));
  // The last layer's down projection has the wrong shape; then lm_head is missing.
  auto tensors = llama_tensors(c, true);
  auto& down = *std::find_if(tensors.begin(), tensors.end(), [](const named_tensor& t) {
    return t.name == llama_tensor_name(1, "mlp.down_proj");
  });
  down.shape = {12, 8};
  ASSERT_FALSE(write_safetensors(path("bad/model.safetensors"), tensors, dtype::f16));
  std::size_t visited = 0;
  const auto count = [&](llama_tensor, std::uint32_t, const tensor_view&) { ++visited; };
  const auto problem = visit_llama_tensors(path("bad"), c, count);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("[12, 8]"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("model.safetensors"), std::string::npos) << *problem;
  EXPECT_EQ(visited, 0u);

  ASSERT_FALSE(write_safetensors(path("nohead/model.safetensors"), llama_tensors(c, false), dtype::f16));
  const auto missing = visit_llama_tensors(path("nohead"), c, count);
  ASSERT_TRUE(missing);
  EXPECT_NE(missing->find("'lm_head.weight'"), std::string::npos) << *missing;
  EXPECT_NE(missing->find("tie_word_embeddings false"), std::string::npos) << *missing;
  EXPECT_EQ(visited, 0u);
  EXPECT_TRUE(visit_llama_tensors(path("nowhere"), c, count));
}

// -- PEFT adapters -------------------------------------------------------------

TEST_F(loaders, peft_adapter_loads_with_scale) {
  const auto c = small_config();
  write_text("ad/adapter_config.json",
             R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
                 "bias": "none", "fan_in_fan_out": false, "layers_to_transform": null,
                 "rank_pattern": {}, "alpha_pattern": {}, "base_model_name_or_path": "x"})");
  const auto tensors = peft_tensors(c, 4, {lora_target::q, lora_target::v});
  ASSERT_FALSE(write_safetensors(path("ad/adapter_model.safetensors"), tensors, dtype::f16));
  const auto a = expect_ok(load_peft_adapter(path("ad"), c));
  EXPECT_EQ(a.rank, 4u);
  EXPECT_FLOAT_EQ(a.alpha, 8.0f);
  EXPECT_FALSE(a.use_rslora);
  EXPECT_FLOAT_EQ(a.scale, 2.0f);
  EXPECT_TRUE(a.targets[0]);
  EXPECT_FALSE(a.targets[1]);
  EXPECT_TRUE(a.targets[2]);
  ASSERT_EQ(a.layers.size(), 2u);
  EXPECT_EQ(a.layers[1][0].a.size(), 4u * 8u);
  EXPECT_EQ(a.layers[1][0].b.size(), 8u * 4u);
  EXPECT_EQ(a.layers[1][2].b.size(), 4u * 4u);
  EXPECT_TRUE(a.layers[1][1].a.empty());
  EXPECT_NEAR(a.layers[0][0].a[1], tensors[0].values[1], 1e-3f);
}

TEST_F(loaders, peft_all_linear_with_rslora) {
  const auto c = small_config();
  write_text("ad/adapter_config.json",
             R"({"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "use_rslora": true})");
  ASSERT_FALSE(write_safetensors(path("ad/adapter_model.safetensors"), peft_tensors(c, 16, all_targets),
                                 dtype::f32));
  const auto a = expect_ok(load_peft_adapter(path("ad"), c));
  EXPECT_TRUE(a.use_rslora);
  EXPECT_FLOAT_EQ(a.scale, 8.0f); // 32 / sqrt(16)
  for (bool t : a.targets)
    EXPECT_TRUE(t);
  EXPECT_EQ(a.layers[0][static_cast<std::size_t>(lora_target::down)].a.size(), 16u * 12u);
  EXPECT_EQ(a.layers[0][static_cast<std::size_t>(lora_target::down)].b.size(), 8u * 16u);
  EXPECT_EQ(a.layers[0][static_cast<std::size_t>(lora_target::gate)].b.size(), 12u * 16u);
  EXPECT_EQ(a.layers[0][static_cast<std::size_t>(lora_target::o)].a.size(), 16u * 8u);
  EXPECT_EQ(peft_tensor_name(3, lora_target::gate, 'A'),
            "base_model.model.model.layers.3.mlp.gate_proj.lora_A.weight");
  EXPECT_EQ(peft_tensor_name(0, lora_target::k, 'B'),
            "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight");
  EXPECT_EQ(llama_tensor_name(3, "mlp.up_proj"), "model.layers.3.mlp.up_proj.weight");
}

// -- malformed inputs ------------------------------------------------------------

/// One broken input: `make` writes it under the test dir and returns the
/// error of loading it; the error must mention every string in `needles`.
struct malformed_case {
  std::string what;
  std::function<std::string(loaders&)> make;
  std::vector<std::string> needles;
};

template <class T>
std::string error_of(std::variant<T, std::string> r) {
  if (auto* e = std::get_if<std::string>(&r))
    return *e;
  return "<no error>";
}

class malformed : public loaders {
public:
  using loaders::path;
  using loaders::write_raw;
  using loaders::write_text;

  std::string open_error(const std::string& p) { return error_of(safetensors_archive::open(p)); }

  /// A Llama dir with config.json and model.safetensors, then `edit` applied.
  std::string llama_error(const std::function<void(std::vector<named_tensor>&)>& edit) {
    const auto c = small_config();
    write_text("llama/config.json", to_config_json(c));
    auto tensors = llama_tensors(c, true);
    edit(tensors);
    EXPECT_FALSE(write_safetensors(path("llama/model.safetensors"), tensors, dtype::f32));
    return error_of(load_llama(path("llama")));
  }

  /// An adapter dir with `config` and q/v tensors of rank 4, then `edit` applied.
  std::string adapter_error(const std::string& config,
                            const std::function<void(std::vector<named_tensor>&)>& edit) {
    write_text("ad/adapter_config.json", config);
    auto tensors = peft_tensors(small_config(), 4, {lora_target::q, lora_target::v});
    edit(tensors);
    EXPECT_FALSE(write_safetensors(path("ad/adapter_model.safetensors"), tensors, dtype::f32));
    return error_of(load_peft_adapter(path("ad"), small_config()));
  }
};

const std::string qv_config = R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})";

TEST_F(malformed, every_error_names_file_and_subject) {
  const std::vector<malformed_case> cases{
    {"missing tensor",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.llama_error([](auto& ts) {
         std::erase_if(ts, [](const auto& x) { return x.name == "model.layers.1.mlp.down_proj.weight"; });
       });
     },
     {"model.safetensors", "no tensor 'model.layers.1.mlp.down_proj.weight'"}},
    {"wrong shape",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.llama_error([](auto& ts) {
         for (auto& x : ts)
           if (x.name == "model.layers.0.self_attn.k_proj.weight")
             x.shape = {8, 4};
       });
     },
     {"model.safetensors", "'model.layers.0.self_attn.k_proj.weight'", "[8, 4]", "expected [4, 8]"}},
    {"unknown dtype",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("u.safetensors", R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8);
       return m.open_error(m.path("u.safetensors"));
     },
     {"u.safetensors", "'w'", "I64"}},
    {"truncated data",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       EXPECT_FALSE(write_safetensors(m.path("t.safetensors"), {{"big", {64}, ramp(64)}}, dtype::f32));
       fs::resize_file(m.path("t.safetensors"), fs::file_size(m.path("t.safetensors")) - 10);
       return m.open_error(m.path("t.safetensors"));
     },
     {"t.safetensors", "'big'", "truncated"}},
    {"header length beyond EOF",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       std::string bytes(8, '\0');
       bytes[0] = '\x40';
       bytes[5] = '\x01';
       m.write_text("h.safetensors", bytes + "{}");
       return m.open_error(m.path("h.safetensors"));
     },
     {"h.safetensors", "header length"}},
    {"file shorter than 8 bytes",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_text("s.safetensors", "abc");
       return m.open_error(m.path("s.safetensors"));
     },
     {"s.safetensors", "too short"}},
    {"header not JSON",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("j.safetensors", "{\"w\": {not json", 0);
       return m.open_error(m.path("j.safetensors"));
     },
     {"j.safetensors", "not valid JSON"}},
    {"header not an object",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("o.safetensors", "[1, 2]  ", 0);
       return m.open_error(m.path("o.safetensors"));
     },
     {"o.safetensors", "not a JSON object"}},
    {"header nested too deep",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("d.safetensors", "{\"w\": " + std::string(100000, '[') + std::string(100000, ']') + "}", 0);
       return m.open_error(m.path("d.safetensors"));
     },
     {"d.safetensors", "deeper"}},
    {"offsets end before begin",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("e.safetensors", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 8);
       return m.open_error(m.path("e.safetensors"));
     },
     {"e.safetensors", "'w'", "end before begin"}},
    {"bytes disagree with shape",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_raw("b.safetensors", R"({"w": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}})", 8);
       return m.open_error(m.path("b.safetensors"));
     },
     {"b.safetensors", "'w'", "[3]"}},
    {"bad config.json",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_text("bad/config.json", "{\"hidden_size\": 8,");
       return error_of(load_llama(m.path("bad")));
     },
     {"config.json", "not valid JSON"}},
    {"missing config key",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_text("mk/config.json", R"({"hidden_size": 8, "intermediate_size": 12,
                                         "num_attention_heads": 4, "vocab_size": 16})");
       return error_of(load_llama(m.path("mk")));
     },
     {"mk/config.json", "'num_hidden_layers'", "missing"}},
    {"unsupported rope type",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       m.write_text("rope/config.json",
                    small_config_json(R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0})"));
       return error_of(load_llama(m.path("rope")));
     },
     {"rope/config.json", "rope_scaling.rope_type", "dynamic", "unsupported"}},
    {"unsupported target module",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "lm_head"]})",
                              [](auto&) {});
     },
     {"adapter_config.json", "target_modules", "unsupported target module 'lm_head'"}},
    {"adapter missing lora_B",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(qv_config, [](auto& ts) {
         std::erase_if(ts, [](const auto& x) { return x.name == peft_tensor_name(1, lora_target::v, 'B'); });
       });
     },
     {"adapter_model.safetensors", peft_tensor_name(1, lora_target::v, 'B')}},
    {"adapter wrong rank",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"r": 8, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})",
                              [](auto&) {});
     },
     {"adapter_model.safetensors", peft_tensor_name(0, lora_target::q, 'A'), "[4, 8]", "expected [8, 8]"}},
    {"adapter extra target tensors",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]})", [](auto&) {});
     },
     {"adapter_model.safetensors", peft_tensor_name(0, lora_target::v, 'A')}},
    {"adapter rank_pattern",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
                                  "rank_pattern": {"q_proj": 8}})",
                              [](auto&) {});
     },
     {"adapter_config.json", "rank_pattern", "unsupported"}},
    {"adapter layers_to_transform",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
                                  "layers_to_transform": [0]})",
                              [](auto&) {});
     },
     {"adapter_config.json", "layers_to_transform", "unsupported"}},
    {"adapter missing r",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.adapter_error(R"({"lora_alpha": 8, "target_modules": ["q_proj"]})", [](auto&) {});
     },
     {"adapter_config.json", "'r'"}},
    {"index names a missing shard",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       EXPECT_FALSE(write_safetensors(m.path("ix/a.safetensors"), {{"x", {1}, {1}}}, dtype::f32));
       m.write_text("ix/model.safetensors.index.json",
                    R"({"weight_map": {"x": "a.safetensors", "y": "gone.safetensors"}})");
       return m.open_error(m.path("ix"));
     },
     {"model.safetensors.index.json", "gone.safetensors", "'y'"}},
    {"index names a tensor its shard lacks",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       EXPECT_FALSE(write_safetensors(m.path("iy/a.safetensors"), {{"x", {1}, {1}}}, dtype::f32));
       m.write_text("iy/model.safetensors.index.json",
                    R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})");
       return m.open_error(m.path("iy"));
     },
     {"model.safetensors.index.json", "a.safetensors", "'y'"}},
    {"missing file",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       return m.open_error(m.path("nothing.safetensors"));
     },
     {"nothing.safetensors"}},
    {"empty directory",
     [](loaders& t) {
       auto& m = static_cast<malformed&>(t);
       fs::create_directories(m.path("empty"));
       return m.open_error(m.path("empty"));
     },
     {"empty", "model.safetensors"}},
  };
  for (const auto& c : cases) {
    const std::string err = c.make(*this);
    if (std::getenv("TROUPE_PRINT_ERRORS"))
      std::cout << c.what << ": " << err << "\n";
    for (const auto& needle : c.needles)
      EXPECT_NE(err.find(needle), std::string::npos) << c.what << ": '" << needle << "' not in: " << err;
  }
}

TEST_F(loaders, read_f32_errors_name_file_and_tensor) {
  ASSERT_FALSE(write_safetensors(path("r.safetensors"), {{"x", {2, 3}, ramp(6)}}, dtype::f16));
  const auto a = open_ok(path("r.safetensors"));
  const std::uint64_t wrong[] = {3, 2};
  EXPECT_EQ(error_of(a.read_f32("x", wrong)),
            "tensor 'x' in " + path("r.safetensors") + " has shape [2, 3], expected [3, 2]");
  EXPECT_EQ(error_of(a.read_f32("y", wrong)), path("r.safetensors") + ": no tensor 'y'");
}

} // namespace
} // namespace troupe::gpu
