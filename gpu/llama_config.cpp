// Parsing and writing Hugging Face's Llama config.json: typed reads of each
// key with defaults, llama3 rope scaling, and the reverse serialization that
// troupe-mkmodel uses. Unknown keys are ignored, as HF configs carry many.
#include "gpu/llama_config.hpp"

#include "gpu/json_bounded.hpp"
#include "gpu/rope.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <numbers>
#include <optional>
#include <sstream>

namespace troupe::gpu {

model_shape llama_config::to_shape(const std::string& name) const {
  model_shape s;
  s.name = name;
  s.num_layers = num_layers;
  s.hidden_size = hidden_size;
  s.intermediate_size = intermediate_size;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.vocab_size = vocab_size;
  s.max_context = context_limit();
  s.dtype_bytes = torch_dtype == "float32" ? 4 : 2;
  s.tie_word_embeddings = tie_word_embeddings;
  s.sliding_window = sliding_window;
  s.rope_long_after = rope_long_after();
  return s;
}

namespace {

using json = nlohmann::json;

using detail::parse_bounded;

/// Reads typed keys of one JSON object and keeps the first error, so the
/// caller reads every field and checks once at the end.
class key_reader {
public:
  key_reader(const json& doc, const std::string& source, std::string prefix = {})
    : doc_(doc), source_(source), prefix_(std::move(prefix)) {}

  bool present(const char* key) const { return doc_.contains(key) && !doc_.at(key).is_null(); }

  /// A positive integer that fits 32 bits; `fallback` when absent and not required.
  std::uint32_t positive(const char* key, std::optional<std::uint32_t> fallback) {
    if (!present(key)) {
      if (!fallback)
        fail(key, "is missing");
      return fallback.value_or(0);
    }
    const json& v = doc_.at(key);
    if (!v.is_number_integer() || !v.is_number_unsigned() || v.get<std::uint64_t>() == 0) {
      fail(key, "must be a positive integer, got " + v.dump());
      return 0;
    }
    if (v.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      fail(key, "is too large: " + v.dump());
      return 0;
    }
    return static_cast<std::uint32_t>(v.get<std::uint64_t>());
  }

  /// A finite number; `fallback` when absent.
  double number(const char* key, double fallback, bool required = false) {
    if (!present(key)) {
      if (required)
        fail(key, "is missing");
      return fallback;
    }
    const json& v = doc_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      fail(key, "must be a number, got " + v.dump());
      return fallback;
    }
    return v.get<double>();
  }

  /// A positive number that a float holds (neither overflows to infinity
  /// nor underflows to 0 there); `fallback` when absent.
  float positive_float(const char* key, float fallback) {
    const double d = number(key, fallback);
    const auto f = static_cast<float>(d);
    if (present(key) && !error() && !(f > 0 && std::isfinite(f)))
      fail(key, "must be a positive number within a float's range, got " + doc_.at(key).dump());
    return f;
  }

  /// A token id (a non-negative integer that fits 31 bits).
  std::optional<std::int32_t> token_id(const char* key, const json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
      fail(key, "must be a non-negative integer token id, got " + v.dump());
      return std::nullopt;
    }
    return static_cast<std::int32_t>(v.get<std::int64_t>());
  }

  bool boolean(const char* key, bool fallback) {
    if (!present(key))
      return fallback;
    const json& v = doc_.at(key);
    if (!v.is_boolean()) {
      fail(key, "must be true or false, got " + v.dump());
      return fallback;
    }
    return v.get<bool>();
  }

  std::optional<std::string> string(const char* key) {
    if (!present(key))
      return std::nullopt;
    const json& v = doc_.at(key);
    if (!v.is_string()) {
      fail(key, "must be a string, got " + v.dump());
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  const json& at(const char* key) const { return doc_.at(key); }

  void fail(std::string_view key, const std::string& what) {
    if (!error_)
      error_ = source_ + ": key '" + prefix_ + std::string{key} + "' " + what;
  }

  const std::optional<std::string>& error() const noexcept { return error_; }

private:
  const json& doc_;
  const std::string& source_;
  std::string prefix_;
  std::optional<std::string> error_;
};

/// A list of `count` positive numbers under `key`, as a LongRoPE factor list.
std::vector<double> positive_list(key_reader& in, const char* key, std::size_t count) {
  std::vector<double> out;
  if (!in.present(key)) {
    in.fail(key, "is missing");
    return out;
  }
  const json& v = in.at(key);
  if (!v.is_array() || v.size() != count) {
    in.fail(key, "must be a list of " + std::to_string(count) +
                   " numbers (one per rotary pair: head_dim * partial_rotary_factor / 2), got " +
                   (v.is_array() ? std::to_string(v.size()) + " entries" : v.dump()));
    return out;
  }
  for (const json& f : v) {
    if (!f.is_number() || !(f.get<double>() > 0) || !std::isfinite(f.get<double>())) {
      in.fail(key, "must hold positive numbers, got " + f.dump());
      return {};
    }
    out.push_back(f.get<double>());
  }
  return out;
}

/// rope_scaling's "attention_factor" where it states one (positive), for
/// LongRoPE and YaRN; none where it does not.
std::optional<double> stated_attention_factor(key_reader& in) {
  if (!in.present("attention_factor"))
    return std::nullopt;
  const double f = in.number("attention_factor", 1.0);
  if (!in.error() && !(f > 0))
    in.fail("attention_factor", "must be positive");
  return f;
}

/// Reads "rope_scaling": llama3, longrope (also "su") or none. `c` holds
/// the rest of the config (its model_type, rotary_dim and
/// max_position_embeddings), `doc` the whole of it.
std::optional<std::string> read_rope_scaling(const json& v, const json& doc, const std::string& source,
                                             llama_config& c) {
  if (v.is_null())
    return std::nullopt;
  if (!v.is_object())
    return source + ": key 'rope_scaling' must be null or an object, got " + v.dump();
  key_reader in{v, source, "rope_scaling."};
  // Newer configs say rope_type, older ones type.
  const char* type_key = in.present("rope_type") ? "rope_type" : "type";
  const auto type = in.string(type_key);
  if (in.error())
    return in.error();
  if (!type)
    return source + ": key 'rope_scaling.rope_type' is missing";
  if (*type == "default")
    return std::nullopt;
  rope_scaling& out = c.rope;
  if (*type == "longrope" || *type == "su") {
    // Hugging Face's _compute_longrope_parameters: Phi-3 keeps the
    // pretrained context at the top level, and the attention factor then
    // follows max_position_embeddings over it.
    out.type = "longrope";
    const std::size_t pairs = c.rotary_dims() / 2;
    out.short_factor = positive_list(in, "short_factor", pairs);
    out.long_factor = positive_list(in, "long_factor", pairs);
    // The pretrained context: config.json's top-level key (Phi3Config's
    // default of 4,096 where a phi3 file leaves it out), whose ratio to
    // max_position_embeddings is the factor; without one,
    // max_position_embeddings and rope_scaling's factor.
    key_reader top{doc, source};
    std::uint32_t original = top.present("original_max_position_embeddings")
                               ? top.positive("original_max_position_embeddings", std::nullopt)
                               : (c.model_type == "phi3" ? 4096 : 0);
    if (!top.error() && original == 1)
      top.fail("original_max_position_embeddings", "must be at least 2");
    if (top.error())
      return top.error();
    double factor = 1.0;
    if (original != 0) {
      factor = static_cast<double>(c.max_position_embeddings) / original;
    } else {
      original = c.max_position_embeddings;
      factor = in.number("factor", 1.0);
    }
    out.original_max_position_embeddings = original;
    out.attention_factor = stated_attention_factor(in).value_or(longrope_attention_factor(factor, original));
    return in.error();
  }
  if (*type == "linear" || *type == "yarn") {
    out.type = *type;
    out.factor = in.number("factor", 1.0, true);
    if (!in.error() && !(out.factor >= 1.0 && out.factor <= 1e6))
      in.fail("factor", "must be from 1 to 1,000,000, got " + in.at("factor").dump());
    if (*type == "linear")
      return in.error();
    // Hugging Face's _compute_yarn_parameters: the pretrained context is
    // rope_scaling's own key, else max_position_embeddings; a beta of 0 or
    // null takes its default.
    out.original_max_position_embeddings =
      in.positive("original_max_position_embeddings", c.max_position_embeddings);
    const auto beta = [&](const char* key, double fallback) {
      const double b = in.number(key, fallback);
      if (!in.error() && b < 0)
        in.fail(key, "must be positive, got " + in.at(key).dump());
      return b == 0 ? fallback : b;
    };
    out.beta_fast = beta("beta_fast", 32.0);
    out.beta_slow = beta("beta_slow", 1.0);
    out.truncate = in.boolean("truncate", true);
    if (const auto stated = stated_attention_factor(in))
      out.attention_factor = *stated;
    else
      out.attention_factor = yarn_attention_factor(out.factor, in.number("mscale", 0.0),
                                                   in.number("mscale_all_dim", 0.0));
    return in.error();
  }
  if (*type == "dynamic")
    return source + ": key 'rope_scaling." + type_key +
           "' is \"dynamic\": unsupported rope scaling type (dynamic NTK changes every frequency as a "
           "sequence grows, so a cached key would not match a recomputed one; llama3, longrope, linear and "
           "yarn are supported)";
  if (*type != "llama3")
    return source + ": key 'rope_scaling." + type_key + "' is \"" + *type +
           "\": unsupported rope scaling type (llama3, longrope, linear and yarn are supported)";
  out.type = "llama3";
  out.factor = in.number("factor", 1.0, true);
  out.low_freq_factor = in.number("low_freq_factor", 1.0, true);
  out.high_freq_factor = in.number("high_freq_factor", 4.0, true);
  out.original_max_position_embeddings = in.positive("original_max_position_embeddings", std::nullopt);
  if (!in.error() && out.factor < 1.0)
    in.fail("factor", "must be at least 1, got " + std::to_string(out.factor));
  if (!in.error() && out.high_freq_factor <= out.low_freq_factor)
    in.fail("high_freq_factor", "must exceed low_freq_factor");
  return in.error();
}

std::variant<llama_config, std::string> parse_document(const json& doc, const std::string& source) {
  if (!doc.is_object())
    return source + ": expected a JSON object at the top level, got " + std::string{doc.type_name()};

  key_reader in{doc, source};
  llama_config c;
  if (const auto type = in.string("model_type")) {
    if (*type != "llama" && *type != "mistral" && *type != "qwen2" && *type != "qwen3" && *type != "phi3")
      in.fail("model_type", "is \"" + *type +
                              "\": unsupported model type (llama, mistral, qwen2, qwen3 and phi3 are supported)");
    c.model_type = *type;
  }
  if (const auto act = in.string("hidden_act"); act && *act != "silu")
    in.fail("hidden_act", "is \"" + *act + "\": unsupported (only silu, SwiGLU's, is supported)");
  if (in.boolean("mlp_bias", false))
    in.fail("mlp_bias", "is true: biases on the MLP's projections are not supported");
  if (c.model_type == "qwen2") {
    // Qwen2's attention always has biases on q, k and v, none on o.
    c.qkv_bias = true;
  } else if (c.model_type == "phi3") {
    // Phi-3's projections have no biases; q, k and v are one tensor, and
    // so are gate and up.
    c.fused_projections = true;
  } else {
    c.qkv_bias = c.o_bias = in.boolean("attention_bias", false);
  }
  c.qk_norm = c.model_type == "qwen3";
  if ((c.model_type == "qwen2" || c.model_type == "qwen3") && in.boolean("use_sliding_window", false))
    in.fail("use_sliding_window", "is true: sliding-window attention is not supported");
  if (in.error())
    return *in.error();

  c.hidden_size = in.positive("hidden_size", std::nullopt);
  c.intermediate_size = in.positive("intermediate_size", std::nullopt);
  c.num_layers = in.positive("num_hidden_layers", std::nullopt);
  c.num_heads = in.positive("num_attention_heads", std::nullopt);
  c.vocab_size = in.positive("vocab_size", std::nullopt);
  if (in.error())
    return *in.error();
  c.num_kv_heads = in.positive("num_key_value_heads", c.num_heads);
  const bool has_head_dim = in.present("head_dim");
  c.head_dim = in.positive("head_dim", 1);
  c.max_position_embeddings = in.positive("max_position_embeddings", 4096);
  // Mistral 7B v0.1 attends over a window of 4,096 tokens, Phi-3 mini 4K
  // over 2,047; later Mistrals say null. A window that holds the whole
  // context changes nothing.
  if ((c.model_type == "mistral" || c.model_type == "phi3") && in.present("sliding_window"))
    if (const auto w = in.positive("sliding_window", std::nullopt); !in.error() && w < c.max_position_embeddings)
      c.sliding_window = w;
  c.rms_norm_eps = in.positive_float("rms_norm_eps", 1e-6f);
  c.rope_theta = in.positive_float("rope_theta", 10000.0f);
  c.tie_word_embeddings = in.boolean("tie_word_embeddings", false);
  if (in.present("bos_token_id"))
    c.bos_token_id = in.token_id("bos_token_id", in.at("bos_token_id")).value_or(1);
  if (in.present("eos_token_id")) {
    const json& eos = in.at("eos_token_id");
    c.eos_token_ids.clear();
    if (eos.is_array()) {
      if (eos.empty())
        in.fail("eos_token_id", "must not be an empty list");
      for (const json& id : eos)
        if (const auto v = in.token_id("eos_token_id", id))
          c.eos_token_ids.push_back(*v);
    } else if (const auto v = in.token_id("eos_token_id", eos)) {
      c.eos_token_ids.push_back(*v);
    }
  }
  // Older configs say torch_dtype, newer ones dtype.
  const char* dtype_key = in.present("torch_dtype") ? "torch_dtype" : "dtype";
  if (const auto dtype = in.string(dtype_key)) {
    if (*dtype != "float32" && *dtype != "float16" && *dtype != "bfloat16")
      in.fail(dtype_key, "is \"" + *dtype + "\": unsupported (expected float32, float16 or bfloat16)");
    c.torch_dtype = *dtype;
  }
  if (in.error())
    return *in.error();

  if (!has_head_dim) {
    if (c.hidden_size % c.num_heads != 0)
      in.fail("hidden_size", "(" + std::to_string(c.hidden_size) +
                                 ") is not divisible by key 'num_attention_heads' (" +
                                 std::to_string(c.num_heads) + ")");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  // Phi-3's (Phi-4 mini's 0.75): the rotation turns the first
  // int(head_dim * factor) elements of each head, as Hugging Face's Phi3
  // attention does; other architectures apply it to the whole head.
  if (c.model_type == "phi3" && in.present("partial_rotary_factor") && !in.error()) {
    const double f = in.number("partial_rotary_factor", 1.0);
    const double dims = std::floor(static_cast<double>(c.head_dim) * f);
    if (!in.error() && (!(f > 0 && f <= 1) || dims < 2 || static_cast<std::uint32_t>(dims) % 2 != 0))
      in.fail("partial_rotary_factor", "is " + in.at("partial_rotary_factor").dump() +
                                           ": it must be in (0, 1] and turn an even number of each head's " +
                                           std::to_string(c.head_dim) + " elements");
    else if (!in.error() && static_cast<std::uint32_t>(dims) != c.head_dim)
      c.rotary_dim = static_cast<std::uint32_t>(dims);
  }
  if (in.error())
    return *in.error();
  if (doc.contains("rope_scaling"))
    if (auto err = read_rope_scaling(doc.at("rope_scaling"), doc, source, c))
      return *err;
  if (c.num_heads % c.num_kv_heads != 0)
    in.fail("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) +
                                       ") does not divide key 'num_attention_heads' (" +
                                       std::to_string(c.num_heads) + ")");
  if (in.error())
    return *in.error();
  return c;
}

/// The float as the shortest decimal that reads back as it, so 1e-6f prints
/// as 1e-06 rather than 9.99999997e-07.
double shortest(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, x);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

} // namespace

std::variant<llama_config, std::string> parse_llama_config(std::string_view json_text,
                                                           const std::string& source) {
  try {
    bool too_deep = false;
    const json doc = parse_bounded(json_text, too_deep, true);
    if (too_deep)
      return source + ": JSON nests deeper than 64 levels";
    return parse_document(doc, source);
  } catch (const json::exception& e) {
    return source + ": not valid JSON: " + e.what();
  } catch (const std::exception& e) {
    return source + ": cannot parse config: " + e.what();
  }
}

std::variant<llama_config, std::string> load_llama_config(const std::string& path) {
  try {
    std::ifstream file{path, std::ios::binary};
    if (!file)
      return path + ": cannot open config file";
    std::ostringstream text;
    text << file.rdbuf();
    if (file.bad())
      return path + ": cannot read config file";
    return parse_llama_config(text.str(), path);
  } catch (const std::exception& e) {
    return path + ": cannot read config file: " + e.what();
  }
}

double longrope_attention_factor(double factor, double original) {
  return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
}

double yarn_attention_factor(double factor, double mscale, double mscale_all_dim) {
  const auto m = [factor](double scale) { return factor <= 1.0 ? 1.0 : 0.1 * scale * std::log(factor) + 1.0; };
  return mscale != 0 && mscale_all_dim != 0 ? m(mscale) / m(mscale_all_dim) : m(1.0);
}

std::uint32_t llama_config::context_limit() const noexcept {
  const double original = rope.type == "yarn" ? rope.original_max_position_embeddings : max_position_embeddings;
  return stretched_context(max_position_embeddings, rope.type, original, rope.factor);
}

std::string to_config_json(const llama_config& c) {
  const bool qwen2 = c.model_type == "qwen2", qwen3 = c.model_type == "qwen3";
  json j = json::object();
  const bool phi3 = c.model_type == "phi3";
  j["architectures"] = json::array({qwen2                          ? "Qwen2ForCausalLM"
                                    : qwen3                        ? "Qwen3ForCausalLM"
                                    : c.model_type == "mistral" ? "MistralForCausalLM"
                                    : phi3                         ? "Phi3ForCausalLM"
                                                                   : "LlamaForCausalLM"});
  if (!qwen2 && !phi3)
    j["attention_bias"] = c.qkv_bias;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids.front();
  else
    j["eos_token_id"] = c.eos_token_ids;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.model_type == "llama")
    j["mlp_bias"] = false;
  if (qwen2 || qwen3)
    j["max_window_layers"] = c.num_layers;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  const bool longrope = c.rope.type == "longrope";
  if (longrope) // Phi-3's place for it; the attention factor follows from it
    j["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
  if (phi3 && c.rotary_dims() != c.head_dim) {
    // A factor that int(head_dim * factor) reads back as rotary_dim (the
    // plain ratio can land just below it).
    double f = static_cast<double>(c.rotary_dims()) / c.head_dim;
    if (std::floor(c.head_dim * f) != c.rotary_dims())
      f = (c.rotary_dims() + 0.5) / c.head_dim;
    j["partial_rotary_factor"] = f;
  }
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = shortest(c.rms_norm_eps);
  if (c.rope.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else if (longrope) {
    j["rope_scaling"] = {{"long_factor", c.rope.long_factor}, {"short_factor", c.rope.short_factor},
                         {"type", "longrope"}};
    // Phi3Config takes these three keys alone; an attention factor other
    // than the one max_position_embeddings implies is written too.
    const double original = c.rope.original_max_position_embeddings;
    if (c.rope.attention_factor != longrope_attention_factor(c.max_position_embeddings / original, original))
      j["rope_scaling"]["attention_factor"] = c.rope.attention_factor;
  } else if (c.rope.type == "linear") {
    j["rope_scaling"] = {{"factor", c.rope.factor}, {"rope_type", "linear"}};
  } else if (c.rope.type == "yarn") {
    j["rope_scaling"] = {{"attention_factor", c.rope.attention_factor},
                         {"beta_fast", c.rope.beta_fast},
                         {"beta_slow", c.rope.beta_slow},
                         {"factor", c.rope.factor},
                         {"original_max_position_embeddings", c.rope.original_max_position_embeddings},
                         {"rope_type", "yarn"}};
    if (!c.rope.truncate)
      j["rope_scaling"]["truncate"] = false;
  } else {
    j["rope_scaling"] = {{"factor", c.rope.factor},
                         {"high_freq_factor", c.rope.high_freq_factor},
                         {"low_freq_factor", c.rope.low_freq_factor},
                         {"original_max_position_embeddings", c.rope.original_max_position_embeddings},
                         {"rope_type", c.rope.type}};
  }
  j["rope_theta"] = shortest(c.rope_theta);
  if (c.sliding_window > 0 && (phi3 || c.model_type == "mistral"))
    j["sliding_window"] = c.sliding_window;
  else if (qwen2 || qwen3 || phi3 || c.model_type == "mistral")
    j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["use_cache"] = true;
  if (qwen2 || qwen3)
    j["use_sliding_window"] = false;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

} // namespace troupe::gpu
