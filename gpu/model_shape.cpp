#include "gpu/model_shape.hpp"

#include "gpu/json_bounded.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

namespace troupe::gpu {

// -- derived sizes -------------------------------------------------------------

std::uint64_t model_shape::q_dim() const noexcept {
  return std::uint64_t{num_heads} * head_dim;
}

std::uint64_t model_shape::kv_dim() const noexcept {
  return std::uint64_t{num_kv_heads} * head_dim;
}

std::uint64_t model_shape::attention_parameters_per_layer() const noexcept {
  const std::uint64_t h = hidden_size;
  // q: [hidden -> q_dim], k and v: [hidden -> kv_dim], o: [q_dim -> hidden].
  return h * q_dim() + 2 * h * kv_dim() + q_dim() * h;
}

std::uint64_t model_shape::mlp_parameters_per_layer() const noexcept {
  // gate and up: [hidden -> intermediate], down: [intermediate -> hidden].
  return 3 * std::uint64_t{hidden_size} * intermediate_size;
}

std::uint64_t model_shape::parameters_per_layer() const noexcept {
  // Two RMSNorm weight vectors: before attention and before the MLP.
  return attention_parameters_per_layer() + mlp_parameters_per_layer() + 2 * std::uint64_t{hidden_size};
}

std::uint64_t model_shape::embedding_parameters() const noexcept {
  return std::uint64_t{vocab_size} * hidden_size;
}

std::uint64_t model_shape::parameter_count() const noexcept {
  const std::uint64_t lm_head = tie_word_embeddings ? 0 : embedding_parameters();
  const std::uint64_t final_norm = hidden_size;
  return embedding_parameters() + num_layers * parameters_per_layer() + final_norm + lm_head;
}

std::uint64_t model_shape::layer_matmul_parameters() const noexcept {
  return num_layers * (attention_parameters_per_layer() + mlp_parameters_per_layer());
}

std::uint64_t model_shape::weight_bytes() const noexcept {
  return parameter_count() * dtype_bytes;
}

std::uint64_t model_shape::kv_bytes_per_token() const noexcept {
  return 2 * std::uint64_t{num_layers} * num_kv_heads * head_dim * dtype_bytes;
}

std::uint64_t model_shape::lora_parameters(std::uint32_t rank) const noexcept {
  const std::uint64_t h = hidden_size;
  // Each projection [in -> out] gets A: [in x rank] and B: [rank x out].
  const std::uint64_t per_rank = (h + q_dim())     // q
                                 + (h + kv_dim())  // k
                                 + (h + kv_dim())  // v
                                 + (q_dim() + h);  // o
  return std::uint64_t{num_layers} * rank * per_rank;
}

std::uint64_t model_shape::lora_adapter_bytes(std::uint32_t rank) const noexcept {
  return lora_parameters(rank) * dtype_bytes;
}

double model_shape::lora_flops_per_token(std::uint32_t rank) const noexcept {
  // x * A then (x A) * B: one multiply-add per adapter parameter.
  return 2.0 * static_cast<double>(lora_parameters(rank));
}

// -- presets -------------------------------------------------------------------

namespace {

const std::vector<model_shape>& presets() {
  // Values from the published config.json of meta-llama/Llama-2-{7,13}b-hf,
  // meta-llama/Meta-Llama-3-8B, mistralai/Mistral-7B-v0.3,
  // Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-8B, microsoft/Phi-3.5-mini-instruct
  // and microsoft/Phi-4-mini-instruct (the Qwens' q, k and v biases and q
  // and k norms are left out: thousands of parameters in billions).
  static const std::vector<model_shape> all{
    model_shape{.name = "llama-2-7b",
                .num_layers = 32,
                .hidden_size = 4096,
                .intermediate_size = 11008,
                .num_heads = 32,
                .num_kv_heads = 32,
                .head_dim = 128,
                .vocab_size = 32000,
                .max_context = 4096},
    model_shape{.name = "llama-2-13b",
                .num_layers = 40,
                .hidden_size = 5120,
                .intermediate_size = 13824,
                .num_heads = 40,
                .num_kv_heads = 40,
                .head_dim = 128,
                .vocab_size = 32000,
                .max_context = 4096},
    model_shape{.name = "llama-3-8b",
                .num_layers = 32,
                .hidden_size = 4096,
                .intermediate_size = 14336,
                .num_heads = 32,
                .num_kv_heads = 8,
                .head_dim = 128,
                .vocab_size = 128256,
                .max_context = 8192},
    model_shape{.name = "mistral-7b",
                .num_layers = 32,
                .hidden_size = 4096,
                .intermediate_size = 14336,
                .num_heads = 32,
                .num_kv_heads = 8,
                .head_dim = 128,
                .vocab_size = 32768,
                .max_context = 32768},
    model_shape{.name = "qwen2.5-7b",
                .num_layers = 28,
                .hidden_size = 3584,
                .intermediate_size = 18944,
                .num_heads = 28,
                .num_kv_heads = 4,
                .head_dim = 128,
                .vocab_size = 152064,
                .max_context = 32768},
    model_shape{.name = "qwen3-8b",
                .num_layers = 36,
                .hidden_size = 4096,
                .intermediate_size = 12288,
                .num_heads = 32,
                .num_kv_heads = 8,
                .head_dim = 128,
                .vocab_size = 151936,
                .max_context = 40960},
    // LongRoPE: a request growing past the pretrained 4,096 tokens is
    // recomputed there (rope_long_after).
    model_shape{.name = "phi-3.5-mini",
                .num_layers = 32,
                .hidden_size = 3072,
                .intermediate_size = 8192,
                .num_heads = 32,
                .num_kv_heads = 32,
                .head_dim = 96,
                .vocab_size = 32064,
                .max_context = 131072,
                .rope_long_after = 4096},
    model_shape{.name = "phi-4-mini",
                .num_layers = 32,
                .hidden_size = 3072,
                .intermediate_size = 8192,
                .num_heads = 24,
                .num_kv_heads = 8,
                .head_dim = 128,
                .vocab_size = 200064,
                .max_context = 131072,
                .tie_word_embeddings = true,
                .rope_long_after = 4096},
  };
  return all;
}

} // namespace

std::optional<model_shape> find_model_preset(std::string_view name) {
  for (const auto& shape : presets())
    if (shape.name == name)
      return shape;
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& shape : presets())
    names.push_back(shape.name);
  return names;
}

// -- config files ----------------------------------------------------------------

namespace {

using json = nlohmann::json;

/// Reads typed keys of one config object and keeps the first error, so the
/// caller can read every field and check once at the end.
class field_reader {
public:
  field_reader(const json& doc, const std::string& source) : doc_(doc), source_(source) {}

  /// A required positive integer that fits in 32 bits; 0 after an error.
  std::uint32_t required(const char* key) {
    if (!present(key)) {
      fail(key, "is missing");
      return 0;
    }
    return positive(key);
  }

  /// An optional positive integer; nullopt when absent or null.
  std::optional<std::uint32_t> optional(const char* key) {
    if (!present(key))
      return std::nullopt;
    return positive(key);
  }

  /// An optional string; nullopt when absent or null.
  std::optional<std::string> optional_string(const char* key) {
    if (!present(key))
      return std::nullopt;
    const json& value = doc_.at(key);
    if (!value.is_string()) {
      fail(key, "must be a string, got " + value.dump());
      return std::nullopt;
    }
    return value.get<std::string>();
  }

  /// An optional boolean; `fallback` when absent or null.
  bool optional_bool(const char* key, bool fallback) {
    if (!present(key))
      return fallback;
    const json& value = doc_.at(key);
    if (!value.is_boolean()) {
      fail(key, "must be true or false, got " + value.dump());
      return fallback;
    }
    return value.get<bool>();
  }

  /// Records an error about `key` unless one is already recorded.
  void fail(std::string_view key, const std::string& what) {
    if (!error_)
      error_ = source_ + ": key '" + std::string{key} + "' " + what;
  }

  /// The first error, if any.
  const std::optional<std::string>& error() const noexcept { return error_; }

private:
  bool present(const char* key) const { return doc_.contains(key) && !doc_.at(key).is_null(); }

  std::uint32_t positive(const char* key) {
    const json& value = doc_.at(key);
    if (!value.is_number_integer()) {
      fail(key, "must be a positive integer, got " + value.dump());
      return 0;
    }
    if (value.is_number_unsigned()) {
      const auto v = value.get<std::uint64_t>();
      if (v > std::numeric_limits<std::uint32_t>::max()) {
        fail(key, "is too large: " + value.dump());
        return 0;
      }
      if (v > 0)
        return static_cast<std::uint32_t>(v);
    }
    fail(key, "must be a positive integer, got " + value.dump());
    return 0;
  }

  const json& doc_;
  const std::string& source_;
  std::optional<std::string> error_;
};

std::optional<std::uint32_t> dtype_bytes_of(std::string_view dtype) {
  if (dtype == "float16" || dtype == "bfloat16")
    return 2;
  if (dtype == "float32")
    return 4;
  return std::nullopt;
}

model_shape_result parse_document(const json& doc, const std::string& source) {
  if (!doc.is_object())
    return source + ": expected a JSON object at the top level, got " + std::string{doc.type_name()};

  field_reader in{doc, source};
  model_shape shape;
  shape.num_layers = in.required("num_hidden_layers");
  shape.hidden_size = in.required("hidden_size");
  shape.intermediate_size = in.required("intermediate_size");
  shape.num_heads = in.required("num_attention_heads");
  const auto kv_heads = in.optional("num_key_value_heads");
  const auto head_dim = in.optional("head_dim");
  shape.vocab_size = in.required("vocab_size");
  shape.max_context = in.required("max_position_embeddings");
  shape.tie_word_embeddings = in.optional_bool("tie_word_embeddings", false);
  shape.name = in.optional_string("name").value_or(source);
  // Mistral 7B v0.1's and Phi-3 mini's window, read as llama_config reads it.
  if (const auto type = in.optional_string("model_type"); type && (*type == "mistral" || *type == "phi3"))
    if (const auto window = in.optional("sliding_window"); window && *window < shape.max_context)
      shape.sliding_window = *window;

  // LongRoPE (Phi-3.5 and Phi-4 mini): where a sequence's passes change
  // factors, the pretrained context, read as llama_config reads it (the
  // top-level key; Phi3Config's 4,096 where a phi3 file leaves it out; else
  // max_position_embeddings, past which nothing grows).
  if (doc.contains("rope_scaling") && doc.at("rope_scaling").is_object()) {
    const json& scaling = doc.at("rope_scaling");
    const json* type = scaling.contains("rope_type") ? &scaling.at("rope_type")
                       : scaling.contains("type")    ? &scaling.at("type")
                                                     : nullptr;
    if (type != nullptr && type->is_string() && (*type == "longrope" || *type == "su")) {
      const auto model_type = in.optional_string("model_type");
      shape.rope_long_after = in.optional("original_max_position_embeddings")
                                .value_or(model_type == "phi3" ? 4096 : shape.max_context);
    }
    // Linear and YaRN scaling stretch the pretrained context by their
    // factor: the server admits the stretched length where it is longer
    // (llama_config::context_limit).
    const json* factor = scaling.contains("factor") ? &scaling.at("factor") : nullptr;
    if (type != nullptr && type->is_string() && (*type == "linear" || *type == "yarn") && factor != nullptr &&
        factor->is_number() && factor->get<double>() > 1) {
      const std::string where = source + " rope_scaling";
      field_reader rope{scaling, where}; // keeps a reference to `where`
      const double original = *type == "yarn" ? rope.optional("original_max_position_embeddings").value_or(shape.max_context)
                                              : shape.max_context;
      shape.max_context = stretched_context(shape.max_context, type->get<std::string>(), original, factor->get<double>());
    }
  }

  // Older configs say torch_dtype, newer ones dtype; both mean the same.
  const bool has_torch_dtype = doc.contains("torch_dtype") && !doc.at("torch_dtype").is_null();
  const char* dtype_key = has_torch_dtype ? "torch_dtype" : "dtype";
  if (const auto dtype = in.optional_string(dtype_key)) {
    if (const auto bytes = dtype_bytes_of(*dtype))
      shape.dtype_bytes = *bytes;
    else
      in.fail(dtype_key, "has unsupported value \"" + *dtype + "\" (expected float16, bfloat16 or float32)");
  }
  if (in.error())
    return *in.error();

  shape.num_kv_heads = kv_heads.value_or(shape.num_heads);
  if (head_dim) {
    shape.head_dim = *head_dim;
  } else if (shape.hidden_size % shape.num_heads != 0) {
    // Only a derived head_dim needs the division to be exact; models such as
    // Gemma give head_dim explicitly and may have q_dim != hidden_size.
    in.fail("hidden_size", "(" + std::to_string(shape.hidden_size) +
                               ") is not divisible by key 'num_attention_heads' (" +
                               std::to_string(shape.num_heads) + ")");
  } else {
    shape.head_dim = shape.hidden_size / shape.num_heads;
  }
  if (shape.num_heads % shape.num_kv_heads != 0)
    in.fail("num_key_value_heads", "(" + std::to_string(shape.num_kv_heads) +
                                       ") does not divide key 'num_attention_heads' (" +
                                       std::to_string(shape.num_heads) + ")");
  if (in.error())
    return *in.error();
  return shape;
}

} // namespace

std::uint32_t stretched_context(std::uint32_t max_positions, std::string_view type, double original, double factor) {
  if (type != "linear" && type != "yarn")
    return max_positions;
  const double stretched = original * factor;
  if (!(stretched > max_positions))
    return max_positions;
  return stretched >= std::numeric_limits<std::uint32_t>::max() ? std::numeric_limits<std::uint32_t>::max()
                                                                : static_cast<std::uint32_t>(stretched);
}

model_shape_result parse_model_shape(std::string_view json_text, const std::string& source) {
  try {
    bool too_deep = false;
    const json doc = detail::parse_bounded(json_text, too_deep, true);
    if (too_deep)
      return source + ": JSON nested deeper than " + std::to_string(detail::max_json_depth)
             + " levels";
    return parse_document(doc, source);
  } catch (const json::exception& e) {
    return source + ": not valid JSON: " + e.what();
  } catch (const std::exception& e) {
    return source + ": cannot parse model shape: " + e.what();
  }
}

model_shape_result load_model_shape(const std::string& path) {
  try {
    std::ifstream file{path, std::ios::binary};
    if (!file)
      return "cannot open model shape file '" + path + "'";
    std::ostringstream text;
    text << file.rdbuf();
    if (file.bad())
      return "cannot read model shape file '" + path + "'";
    return parse_model_shape(text.str(), path);
  } catch (const std::exception& e) {
    return "cannot read model shape file '" + path + "': " + e.what();
  }
}

} // namespace troupe::gpu
