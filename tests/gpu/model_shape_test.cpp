// Tests for model_shape: parameter and byte counts of the Llama-2 presets,
// LoRA sizes with grouped-query attention, and config.json parsing errors.
#include "gpu/llama_config.hpp"
#include "gpu/model_shape.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <variant>

namespace troupe::gpu {
namespace {

static_assert(std::is_aggregate_v<model_shape>);
static_assert(std::is_nothrow_move_constructible_v<model_shape>);

model_shape preset(std::string_view name) {
  auto shape = find_model_preset(name);
  EXPECT_TRUE(shape.has_value()) << name;
  return shape.value_or(model_shape{});
}

// -- presets and derived sizes ---------------------------------------------------

TEST(model_shape, presets_are_listed_and_found) {
  const auto names = model_preset_names();
  EXPECT_EQ(names, (std::vector<std::string>{"llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "qwen2.5-7b",
                                             "qwen3-8b", "phi-3.5-mini", "phi-4-mini"}));
  for (const auto& name : names)
    EXPECT_EQ(preset(name).name, name);
  EXPECT_FALSE(find_model_preset("llama-2-70b").has_value());
}

TEST(model_shape, llama_2_7b_has_6_74_billion_parameters) {
  const auto shape = preset("llama-2-7b");
  EXPECT_EQ(shape.head_dim, 128u);
  EXPECT_NEAR(static_cast<double>(shape.parameter_count()), 6.74e9, 0.01 * 6.74e9);
  EXPECT_EQ(shape.weight_bytes(), 2 * shape.parameter_count());
}

TEST(model_shape, llama_2_13b_has_13_billion_parameters) {
  const auto shape = preset("llama-2-13b");
  EXPECT_NEAR(static_cast<double>(shape.parameter_count()), 13.0e9, 0.01 * 13.0e9);
}

TEST(model_shape, newer_presets_have_their_published_sizes) {
  // Parameters as their model cards give them, and grouped-query KV bytes.
  const std::pair<const char*, double> sizes[] = {
    {"llama-3-8b", 8.03e9}, {"mistral-7b", 7.25e9}, {"qwen2.5-7b", 7.62e9}, {"qwen3-8b", 8.19e9},
    {"phi-3.5-mini", 3.82e9}, {"phi-4-mini", 3.84e9}};
  for (const auto& [name, params] : sizes)
    EXPECT_NEAR(static_cast<double>(preset(name).parameter_count()), params, 0.005 * params) << name;
  // The Phis' LongRoPE: recomputed past the pretrained 4,096 tokens.
  EXPECT_EQ(preset("phi-3.5-mini").rope_long_after, 4096u);
  EXPECT_EQ(preset("phi-4-mini").rope_long_after, 4096u);
  EXPECT_EQ(preset("llama-3-8b").rope_long_after, 0u);
  EXPECT_EQ(preset("qwen2.5-7b").kv_bytes_per_token(), 2u * 28 * 4 * 128 * 2);
  EXPECT_EQ(preset("qwen3-8b").q_dim(), 4096u);
}

TEST(model_shape, parameter_count_adds_up_its_parts) {
  const auto shape = preset("llama-2-7b");
  EXPECT_EQ(shape.attention_parameters_per_layer(), 4u * 4096 * 4096);
  EXPECT_EQ(shape.mlp_parameters_per_layer(), 3u * 4096 * 11008);
  EXPECT_EQ(shape.parameter_count(),
            2 * shape.embedding_parameters() + 32 * shape.parameters_per_layer() + 4096);
  EXPECT_EQ(shape.layer_matmul_parameters(),
            32 * (shape.attention_parameters_per_layer() + shape.mlp_parameters_per_layer()));
  auto tied = shape;
  tied.tie_word_embeddings = true;
  EXPECT_EQ(tied.parameter_count(), shape.parameter_count() - shape.embedding_parameters());
}

TEST(model_shape, kv_bytes_per_token_of_7b_fp16) {
  EXPECT_EQ(preset("llama-2-7b").kv_bytes_per_token(), 524288u);
  EXPECT_EQ(preset("llama-2-13b").kv_bytes_per_token(), 2u * 40 * 40 * 128 * 2);
}

TEST(model_shape, lora_sizes_of_7b) {
  const auto shape = preset("llama-2-7b");
  // MHA: each of q,k,v,o is 4096 -> 4096, so A + B = 2 * 4096 * rank.
  EXPECT_EQ(shape.lora_parameters(16), 32u * 4 * 2 * 4096 * 16);
  EXPECT_EQ(shape.lora_adapter_bytes(16), 2 * shape.lora_parameters(16));
  EXPECT_EQ(shape.lora_adapter_bytes(0), 0u);
  EXPECT_DOUBLE_EQ(shape.lora_flops_per_token(16), 2.0 * static_cast<double>(shape.lora_parameters(16)));
  EXPECT_EQ(shape.lora_parameters(64), 4 * shape.lora_parameters(16));
}

TEST(model_shape, lora_uses_kv_width_for_k_and_v_under_gqa) {
  // Llama-3-8B-like: 8 KV heads, so k and v project 4096 -> 1024.
  model_shape shape{.name = "gqa", .num_layers = 32, .hidden_size = 4096, .intermediate_size = 14336,
                    .num_heads = 32, .num_kv_heads = 8, .head_dim = 128, .vocab_size = 128256,
                    .max_context = 8192};
  const std::uint64_t q = (4096 + 4096), k = (4096 + 1024), v = (4096 + 1024), o = (4096 + 4096);
  EXPECT_EQ(shape.lora_parameters(8), 32u * 8 * (q + k + v + o));
  EXPECT_EQ(shape.attention_parameters_per_layer(), 2u * 4096 * 4096 + 2u * 4096 * 1024);
  EXPECT_EQ(shape.kv_bytes_per_token(), 2u * 32 * 8 * 128 * 2);
}

// -- config files ------------------------------------------------------------------

constexpr const char* llama_2_7b_config = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "vocab_size": 32000,
  "model_type": "llama"
})";

/// A fresh directory under the system temp dir, removed with the fixture.
class model_shape_file : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("troupe_model_shape_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string write(const std::string& text) {
    const auto path = (dir_ / "config.json").string();
    std::ofstream{path} << text;
    return path;
  }

  /// Loads `text` from a file and expects an error naming the file and `key`.
  void expect_error(const std::string& text, const std::string& key) {
    const auto path = write(text);
    const auto result = load_model_shape(path);
    ASSERT_TRUE(std::holds_alternative<std::string>(result)) << text;
    const auto& error = std::get<std::string>(result);
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("'" + key + "'"), std::string::npos) << error;
  }

  /// The 7B config with `key` set to `value` (raw JSON), or removed when
  /// `value` is empty. Every key but the last line's ends in a comma.
  static std::string with(const std::string& key, const std::string& value) {
    auto doc = std::string{llama_2_7b_config};
    const auto at = doc.find("\"" + key + "\"");
    const auto end = doc.find('\n', at);
    const auto line = value.empty() ? std::string{} : "\"" + key + "\": " + value + ",";
    return doc.replace(at, end - at, line);
  }

  std::filesystem::path dir_;
};

TEST_F(model_shape_file, loads_a_hugging_face_config) {
  const auto path = write(llama_2_7b_config);
  const auto result = load_model_shape(path);
  ASSERT_TRUE(std::holds_alternative<model_shape>(result)) << std::get<std::string>(result);
  const auto& shape = std::get<model_shape>(result);
  const auto expected = preset("llama-2-7b");
  EXPECT_EQ(shape.name, path);  // no "name" key: the file names it
  EXPECT_EQ(shape.num_layers, expected.num_layers);
  EXPECT_EQ(shape.hidden_size, expected.hidden_size);
  EXPECT_EQ(shape.intermediate_size, expected.intermediate_size);
  EXPECT_EQ(shape.num_heads, expected.num_heads);
  EXPECT_EQ(shape.num_kv_heads, expected.num_kv_heads);
  EXPECT_EQ(shape.head_dim, expected.head_dim);
  EXPECT_EQ(shape.vocab_size, expected.vocab_size);
  EXPECT_EQ(shape.max_context, expected.max_context);
  EXPECT_EQ(shape.dtype_bytes, 2u);
  EXPECT_EQ(shape.parameter_count(), expected.parameter_count());
}

TEST_F(model_shape_file, applies_defaults_and_optional_keys) {
  const auto result = parse_model_shape(R"({"name": "tiny", "num_hidden_layers": 2,
      "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "vocab_size": 300, "max_position_embeddings": 256, "torch_dtype": "float32",
      "tie_word_embeddings": true})", "inline");
  ASSERT_TRUE(std::holds_alternative<model_shape>(result)) << std::get<std::string>(result);
  const auto& shape = std::get<model_shape>(result);
  EXPECT_EQ(shape.name, "tiny");
  EXPECT_EQ(shape.num_kv_heads, 4u);
  EXPECT_EQ(shape.head_dim, 16u);
  EXPECT_EQ(shape.dtype_bytes, 4u);
  EXPECT_TRUE(shape.tie_word_embeddings);
}

/// A small model's shape with `max_context` positions and `extra` keys.
model_shape small_shape(std::uint32_t max_context, const std::string& extra) {
  const auto r = parse_model_shape(R"({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": )" +
                                     std::to_string(max_context) + extra + "}",
                                   "inline");
  EXPECT_TRUE(std::holds_alternative<model_shape>(r)) << std::get<std::string>(r);
  return std::holds_alternative<model_shape>(r) ? std::get<model_shape>(r) : model_shape{};
}

TEST_F(model_shape_file, reads_mistral_and_phi3_sliding_windows_as_the_model_loader_does) {
  const auto shape_of = [](const std::string& extra) { return small_shape(8192, extra); };
  EXPECT_EQ(shape_of(R"(, "model_type": "mistral", "sliding_window": 4096)").sliding_window, 4096u);
  EXPECT_EQ(shape_of(R"(, "model_type": "phi3", "sliding_window": 2047)").sliding_window, 2047u);
  EXPECT_EQ(shape_of(R"(, "model_type": "mistral", "sliding_window": null)").sliding_window, 0u);
  EXPECT_EQ(shape_of(R"(, "model_type": "mistral", "sliding_window": 8192)").sliding_window, 0u) << "holds the context";
  EXPECT_EQ(shape_of(R"(, "model_type": "llama", "sliding_window": 16)").sliding_window, 0u) << "not Llama's";
}

// Linear and YaRN scaling stretch the context the server admits, as the
// model loader's shape (llama_config::context_limit) says.
TEST_F(model_shape_file, reads_the_context_linear_and_yarn_scaling_stretch_as_the_model_loader_does) {
  const std::vector<std::pair<std::string, std::uint32_t>> rows{
    {R"(, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})", 131072},
    {R"(, "rope_scaling": {"rope_type": "yarn", "factor": 2.5})", 81920},
    {R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096})", 32768},
    {R"(, "rope_scaling": {"type": "linear", "factor": 4.0})", 131072},
    {R"(, "rope_scaling": {"type": "linear", "factor": 1.0})", 32768},
    {R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192})", 32768},
    {"", 32768},
  };
  for (const auto& [extra, want] : rows) {
    EXPECT_EQ(small_shape(32768, extra).max_context, want) << extra;
    const auto config = parse_llama_config(R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 32768)" + extra + "}", "inline");
    ASSERT_TRUE(std::holds_alternative<llama_config>(config)) << std::get<std::string>(config);
    EXPECT_EQ(std::get<llama_config>(config).to_shape("x").max_context, want) << extra;
  }
}

TEST_F(model_shape_file, reads_longropes_pretrained_context_where_a_request_is_recomputed) {
  const auto shape_of = [](const std::string& extra) { return small_shape(131072, extra); };
  // Phi-3.5 mini's: the pretrained context at the top level.
  EXPECT_EQ(shape_of(R"(, "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [2]})").rope_long_after, 4096u);
  // Without it, Phi3Config's default; another architecture's
  // max_position_embeddings (nothing grows past it), as Hugging Face reads it.
  EXPECT_EQ(shape_of(R"(, "model_type": "phi3", "rope_scaling": {"rope_type": "su"})").rope_long_after, 4096u);
  EXPECT_EQ(shape_of(R"(, "rope_scaling": {"rope_type": "su", "original_max_position_embeddings": 2048})")
              .rope_long_after, 131072u);
  // None, or another scaling: no recompute.
  EXPECT_EQ(shape_of("").rope_long_after, 0u);
  EXPECT_EQ(shape_of(R"(, "original_max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3"})")
              .rope_long_after, 0u);
  // The model loader's shape says the same.
  const auto config = parse_llama_config(R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1, 1, 1, 1, 1],
                       "long_factor": [2, 2, 2, 2, 2, 2, 2, 2]}})", "inline");
  ASSERT_TRUE(std::holds_alternative<llama_config>(config)) << std::get<std::string>(config);
  EXPECT_EQ(std::get<llama_config>(config).to_shape("x").rope_long_after, 4096u);
}

TEST_F(model_shape_file, reads_gqa_explicit_head_dim_and_new_dtype_key) {
  const auto result = parse_model_shape(R"({"num_hidden_layers": 28, "hidden_size": 1024,
      "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
      "dtype": "bfloat16", "head_dim_unused": null})", "qwen");
  ASSERT_TRUE(std::holds_alternative<model_shape>(result)) << std::get<std::string>(result);
  const auto& shape = std::get<model_shape>(result);
  EXPECT_EQ(shape.num_kv_heads, 8u);
  EXPECT_EQ(shape.head_dim, 128u);
  EXPECT_EQ(shape.q_dim(), 2048u);
  EXPECT_EQ(shape.dtype_bytes, 2u);
}

TEST_F(model_shape_file, missing_key_is_named) {
  expect_error(with("hidden_size", ""), "hidden_size");
  expect_error(with("vocab_size", ""), "vocab_size");
}

TEST_F(model_shape_file, bad_type_is_named) {
  expect_error(with("num_hidden_layers", "\"32\""), "num_hidden_layers");
  expect_error(with("intermediate_size", "11008.5"), "intermediate_size");
  expect_error(with("tie_word_embeddings", "\"no\""), "tie_word_embeddings");
  expect_error(with("torch_dtype", "16"), "torch_dtype");
}

TEST_F(model_shape_file, bad_value_is_named) {
  expect_error(with("num_attention_heads", "0"), "num_attention_heads");
  expect_error(with("vocab_size", "-5"), "vocab_size");
  expect_error(with("max_position_embeddings", "99999999999"), "max_position_embeddings");
  expect_error(with("torch_dtype", "\"int8\""), "torch_dtype");
}

TEST_F(model_shape_file, hidden_not_divisible_by_heads_is_named) {
  expect_error(with("hidden_size", "4100"), "hidden_size");
  const auto result = load_model_shape(write(with("hidden_size", "4100")));
  ASSERT_TRUE(std::holds_alternative<std::string>(result));
  EXPECT_NE(std::get<std::string>(result).find("num_attention_heads"), std::string::npos);
}

TEST_F(model_shape_file, heads_not_divisible_by_kv_heads_is_named) {
  expect_error(with("num_key_value_heads", "5"), "num_key_value_heads");
  expect_error(with("num_key_value_heads", "64"), "num_key_value_heads");
}

TEST_F(model_shape_file, non_json_names_the_file) {
  for (const std::string text : {"{ \"hidden_size\": 4096, ", "not json at all", "", "[1, 2]"}) {
    const auto path = write(text);
    const auto result = load_model_shape(path);
    ASSERT_TRUE(std::holds_alternative<std::string>(result)) << text;
    EXPECT_NE(std::get<std::string>(result).find(path), std::string::npos) << std::get<std::string>(result);
  }
}

TEST_F(model_shape_file, missing_file_names_the_path) {
  const auto path = (dir_ / "absent.json").string();
  const auto result = load_model_shape(path);
  ASSERT_TRUE(std::holds_alternative<std::string>(result));
  EXPECT_NE(std::get<std::string>(result).find(path), std::string::npos);
}

} // namespace
} // namespace troupe::gpu
