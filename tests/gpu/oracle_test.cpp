// gpu::cpu_model against an independent float64 NumPy implementation of the
// Hugging Face Llama forward pass with PEFT LoRA (tests/oracle/llama_numpy.py),
// over models that troupe-mkmodel generates: MHA and GQA, tied embeddings,
// llama3 RoPE, f32/f16/bf16 files, LoRA ranks 4-64 on several target sets,
// rsLoRA, Qwen2's biases, Qwen3's q/k norms, sliding windows, Phi-3's fused
// projections, partial rotary embeddings and LongRoPE; and the rotary
// frequencies of real models' configs, which must be transformers' float32
// ones to the bit. Needs troupe-mkmodel (built alongside) and
// /usr/bin/python3 with numpy.

#include "gpu/cpu_model.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/lora.hpp"
#include "gpu/rope.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef TROUPE_MKMODEL_PATH
#define TROUPE_MKMODEL_PATH ""
#endif
#ifndef TROUPE_ORACLE_SCRIPT
#define TROUPE_ORACLE_SCRIPT "tests/oracle/llama_numpy.py"
#endif

namespace {

using namespace troupe::gpu;
namespace fs = std::filesystem;

static_assert(std::is_nothrow_move_constructible_v<lora_adapter>);

constexpr double tolerance = 1e-4;
constexpr std::uint32_t page_tokens = 16;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s)
    q += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return q + "'";
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string{v} : fallback;
}

std::string python() { return env_or("TROUPE_PYTHON", "/usr/bin/python3"); }

/// Runs `cmd` and returns its stdout and whether it exited with 0.
std::pair<std::string, bool> capture(const std::string& cmd) {
  std::string out;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr)
    return {out, false};
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  return {out, pclose(p) == 0};
}

/// One generated model and what to check on it.
struct oracle_case {
  const char* name;
  const char* mkmodel_args;
  std::uint32_t adapters;
  std::vector<std::uint32_t> prompt_lengths;
};

std::ostream& operator<<(std::ostream& os, const oracle_case& c) { return os << c.name; }

const oracle_case cases[] = {
  {"mha_f32_qv_r4_r8", "--hidden 128 --intermediate 256 --layers 2 --heads 4 --kv-heads 4 "
                       "--adapters 2 --ranks 4,8 --targets q_proj,v_proj",
   2, {1, 5, 33}},
  {"gqa_bf16_llama3_all_linear_r16_r64",
   "--hidden 128 --intermediate 320 --layers 2 --heads 8 --kv-heads 2 --dtype bf16 --rope-llama3 "
   "--adapters 2 --ranks 16,64 --targets all-linear",
   2, {2, 17, 300}},
  {"tied_gqa_rslora_o_down_r8_r64",
   "--hidden 96 --intermediate 192 --layers 3 --heads 6 --kv-heads 3 --tie --rslora "
   "--adapters 2 --ranks 8,64 --targets o_proj,down_proj",
   2, {3, 40}},
  {"default_f16_qv_r4", "--dtype f16 --adapters 1 --ranks 4 --targets q_proj,v_proj --seed 7", 1,
   {9, 64}},
  // Qwen2: biases on q, k and v (the oracle adds any bias a checkpoint has).
  {"qwen2_bias_tied_gqa_qkv_r8", "--arch qwen2 --hidden 128 --intermediate 256 --layers 2 --heads 8 --kv-heads 2 "
                                 "--tie --adapters 1 --ranks 8 --targets q_proj,k_proj,v_proj",
   1, {4, 29}},
  // Qwen3: each head of q and k normalised; heads * head_dim (128) is not
  // the hidden size (96), as in Qwen3's own shapes.
  {"qwen3_qk_norm_wide_heads_all_linear_r8", "--arch qwen3 --hidden 96 --head-dim 32 --intermediate 192 --layers 2 "
                                            "--heads 4 --kv-heads 2 --adapters 1 --ranks 8 --targets all-linear",
   1, {3, 26}},
  // Mistral 7B v0.1's sliding window, shorter than most prompts: 12 and 13
  // tokens are the window's edge, 50 cover several pages past it.
  {"mistral_sliding_window_12_gqa_all_linear_r8",
   "--arch mistral --hidden 128 --intermediate 256 --layers 2 --heads 8 --kv-heads 2 --max-context 256 "
   "--sliding-window 12 --adapters 1 --ranks 8 --targets all-linear",
   1, {5, 12, 13, 50}},
  // Phi-3: q, k and v stored as one tensor, gate and up as one, adapters
  // over those (one A for the parts), and Phi-3 mini's sliding window.
  {"phi3_fused_qkv_gate_up_window_20_all_linear_r8_r16",
   "--arch phi3 --hidden 128 --intermediate 256 --layers 2 --heads 8 --kv-heads 2 --max-context 256 "
   "--sliding-window 20 --adapters 2 --ranks 8,16 --targets all-linear",
   2, {3, 25, 40}},
  // Phi-4 mini's rotation over three quarters of each head (12 of 16
  // pairs) with LongRoPE over a pretrained context of 20: prompts of up to
  // 20 tokens turn by the short factors, longer ones by the long, as
  // Hugging Face's forward pass does. (Each prompt is also prefilled but
  // for its last token and then decoded: 22 and 40 are long both times.)
  {"phi4_partial_rotary_longrope_20_tied_all_linear_r8",
   "--arch phi3 --hidden 128 --intermediate 256 --layers 2 --heads 4 --kv-heads 2 --max-context 64 "
   "--partial-rotary 0.75 --longrope 20 --tie --adapters 1 --ranks 8 --targets all-linear",
   1, {3, 20, 22, 40}},
  // Qwen2.5's long-context setting: YaRN stretching a pretrained context
  // of 64 (max_position_embeddings) by 4, with its attention factor on cos
  // and sin. Of the 8 pairs, 0 keeps its frequency, 1 and 2 blend and 3 to
  // 7 are divided by 4; prompts past 64 tokens are within the stretched
  // context.
  {"qwen2_yarn_64_by_4_gqa_qkv_r8",
   "--arch qwen2 --hidden 128 --intermediate 256 --layers 2 --heads 8 --kv-heads 2 --max-context 256 "
   "--yarn 64 --adapters 1 --ranks 8 --targets q_proj,k_proj,v_proj",
   1, {3, 64, 65, 200}},
};

class oracle_test : public ::testing::TestWithParam<oracle_case> {
protected:
  void SetUp() override {
    // The oracle is a dependency (python3-numpy, tools/install-deps.sh): fail, never skip.
    ASSERT_EQ(std::system((shell_quote(python()) + " -c 'import numpy' 2>/dev/null").c_str()), 0)
      << python() << " cannot import numpy; run tools/install-deps.sh (python3-numpy)";
    mkmodel_ = env_or("TROUPE_MKMODEL", TROUPE_MKMODEL_PATH);
    ASSERT_FALSE(mkmodel_.empty()) << "TROUPE_MKMODEL is not set (path of the built troupe-mkmodel)";
    script_ = env_or("TROUPE_ORACLE", TROUPE_ORACLE_SCRIPT);
    ASSERT_TRUE(fs::is_regular_file(script_)) << script_ << " not found (set TROUPE_ORACLE)";
    std::string templ = (fs::temp_directory_path() / "troupe_oracle_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty())
      fs::remove_all(dir_, ec);
  }

  /// Oracle logits for each prompt, through `adapter` ("" for the base model).
  std::vector<std::vector<double>> oracle(const std::string& adapter,
                                          const std::vector<std::vector<std::int32_t>>& prompts) {
    std::string cmd = shell_quote(python()) + " " + shell_quote(script_) + " --model " + shell_quote(dir_);
    if (!adapter.empty())
      cmd += " --adapter " + shell_quote(adapter);
    for (const auto& p : prompts) {
      cmd += " --tokens ";
      for (std::size_t i = 0; i < p.size(); ++i)
        cmd += (i ? "," : "") + std::to_string(p[i]);
    }
    const auto [out, ok] = capture(cmd);
    EXPECT_TRUE(ok) << "oracle failed: " << cmd;
    const auto doc = nlohmann::json::parse(out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("all_logits")) {
      ADD_FAILURE() << "oracle printed no logits: " << out.substr(0, 200);
      return {};
    }
    return doc["all_logits"].get<std::vector<std::vector<double>>>();
  }

  std::string mkmodel_;
  std::string script_;
  std::string dir_;
};

/// Deterministic token ids in [3, vocab) (no specials after the BOS).
std::vector<std::int32_t> make_prompt(std::uint32_t length, std::uint32_t vocab, std::uint32_t salt) {
  std::vector<std::int32_t> p{1};
  std::uint64_t x = 0x1234567ULL + salt * 7919ULL;
  while (p.size() < length) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p.push_back(static_cast<std::int32_t>(3 + (x >> 33) % (vocab - 3)));
  }
  return p;
}

double relative_error(std::span<const float> ours, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(ours[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
    if (!std::isfinite(ours[i]))
      return INFINITY;
  }
  return scale > 0 ? diff / scale : diff;
}

TEST_P(oracle_test, cpu_model_matches_numpy_oracle) {
  const oracle_case& c = GetParam();
  const std::string cmd = shell_quote(mkmodel_) + " --out " + shell_quote(dir_) + " " + c.mkmodel_args +
                          " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  auto loaded = load_llama(dir_);
  ASSERT_TRUE(std::holds_alternative<llama_weights>(loaded)) << std::get<std::string>(loaded);
  const llama_config config = std::get<llama_weights>(loaded).config;
  const std::uint32_t vocab = config.vocab_size;

  std::vector<lora_adapter> adapters;
  std::vector<std::string> adapter_dirs{""};
  for (std::uint32_t i = 0; i < c.adapters; ++i) {
    adapter_dirs.push_back(dir_ + "/adapters/lora-" + std::to_string(i));
    auto a = load_peft_adapter(adapter_dirs.back(), config);
    ASSERT_TRUE(std::holds_alternative<lora_adapter>(a)) << std::get<std::string>(a);
    adapters.push_back(std::move(std::get<lora_adapter>(a)));
  }

  std::vector<std::vector<std::int32_t>> prompts;
  for (std::size_t i = 0; i < c.prompt_lengths.size(); ++i)
    prompts.push_back(make_prompt(c.prompt_lengths[i], vocab, static_cast<std::uint32_t>(i)));

  // Pages: each (adapter, prompt) pair owns its own run of pages.
  std::vector<std::vector<std::uint32_t>> pages;
  std::uint32_t next_page = 0;
  for (std::size_t a = 0; a < adapter_dirs.size(); ++a) {
    for (const auto& p : prompts) {
      const std::uint32_t n = static_cast<std::uint32_t>((p.size() + page_tokens - 1) / page_tokens);
      pages.emplace_back();
      for (std::uint32_t k = 0; k < n; ++k)
        pages.back().push_back(next_page++);
    }
  }
  cpu_model model{std::move(std::get<llama_weights>(loaded)), next_page, page_tokens};

  // 1. One batched prefill of every (adapter, prompt) pair.
  std::vector<cpu_sequence> batch;
  for (std::size_t a = 0; a < adapter_dirs.size(); ++a)
    for (std::size_t i = 0; i < prompts.size(); ++i)
      batch.push_back({prompts[i], 0, pages[a * prompts.size() + i], a == 0 ? nullptr : &adapters[a - 1]});
  const std::vector<float> prefill = model.forward(batch);
  ASSERT_EQ(prefill.size(), batch.size() * vocab);

  // 2. Prefill all but the last token, then decode the last one from the KV cache.
  std::vector<cpu_sequence> heads, tails;
  for (const auto& s : batch) {
    if (s.tokens.size() < 2)
      continue;
    heads.push_back({s.tokens.first(s.tokens.size() - 1), 0, s.pages, s.adapter});
    tails.push_back({s.tokens.last(1), static_cast<std::uint32_t>(s.tokens.size() - 1), s.pages, s.adapter});
  }
  ASSERT_FALSE(model.forward(heads).empty());
  const std::vector<float> decode = model.forward(tails);
  ASSERT_EQ(decode.size(), tails.size() * vocab);

  std::vector<std::vector<double>> base;
  std::size_t decoded = 0;
  for (std::size_t a = 0; a < adapter_dirs.size(); ++a) {
    const auto want = oracle(adapter_dirs[a], prompts);
    ASSERT_EQ(want.size(), prompts.size());
    if (a == 0)
      base = want;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(want[i].size(), vocab);
      const std::size_t row = a * prompts.size() + i;
      const std::span<const float> ours{prefill.data() + row * vocab, vocab};
      const double err = relative_error(ours, want[i]);
      EXPECT_LE(err, tolerance) << c.name << " adapter " << adapter_dirs[a] << " prompt length "
                                << prompts[i].size() << " (prefill)";
      if (prompts[i].size() >= 2) {
        const std::span<const float> dec{decode.data() + decoded++ * vocab, vocab};
        EXPECT_LE(relative_error(dec, want[i]), tolerance)
          << c.name << " adapter " << adapter_dirs[a] << " prompt length " << prompts[i].size()
          << " (decode after prefill)";
      }
      if (a > 0) {
        // The adapter must matter, or the comparison proves little.
        double diff = 0, scale = 0;
        for (std::size_t k = 0; k < vocab; ++k) {
          diff = std::max(diff, std::abs(want[i][k] - base[i][k]));
          scale = std::max(scale, std::abs(base[i][k]));
        }
        EXPECT_GT(diff / scale, 100 * tolerance) << c.name << " adapter " << a << " barely changes logits";
      }
    }
  }
}

// -- rotary frequencies --------------------------------------------------------

// One config.json's rotary embedding and the sequence lengths to ask for.
struct rope_config_case {
  const char* name;
  std::string json;
  std::vector<std::uint32_t> lengths;
};

std::string factors_json(std::size_t n, double first, double step, double power) {
  std::string out = "[";
  for (std::size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : ", ") + std::to_string(first + step * std::pow(static_cast<double>(i), power));
  return out + "]";
}

std::vector<rope_config_case> rope_config_cases() {
  const std::string common = R"("vocab_size": 32000, "intermediate_size": 11008, "num_hidden_layers": 32, )";
  return {
    {"llama2", "{" + common + R"("model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "rope_theta": 10000.0, "max_position_embeddings": 4096})", {1}},
    {"llama31", "{" + common + R"("model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "rope_theta": 500000.0, "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}})", {1}},
    {"qwen25", "{" + common + R"("model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "rope_theta": 1000000.0, "max_position_embeddings": 32768})", {1}},
    {"head_dim_64", "{" + common + R"("model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32,
      "rope_theta": 10000.0, "max_position_embeddings": 2048})", {1}},
    {"phi35_longrope", "{" + common + R"("model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
      "rope_theta": 10000.0, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": )" + factors_json(48, 1.0, 0.013, 1.1) +
       R"(, "long_factor": )" + factors_json(48, 1.08, 0.37, 1.3) + "}}", {1, 4096, 4097}},
    {"phi4_partial_longrope", "{" + common + R"("model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 24,
      "num_key_value_heads": 8, "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
      "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": )" + factors_json(48, 1.0, 0.021, 1.05) +
       R"(, "long_factor": )" + factors_json(48, 1.0, 0.51, 1.2) + "}}", {1, 4097}},
    // Qwen2.5's YaRN setting, as its model cards give it.
    {"qwen25_yarn", "{" + common + R"("model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})", {1}},
    // YaRN without a stated pretrained context (max_position_embeddings
    // is), and the correction range's ends not rounded, as gpt-oss's.
    {"yarn_untruncated", "{" + common + R"("model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32,
      "rope_theta": 150000.0, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                       "truncate": false}})", {1}},
    // Position interpolation, as Vicuna v1.5 16K's.
    {"vicuna_linear", "{" + common + R"("model_type": "llama", "hidden_size": 5120, "num_attention_heads": 40,
      "rope_theta": 10000.0, "max_position_embeddings": 4096, "rope_scaling": {"factor": 4.0, "type": "linear"}})",
     {1}},
  };
}

std::uint32_t bits_of(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The frequencies the cpu and cuda models turn q and k by are the ones
// transformers computes, bit for bit, for each pass length (LongRoPE's
// short and long sets): at 128K positions an ulp of a frequency moves a
// pair's angle by up to 0.008 radian.
TEST(rope_frequencies, are_transformers_float32_ones_to_the_bit) {
  std::string dir = (fs::temp_directory_path() / "troupe_rope_XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::size_t moved_by_double = 0; // elements the one-rounding double formula gets wrong
  for (const auto& rc : rope_config_cases()) {
    auto parsed = parse_llama_config(rc.json, rc.name);
    ASSERT_TRUE(std::holds_alternative<llama_config>(parsed)) << std::get<std::string>(parsed);
    const llama_config& config = std::get<llama_config>(parsed);
    const rope_table table = rope_for(config);
    const std::string path = dir + "/" + rc.name + ".json";
    std::ofstream(path) << rc.json;
    for (const std::uint32_t len : rc.lengths) {
      const auto [out, ok] = capture(shell_quote(python()) + " " + shell_quote(TROUPE_ORACLE_SCRIPT) + " --config " +
                                     shell_quote(path) + " --inv-freq " + std::to_string(len));
      ASSERT_TRUE(ok) << rc.name << ": the oracle failed";
      std::istringstream lines{out};
      std::vector<std::uint32_t> want;
      std::string hex;
      while (lines >> hex)
        want.push_back(static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16)));
      const std::vector<float>& ours = table.for_length(len);
      ASSERT_EQ(ours.size(), want.size()) << rc.name << " length " << len;
      ASSERT_EQ(ours.size() * 2, config.rotary_dims()) << rc.name;
      for (std::size_t i = 0; i < ours.size(); ++i) {
        EXPECT_EQ(bits_of(ours[i]), want[i]) << rc.name << " length " << len << " pair " << i << ": ours "
                                             << ours[i];
      }
      if (config.rope.type.empty() || config.rope.type == "default") {
        for (std::size_t i = 0; i < ours.size(); ++i) {
          const double e = static_cast<double>(2 * i) / config.rotary_dims();
          moved_by_double += bits_of(static_cast<float>(1.0 / std::pow(double{config.rope_theta}, e))) != want[i];
        }
      }
    }
  }
  // The comparison tells float32 steps from one rounding of the exact value.
  EXPECT_GT(moved_by_double, 20u);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(models, oracle_test, ::testing::ValuesIn(cases),
                         [](const ::testing::TestParamInfo<oracle_case>& info) {
                           return std::string{info.param.name};
                         });

} // namespace
