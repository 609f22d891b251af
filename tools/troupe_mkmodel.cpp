// troupe-mkmodel: writes a small random Llama (or, with --arch, Qwen2, Qwen3
// or Mistral) model in Hugging Face's layout (config.json, model.safetensors,
// and a SentencePiece tokenizer.model, Mistral's control tokens and tool
// template with --arch mistral, or, with --tokenizer bpe, a Llama 3-style
// byte-level BPE tokenizer.json, Qwen2-style with --arch qwen2 or qwen3) plus PEFT
// LoRA adapters, deterministic by seed. Used by the oracle and cpu-backend
// tests and for local runs without downloading a model.

#include "gpu/bpe_tokenizer.hpp"
#include "gpu/llama_config.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/lora.hpp"
#include "gpu/random.hpp"
#include "gpu/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#ifndef TROUPE_MKMODEL_CORPUS
#define TROUPE_MKMODEL_CORPUS "tools/mkmodel/corpus.txt"
#endif

namespace {

using namespace troupe::gpu;
namespace fs = std::filesystem;

constexpr std::string_view usage =
  "usage: troupe-mkmodel --out DIR [--preset 100m] [--hidden 256] [--intermediate 688]\n"
  "         [--layers 4] [--heads 8] [--kv-heads 4] [--vocab 512] [--max-context 2048]\n"
  "         [--seed 1] [--dtype f32|f16|bf16] [--rope-llama3] [--tie]\n"
  "         [--adapters N] [--ranks 4,8,16,64] [--targets q_proj,v_proj (phi3: q_proj,k_proj,v_proj) | all-linear]\n"
  "         [--alpha A] [--rslora] [--tokenizer spm|bpe] [--spm-train PATH] [--corpus PATH]\n"
  "         [--arch llama|qwen2|qwen3|mistral|phi3] [--head-dim N (default hidden / heads)]\n"
  "         [--mistral-calls array|named (with --arch mistral; default array)]\n"
  "         [--sliding-window N (with --arch mistral or phi3, below --max-context; default none)]\n"
  "         [--partial-rotary F (with --arch phi3: the share of each head that turns, as Phi-4 mini's 0.75)]\n"
  "         [--longrope N (LongRoPE over a pretrained context of N, below --max-context, as Phi-3.5's)]\n"
  "         [--yarn N (YaRN stretching a pretrained context of N to --max-context, as Qwen2.5's setting)]\n";

struct options {
  std::string out;
  std::uint32_t hidden = 256;
  std::uint32_t intermediate = 688;
  std::uint32_t layers = 4;
  std::uint32_t heads = 8;
  std::uint32_t kv_heads = 4;
  std::uint32_t vocab = 512;
  std::uint32_t max_context = 2048;
  std::uint64_t seed = 1;
  dtype type = dtype::f32;
  bool rope_llama3 = false;
  bool tie = false;
  std::uint32_t adapters = 0;
  std::vector<std::uint32_t> ranks{4, 8, 16, 64};
  /// --targets; none given: q_proj and v_proj, or with --arch phi3 qkv_proj.
  std::vector<lora_target> targets{lora_target::q, lora_target::v};
  bool targets_given = false;
  std::optional<double> alpha;
  bool rslora = false;
  bool bpe = false; ///< --tokenizer bpe: tokenizer.json, Llama 3's special tokens
  /// --arch: "llama"; "qwen2" (biases on q, k, v) or "qwen3" (q and k
  /// normalised per head), both with Qwen2's tokenizer.json under bpe;
  /// "mistral" (Llama's layers; a SentencePiece tokenizer with Mistral's
  /// control tokens and a chat template that writes tools and calls as
  /// Mistral 7B Instruct v0.3's does).
  std::string arch = "llama";
  /// --mistral-calls, with --arch mistral: "array", v0.3's calls (one JSON
  /// array after [TOOL_CALLS]); "named", the later form (Mistral Small
  /// 3.x's: [TOOL_CALLS]name[ARGS]{...} for each call, results in
  /// [TOOL_RESULTS] tags without ids, a system prompt in its own tags).
  std::string mistral_calls = "array";
  std::uint32_t head_dim = 0; ///< 0: hidden / heads
  std::uint32_t sliding_window = 0; ///< Mistral 7B v0.1's attention window; 0: none
  double partial_rotary = 1.0; ///< Phi-3's partial_rotary_factor
  std::uint32_t longrope = 0; ///< LongRoPE's original_max_position_embeddings; 0: none
  /// YaRN's original_max_position_embeddings (and the config's
  /// max_position_embeddings, as Qwen2.5's setting keeps it), stretched to
  /// max_context; 0: none.
  std::uint32_t yarn = 0;
  bool qwen() const { return arch == "qwen2" || arch == "qwen3"; }
  std::string spm_train = "spm_train";
  std::string corpus = TROUPE_MKMODEL_CORPUS;
};

/// --tokenizer bpe: Llama 3's special tokens, at the top of the vocabulary
/// in this order (generation_config.json ends on <|end_of_text|> and
/// <|eot_id|>, as Llama 3 Instruct's does).
constexpr std::array<std::string_view, 5> bpe_specials = {
  "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
/// --tokenizer bpe --arch qwen2: Qwen2's, likewise (no BOS; answers end on
/// <|im_end|> or <|endoftext|>, as Qwen2.5 Instruct's).
constexpr std::array<std::string_view, 3> qwen2_specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/// --tokenizer bpe --arch qwen3: Qwen3's reasoning marks, after the special
/// tokens, not special (their text decodes).
std::vector<std::string> plain_added_of(const options& o) {
  if (o.arch == "qwen3")
    return {"<think>", "</think>"};
  return {};
}

std::vector<std::string> specials_of(const options& o) {
  if (o.qwen())
    return {qwen2_specials.begin(), qwen2_specials.end()};
  return {bpe_specials.begin(), bpe_specials.end()};
}

// -- argument parsing ------------------------------------------------------

std::optional<std::uint64_t> parse_uint(std::string_view s) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size())
    return std::nullopt;
  return v;
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    const auto end = comma == std::string_view::npos ? s.size() : comma;
    parts.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::optional<lora_target> target_by_name(std::string_view name) {
  for (std::size_t t = 0; t < lora_target_count; ++t)
    if (to_string(static_cast<lora_target>(t)) == name)
      return static_cast<lora_target>(t);
  return std::nullopt;
}

/// Parses argv into options; an error message on bad input.
std::variant<options, std::string> parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string_view{argv[++i]};
    };
    const auto number = [&](auto& field, std::uint64_t lo, std::uint64_t hi) -> std::optional<std::string> {
      const auto v = value();
      const auto n = v ? parse_uint(*v) : std::nullopt;
      if (!n || *n < lo || *n > hi)
        return std::string{arg} + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
      field = static_cast<std::remove_reference_t<decltype(field)>>(*n);
      return std::nullopt;
    };
    std::optional<std::string> err;
    if (arg == "--out") {
      const auto v = value();
      if (!v || v->empty())
        return std::string{"--out needs a directory"};
      o.out = *v;
    } else if (arg == "--preset") {
      const auto v = value();
      if (!v || *v != "100m")
        return std::string{"--preset supports only 100m"};
      o.hidden = 1024;
      o.intermediate = 3072;
      o.layers = 8;
      o.heads = 16;
      o.kv_heads = 8;
    } else if (arg == "--hidden") {
      err = number(o.hidden, 1, 1u << 16);
    } else if (arg == "--intermediate") {
      err = number(o.intermediate, 1, 1u << 18);
    } else if (arg == "--layers") {
      err = number(o.layers, 1, 256);
    } else if (arg == "--heads") {
      err = number(o.heads, 1, 1024);
    } else if (arg == "--kv-heads") {
      err = number(o.kv_heads, 1, 1024);
    } else if (arg == "--head-dim") {
      err = number(o.head_dim, 2, 1024);
    } else if (arg == "--sliding-window") {
      err = number(o.sliding_window, 1, 1u << 24);
    } else if (arg == "--vocab") {
      err = number(o.vocab, 1, 1u << 20);
    } else if (arg == "--max-context") {
      err = number(o.max_context, 1, 1u << 24);
    } else if (arg == "--seed") {
      err = number(o.seed, 0, UINT64_MAX);
    } else if (arg == "--adapters") {
      err = number(o.adapters, 0, 4096);
    } else if (arg == "--dtype") {
      const auto v = value();
      if (v && *v == "f32")
        o.type = dtype::f32;
      else if (v && *v == "f16")
        o.type = dtype::f16;
      else if (v && *v == "bf16")
        o.type = dtype::bf16;
      else
        return std::string{"--dtype must be f32, f16 or bf16"};
    } else if (arg == "--ranks") {
      const auto v = value();
      if (!v)
        return std::string{"--ranks needs a list such as 4,8,16"};
      o.ranks.clear();
      for (const auto& part : split(*v)) {
        const auto n = parse_uint(part);
        if (!n || *n == 0 || *n > 65536)
          return "--ranks: '" + part + "' is not a rank in [1, 65536]";
        o.ranks.push_back(static_cast<std::uint32_t>(*n));
      }
    } else if (arg == "--targets") {
      const auto v = value();
      if (!v)
        return std::string{"--targets needs a list such as q_proj,v_proj or all-linear"};
      o.targets.clear();
      o.targets_given = true;
      for (const auto& part : split(*v)) {
        if (part == "all-linear") {
          for (std::size_t t = 0; t < lora_target_count; ++t)
            o.targets.push_back(static_cast<lora_target>(t));
        } else if (const auto t = target_by_name(part)) {
          o.targets.push_back(*t);
        } else {
          return "--targets: unknown module '" + part + "'";
        }
      }
    } else if (arg == "--alpha") {
      const auto v = value();
      double a = 0;
      if (!v || std::from_chars(v->data(), v->data() + v->size(), a).ec != std::errc{} || !(a > 0))
        return std::string{"--alpha needs a positive number"};
      o.alpha = a;
    } else if (arg == "--partial-rotary") {
      const auto v = value();
      double f = 0;
      if (!v || std::from_chars(v->data(), v->data() + v->size(), f).ec != std::errc{} || !(f > 0 && f <= 1))
        return std::string{"--partial-rotary needs a number in (0, 1]"};
      o.partial_rotary = f;
    } else if (arg == "--longrope") {
      err = number(o.longrope, 2, 1u << 24);
    } else if (arg == "--yarn") {
      err = number(o.yarn, 2, 1u << 24);
    } else if (arg == "--rope-llama3") {
      o.rope_llama3 = true;
    } else if (arg == "--tie") {
      o.tie = true;
    } else if (arg == "--rslora") {
      o.rslora = true;
    } else if (arg == "--tokenizer") {
      const auto v = value();
      if (!v || (*v != "spm" && *v != "bpe"))
        return std::string{"--tokenizer needs spm or bpe"};
      o.bpe = *v == "bpe";
    } else if (arg == "--spm-train" || arg == "--corpus") {
      const auto v = value();
      if (!v)
        return std::string{arg} + " needs a path";
      (arg == "--spm-train" ? o.spm_train : o.corpus) = *v;
    } else if (arg == "--arch") {
      const auto v = value();
      if (!v || (*v != "llama" && *v != "qwen2" && *v != "qwen3" && *v != "mistral" && *v != "phi3"))
        return std::string{"--arch needs llama, qwen2, qwen3, mistral or phi3"};
      o.arch = std::string{*v};
    } else if (arg == "--mistral-calls") {
      const auto v = value();
      if (!v || (*v != "array" && *v != "named"))
        return std::string{"--mistral-calls needs array or named"};
      o.mistral_calls = std::string{*v};
    } else if (arg == "--help" || arg == "-h") {
      return std::string{};
    } else {
      return "unknown argument '" + std::string{arg} + "'";
    }
    if (err)
      return *err;
  }
  if (o.out.empty())
    return std::string{"--out is required"};
  if (o.head_dim == 0 && o.hidden % o.heads != 0)
    return std::string{"--hidden must be a multiple of --heads (or give --head-dim)"};
  if (o.head_dim == 0)
    o.head_dim = o.hidden / o.heads;
  if (o.head_dim % 2 != 0)
    return std::string{"head dim (--head-dim, or hidden / heads) must be even for RoPE"};
  if (o.heads % o.kv_heads != 0)
    return std::string{"--heads must be a multiple of --kv-heads"};
  if (o.ranks.empty() || o.targets.empty())
    return std::string{"--ranks and --targets must not be empty"};
  if (o.mistral_calls != "array" && o.arch != "mistral")
    return std::string{"--mistral-calls goes with --arch mistral"};
  if (o.sliding_window != 0 && o.arch != "mistral" && o.arch != "phi3")
    return std::string{"--sliding-window goes with --arch mistral or phi3 (Mistral 7B v0.1's, Phi-3 mini's window)"};
  if (o.arch == "phi3" && !o.targets_given)
    o.targets = {lora_target::q, lora_target::k, lora_target::v};
  if (o.arch == "phi3") {
    // Phi-3's adapters are over its fused projections: q, k and v together,
    // gate and up together.
    const auto has = [&](lora_target t) { return std::find(o.targets.begin(), o.targets.end(), t) != o.targets.end(); };
    if (!(has(lora_target::q) == has(lora_target::k) && has(lora_target::k) == has(lora_target::v)))
      return std::string{"--arch phi3: --targets q_proj, k_proj and v_proj go together (Phi-3's qkv_proj)"};
    if (has(lora_target::gate) != has(lora_target::up))
      return std::string{"--arch phi3: --targets gate_proj and up_proj go together (Phi-3's gate_up_proj)"};
  }
  if (o.partial_rotary != 1.0) {
    if (o.arch != "phi3")
      return std::string{"--partial-rotary goes with --arch phi3 (Phi-4 mini's partial_rotary_factor)"};
    const auto dims = static_cast<std::uint32_t>(o.head_dim * o.partial_rotary);
    if (dims < 2 || dims % 2 != 0)
      return "--partial-rotary " + std::to_string(o.partial_rotary) + " of a head of " + std::to_string(o.head_dim) +
             " turns " + std::to_string(dims) + " elements: it must be an even number";
  }
  if (o.longrope != 0 && (o.rope_llama3 || o.longrope >= o.max_context))
    return std::string{"--longrope must be below --max-context, without --rope-llama3"};
  if (o.yarn != 0 && (o.rope_llama3 || o.longrope != 0 || o.yarn >= o.max_context))
    return std::string{"--yarn must be below --max-context, without --rope-llama3 or --longrope"};
  if (o.yarn != 0 && o.sliding_window >= o.yarn)
    return std::string{"--sliding-window must be below --yarn's pretrained context"};
  if (o.sliding_window >= o.max_context)
    return std::string{"--sliding-window must be below --max-context (a longer window is none)"};
  if (o.bpe && o.arch == "mistral")
    return std::string{"--arch mistral writes a SentencePiece tokenizer, as Mistral's is (no --tokenizer bpe)"};
  return o;
}

// -- random weights ----------------------------------------------------------

/// Deterministic standard normals: value `i` of stream `stream` under `seed`.
class normal_stream {
public:
  normal_stream(std::uint64_t seed, std::uint64_t stream)
    : state_(splitmix64(splitmix64(seed) ^ (stream * 0x9e3779b97f4a7c15ULL))) {}

  double next() {
    // Box-Muller on two 53-bit uniforms in (0, 1].
    const double u1 = (static_cast<double>(splitmix64(state_++) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state_++) >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

private:
  std::uint64_t state_;
};

named_tensor random_tensor(std::string name, std::vector<std::uint64_t> shape, std::uint64_t seed,
                           std::uint64_t stream, double mean, double stddev) {
  std::uint64_t n = 1;
  for (const auto d : shape)
    n *= d;
  named_tensor t{std::move(name), std::move(shape), {}};
  t.values.resize(n);
  normal_stream rng{seed, stream};
  for (auto& v : t.values)
    v = static_cast<float>(mean + stddev * rng.next());
  return t;
}

// -- writers -----------------------------------------------------------------

std::optional<std::string> write_text(const fs::path& path, const std::string& text) {
  std::ofstream f{path, std::ios::binary | std::ios::trunc};
  f << text;
  f.close();
  if (!f)
    return path.string() + ": cannot write";
  return std::nullopt;
}

llama_config make_config(const options& o) {
  llama_config c;
  c.model_type = o.arch;
  c.qkv_bias = o.arch == "qwen2";
  c.qk_norm = o.arch == "qwen3";
  c.fused_projections = o.arch == "phi3";
  c.hidden_size = o.hidden;
  c.intermediate_size = o.intermediate;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.vocab_size = o.vocab;
  c.max_position_embeddings = o.max_context;
  c.sliding_window = o.sliding_window;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = o.rope_llama3 ? 500000.0f : 10000.0f;
  if (o.rope_llama3) {
    c.rope.type = "llama3";
    c.rope.factor = 8.0;
    c.rope.low_freq_factor = 1.0;
    c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
  }
  if (o.partial_rotary != 1.0)
    c.rotary_dim = static_cast<std::uint32_t>(o.head_dim * o.partial_rotary);
  if (o.longrope != 0) {
    // Factors shaped as Phi-3.5's: near 1 for short sequences; for long
    // ones growing with the wavelength, so that the two sets part clearly.
    c.rope.type = "longrope";
    c.rope.original_max_position_embeddings = o.longrope;
    const std::uint32_t pairs = c.rotary_dims() / 2;
    for (std::uint32_t i = 0; i < pairs; ++i) {
      const double x = static_cast<double>(i) / pairs;
      c.rope.short_factor.push_back(1.0 + 0.25 * x);
      c.rope.long_factor.push_back(1.0 + 40.0 * x * x);
    }
    const double factor = static_cast<double>(o.max_context) / o.longrope;
    c.rope.attention_factor = longrope_attention_factor(factor, o.longrope);
  }
  if (o.yarn != 0) {
    // Qwen2.5's long-context setting: max_position_embeddings stays the
    // pretrained context and rope_scaling stretches it by factor.
    c.max_position_embeddings = o.yarn;
    c.rope.type = "yarn";
    c.rope.original_max_position_embeddings = o.yarn;
    c.rope.factor = static_cast<double>(o.max_context) / o.yarn;
    c.rope.attention_factor = yarn_attention_factor(c.rope.factor);
  }
  c.tie_word_embeddings = o.tie;
  if (o.bpe && o.qwen()) {
    // <|endoftext|>, first of the added tokens
    c.bos_token_id = static_cast<std::int32_t>(o.vocab - qwen2_specials.size() - plain_added_of(o).size());
    c.eos_token_ids = {c.bos_token_id + 2};                                      // <|im_end|>
  } else if (o.bpe) {
    c.bos_token_id = static_cast<std::int32_t>(o.vocab - bpe_specials.size()); // <|begin_of_text|>
    c.eos_token_ids = {c.bos_token_id + 1};                                     // <|end_of_text|>
  } else {
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
  }
  switch (o.type) {
    case dtype::f32:
      c.torch_dtype = "float32";
      break;
    case dtype::f16:
      c.torch_dtype = "float16";
      break;
    case dtype::bf16:
      c.torch_dtype = "bfloat16";
      break;
  }
  return c;
}

std::optional<std::string> write_model(const options& o, const llama_config& c, std::uint64_t& params) {
  std::uint64_t stream = 0;
  const auto ts = llama_checkpoint_named(c, [&](const llama_tensor_ref& t) {
    // Norm weights near 1, projections and embeddings near 0, biases
    // wider: Qwen2's are large enough to matter.
    const bool norm = t.which == llama_tensor::attn_norm || t.which == llama_tensor::mlp_norm ||
                      t.which == llama_tensor::final_norm || t.which == llama_tensor::q_norm ||
                      t.which == llama_tensor::k_norm;
    const bool bias = t.which == llama_tensor::q_bias || t.which == llama_tensor::k_bias ||
                      t.which == llama_tensor::v_bias || t.which == llama_tensor::o_bias;
    return random_tensor(t.name, t.shape, o.seed, stream++, norm ? 1.0 : 0.0, norm ? 0.05 : bias ? 0.5 : 0.02)
      .values;
  });
  params = 0;
  for (const auto& t : ts)
    params += t.values.size();
  return write_safetensors((fs::path{o.out} / "model.safetensors").string(), ts, o.type,
                           {{"format", "pt"}});
}

std::optional<std::string> write_adapter(const options& o, const llama_config& c, std::uint32_t index,
                                         const fs::path& dir, std::uint32_t& rank) {
  rank = o.ranks[index % o.ranks.size()];
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return dir.string() + ": cannot create: " + ec.message();
  std::array<bool, lora_target_count> on{};
  for (const auto t : o.targets)
    on[static_cast<std::size_t>(t)] = true;
  const bool fused = c.fused_projections; // Phi-3's qkv_proj and gate_up_proj
  const auto fused_part = [&](lora_target t) {
    return fused && (t == lora_target::k || t == lora_target::v || t == lora_target::up);
  };
  nlohmann::json names = nlohmann::json::array();
  for (std::size_t t = 0; t < lora_target_count; ++t) {
    const auto target = static_cast<lora_target>(t);
    if (!on[t] || fused_part(target))
      continue;
    names.push_back(!fused                          ? std::string{to_string(target)}
                    : target == lora_target::q    ? std::string{"qkv_proj"}
                    : target == lora_target::gate ? std::string{"gate_up_proj"}
                                                  : std::string{to_string(target)});
  }
  const double alpha = o.alpha.value_or(2.0 * rank);
  nlohmann::json cfg = {{"peft_type", "LORA"},
                        {"r", rank},
                        {"lora_alpha", alpha},
                        {"target_modules", names},
                        {"use_rslora", o.rslora},
                        {"bias", "none"},
                        {"fan_in_fan_out", false},
                        {"base_model_name_or_path", fs::absolute(o.out).lexically_normal().string()},
                        {"task_type", "CAUSAL_LM"},
                        {"lora_dropout", 0.0},
                        {"inference_mode", true}};
  if (auto err = write_text(dir / "adapter_config.json", cfg.dump(2) + "\n"))
    return err;

  const std::uint64_t h = c.hidden_size, inter = c.intermediate_size;
  const std::uint64_t q_dim = std::uint64_t{c.num_heads} * c.head_dim;
  const std::uint64_t kv_dim = std::uint64_t{c.num_kv_heads} * c.head_dim;
  std::vector<named_tensor> ts;
  const std::uint64_t seed = splitmix64(o.seed ^ (0xada97e5ULL + index));
  std::uint64_t stream = 0;
  for (std::uint32_t i = 0; i < c.num_layers; ++i) {
    for (std::size_t ti = 0; ti < lora_target_count; ++ti) {
      if (!on[ti])
        continue;
      const auto t = static_cast<lora_target>(ti);
      if (fused_part(t))
        continue; // in its fused tensor
      std::uint64_t in = h, out = h;
      switch (t) {
        case lora_target::q:
          out = fused ? q_dim + 2 * kv_dim : q_dim;
          break;
        case lora_target::k:
        case lora_target::v:
          out = kv_dim;
          break;
        case lora_target::o:
          in = q_dim;
          break;
        case lora_target::gate:
        case lora_target::up:
          out = fused ? 2 * inter : inter;
          break;
        case lora_target::down:
          in = inter;
          break;
      }
      const auto name = [&](char matrix) {
        return !fused || (t != lora_target::q && t != lora_target::gate)
                 ? peft_tensor_name(i, t, matrix)
                 : peft_tensor_name(i, t == lora_target::q ? "self_attn.qkv_proj" : "mlp.gate_up_proj", matrix);
      };
      ts.push_back(random_tensor(name('A'), {rank, in}, seed, stream++, 0.0, 0.02));
      ts.push_back(random_tensor(name('B'), {out, rank}, seed, stream++, 0.0, 0.02));
    }
  }
  // PEFT saves adapters in the base model's dtype.
  return write_safetensors((dir / "adapter_model.safetensors").string(), ts, o.type, {{"format", "pt"}});
}

/// Runs spm_train (no shell: arguments go to execvp as they are); its log
/// goes to `log`. Returns an error message on failure.
std::optional<std::string> train_tokenizer(const options& o, const fs::path& out) {
  if (!fs::is_regular_file(o.corpus))
    return o.corpus + ": corpus not found (pass --corpus PATH)";
  const fs::path log = out / "spm_train.log";
  std::vector<std::string> args = {o.spm_train,
                                   "--input=" + o.corpus,
                                   "--model_prefix=" + (out / "tokenizer").string(),
                                   "--model_type=bpe",
                                   "--vocab_size=" + std::to_string(o.vocab),
                                   "--byte_fallback=true",
                                   "--bos_id=1",
                                   "--eos_id=2",
                                   "--unk_id=0",
                                   "--pad_id=-1",
                                   "--character_coverage=1.0",
                                   "--normalization_rule_name=identity",
                                   "--remove_extra_whitespaces=false",
                                   "--split_digits=true",
                                   "--num_threads=1"};
  if (o.arch == "mistral") // Mistral 7B Instruct v0.3's (and later ones'), each one token that stands for no text
    args.push_back(std::string("--control_symbols=[INST],[/INST],[TOOL_CALLS],[AVAILABLE_TOOLS],[/AVAILABLE_TOOLS],"
                               "[TOOL_RESULTS],[/TOOL_RESULTS]")
                   + (o.mistral_calls == "named" ? ",[ARGS],[SYSTEM_PROMPT],[/SYSTEM_PROMPT]" : ""));
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0)
    return std::string{"cannot fork to run "} + o.spm_train;
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return std::string{"waitpid failed for "} + o.spm_train;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream f{log};
    std::string line, last;
    std::vector<std::string> tail;
    while (std::getline(f, line))
      tail.push_back(line);
    const std::size_t from = tail.size() > 5 ? tail.size() - 5 : 0;
    for (std::size_t k = from; k < tail.size(); ++k)
      last += "\n  " + tail[k];
    return o.spm_train + " failed (vocab " + std::to_string(o.vocab) + ", corpus " + o.corpus +
           "; see " + log.string() + "):" + last;
  }
  std::error_code ec;
  fs::remove(log, ec);
  fs::remove(out / "tokenizer.vocab", ec);
  // A chat template (chat_template = "model" reads it). Mistral's: BOS
  // once, the tools as a JSON list before the last user turn, a system
  // text in the last user turn, an assistant's calls as one array after
  // [TOOL_CALLS] (each with its id, which must be nine characters), a
  // tool's result with the id of the call it answers.
  // The later form's: the system prompt in its own tags first, the tools
  // before the last user turn, each call [TOOL_CALLS]name[ARGS]arguments
  // after the assistant's text, a tool's result in tags, no ids.
  // Mistral's tokenizer_config.json: BOS and EOS as SentencePiece's, and
  // `chat_template`.
  const auto mistral_config = [&](const char* chat_template) {
    return write_text(out / "tokenizer_config.json",
                      nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"chat_template", chat_template}}
                          .dump(2)
                        + "\n");
  };
  if (o.arch == "mistral" && o.mistral_calls == "named")
    return mistral_config(
         "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
         "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}{{- bos_token }}"
         "{%- if messages[0].role == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0].content + '[/SYSTEM_PROMPT]' }}"
         "{%- endif %}{%- for m in messages %}{%- if m.role == 'user' %}"
         "{%- if tools and loop.index0 == ns.last_user %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + "
         "'[/AVAILABLE_TOOLS]' }}{%- endif %}{{- '[INST]' + m.content + '[/INST]' }}"
         "{%- elif m.role == 'assistant' %}{%- if m.content %}{{- m.content }}{%- endif %}"
         "{%- for c in m.tool_calls or [] %}{%- set a = c.function.arguments %}"
         "{%- if a is not string %}{%- set a = a | tojson %}{%- endif %}"
         "{{- '[TOOL_CALLS]' + c.function.name + '[ARGS]' + a }}{%- endfor %}{{- eos_token }}"
         "{%- elif m.role == 'tool' %}{{- '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}"
         "{%- elif m.role != 'system' or not loop.first %}"
         "{{- raise_exception('roles are system (first), user, assistant and tool') }}{%- endif %}{%- endfor %}");
  if (o.arch == "mistral")
    return mistral_config(
         "{%- set ns = namespace(last_user=-1, system='') %}{%- for m in messages %}{%- if m.role == 'user' %}"
         "{%- set ns.last_user = loop.index0 %}{%- elif m.role == 'system' %}{%- set ns.system = m.content %}"
         "{%- endif %}{%- endfor %}{{- bos_token }}{%- for m in messages %}{%- if m.role == 'user' %}"
         "{%- if tools and loop.index0 == ns.last_user %}{{- '[AVAILABLE_TOOLS] ' + tools | tojson + "
         "'[/AVAILABLE_TOOLS]' }}{%- endif %}{%- set text = (ns.system + '\\n\\n' + m.content) if ns.system and "
         "loop.index0 == ns.last_user else m.content %}{{- '[INST] ' + text + '[/INST]' }}"
         "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '[TOOL_CALLS] [' }}{%- for c in m.tool_calls %}"
         "{%- if c.id is not defined or c.id | length != 9 %}"
         "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}"
         "{%- set call = c.function | tojson %}{{- call[:-1] + ', \"id\": \"' + c.id + '\"}' }}"
         "{{- ', ' if not loop.last else ']' + eos_token }}{%- endfor %}{%- elif m.role == 'assistant' %}"
         "{{- ' ' + m.content | trim + eos_token }}{%- elif m.role == 'tool' %}"
         "{{- '[TOOL_RESULTS] {\"content\": ' + m.content | tojson + ', \"call_id\": \"' + m.tool_call_id + "
         "'\"}[/TOOL_RESULTS]' }}{%- endif %}{%- endfor %}");
  // Llama 2 chat's format: the system text inside the first user turn,
  // each turn [INST] ... [/INST] after BOS, each reply closed by EOS,
  // texts trimmed.
  const nlohmann::json tokenizer_config = {
    {"bos_token", "<s>"},
    {"eos_token", "</s>"},
    {"chat_template",
     "{%- if messages[0]['role'] == 'system' %}{%- set sys = '<<SYS>>\\n' + messages[0]['content'] | trim + "
     "'\\n<</SYS>>\\n\\n' %}{%- set turns = messages[1:] %}{%- else %}{%- set sys = '' %}{%- set turns = messages %}"
     "{%- endif %}{%- for m in turns %}{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{- raise_exception('roles must alternate user, assistant, user, ...') }}{%- endif %}{%- if m['role'] == 'user' %}"
     "{{- bos_token + '[INST] ' + (sys if loop.first else '') + m['content'] | trim + ' [/INST]' }}{%- else %}"
     "{{- ' ' + m['content'] | trim + ' ' + eos_token }}{%- endif %}{%- endfor %}"}};
  return write_text(out / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

/// Learns a byte-level BPE tokenizer.json from the corpus, Llama 3's
/// pre-tokenizer and special tokens (Qwen2's, and its NFC normalizer, with
/// --arch qwen2 or qwen3), and writes generation_config.json with both end tokens and
/// tokenizer_config.json with a chat template in the model's format.
std::optional<std::string> train_bpe_tokenizer(const options& o, const fs::path& out) {
  std::ifstream f{o.corpus, std::ios::binary};
  if (!f)
    return o.corpus + ": corpus not found (pass --corpus PATH)";
  std::ostringstream corpus;
  corpus << f.rdbuf();
  const auto specials = specials_of(o);
  const auto plain = plain_added_of(o);
  const std::size_t added = specials.size() + plain.size();
  if (o.vocab < 256 + added)
    return "--vocab " + std::to_string(o.vocab) + " is too small for a byte-level tokenizer (at least " +
           std::to_string(256 + added) + ")";
  bpe_training t;
  t.vocab_size = o.vocab - static_cast<std::uint32_t>(added);
  t.special_tokens = specials;
  t.added_tokens = plain;
  if (o.qwen()) {
    t.pattern = std::string{qwen2_split_pattern};
    t.normalizer = "NFC";
    t.ignore_merges = false;
  } else {
    t.bos_token = specials[0];
  }
  const auto trained = train_bpe_json(corpus.str(), t);
  if (!trained.error.empty())
    return "tokenizer: " + trained.error;
  if (auto err = write_text(out / "tokenizer.json", trained.json))
    return err;
  const auto base = static_cast<std::int32_t>(t.vocab_size);
  // Llama 3: <|end_of_text|> and <|eot_id|>; Qwen2: <|im_end|> and <|endoftext|>.
  const nlohmann::json end_ids = o.qwen() ? nlohmann::json{base + 2, base} : nlohmann::json{base + 1, base + 4};
  nlohmann::json generation = {{"bos_token_id", base}, {"eos_token_id", end_ids}};
  if (auto err = write_text(out / "generation_config.json", generation.dump(2) + "\n"))
    return err;
  // A chat template (chat_template = "model" reads it). Llama 3 Instruct's
  // format: BOS, each message's text trimmed under its role's header, closed
  // by <|eot_id|>, then the assistant's header. Qwen2's, ChatML: each
  // message between <|im_start|>role and <|im_end|>, then the assistant's
  // turn opened; no BOS.
  const nlohmann::json tokenizer_config =
    o.qwen() ? nlohmann::json{{"bos_token", nullptr},
                             {"eos_token", qwen2_specials[2]},
                             {"pad_token", qwen2_specials[0]},
                             {"chat_template",
                              "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                              "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                              "{{- '<|im_start|>assistant\\n' }}{%- endif %}"}}
            : nlohmann::json{{"bos_token", bpe_specials[0]},
                             {"eos_token", bpe_specials[4]},
                             {"chat_template",
                              "{{- bos_token }}{%- for m in messages %}{{- '<|start_header_id|>' + m['role'] + "
                              "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
                              "{%- if add_generation_prompt %}"
                              "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"}};
  return write_text(out / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

int run(const options& o) {
  const fs::path out{o.out};
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::cerr << "troupe-mkmodel: " << o.out << ": cannot create: " << ec.message() << "\n";
    return 1;
  }
  // The tokenizer first: it is what fails on a bad --vocab. A tokenizer of
  // the other kind left by an earlier run would be the one loaded.
  const std::vector<std::string> stale =
    o.bpe ? std::vector<std::string>{"tokenizer.model"} : std::vector<std::string>{"tokenizer.json", "generation_config.json"};
  for (const auto& name : stale)
    fs::remove(out / name, ec);
  if (auto err = o.bpe ? train_bpe_tokenizer(o, out) : train_tokenizer(o, out)) {
    std::cerr << "troupe-mkmodel: " << *err << "\n";
    return 1;
  }
  std::cout << "wrote " << (out / (o.bpe ? "tokenizer.json" : "tokenizer.model")).string() << " (vocab " << o.vocab
            << ")\n";
  const llama_config c = make_config(o);
  if (auto err = write_text(out / "config.json", to_config_json(c))) {
    std::cerr << "troupe-mkmodel: " << *err << "\n";
    return 1;
  }
  std::cout << "wrote " << (out / "config.json").string() << "\n";
  std::uint64_t params = 0;
  if (auto err = write_model(o, c, params)) {
    std::cerr << "troupe-mkmodel: " << *err << "\n";
    return 1;
  }
  std::cout << "wrote " << (out / "model.safetensors").string() << " (" << params << " parameters, "
            << to_string(o.type) << ")\n";
  for (std::uint32_t i = 0; i < o.adapters; ++i) {
    const fs::path dir = out / "adapters" / ("lora-" + std::to_string(i));
    std::uint32_t rank = 0;
    if (auto err = write_adapter(o, c, i, dir, rank)) {
      std::cerr << "troupe-mkmodel: " << *err << "\n";
      return 1;
    }
    std::cout << "wrote " << dir.string() << " (rank " << rank << (o.rslora ? ", rslora" : "")
              << ")\n";
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  auto parsed = parse_args(argc, argv);
  if (auto* err = std::get_if<std::string>(&parsed)) {
    if (err->empty()) {
      std::cout << usage;
      return 0;
    }
    std::cerr << "troupe-mkmodel: " << *err << "\n" << usage;
    return 1;
  }
  return run(std::get<options>(parsed));
}
