// Loading a PEFT LoRA adapter: adapter_config.json (rank, alpha, targets,
// rsLoRA; unsupported PEFT features are refused by name) and the A/B
// matrices of adapter_model.safetensors, shape-checked against the base.
#include "gpu/lora.hpp"

#include "gpu/safetensors.hpp"

#include "gpu/json_bounded.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace troupe::gpu {

std::string_view to_string(lora_target x) noexcept {
  switch (x) {
    case lora_target::q:
      return "q_proj";
    case lora_target::k:
      return "k_proj";
    case lora_target::v:
      return "v_proj";
    case lora_target::o:
      return "o_proj";
    case lora_target::gate:
      return "gate_proj";
    case lora_target::up:
      return "up_proj";
    case lora_target::down:
      return "down_proj";
  }
  return "?";
}

std::string peft_tensor_name(std::uint32_t layer, lora_target t, char matrix) {
  const bool attn = t == lora_target::q || t == lora_target::k || t == lora_target::v || t == lora_target::o;
  return peft_tensor_name(layer, (attn ? "self_attn." : "mlp.") + std::string{to_string(t)}, matrix);
}

std::string peft_tensor_name(std::uint32_t layer, std::string_view module, char matrix) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + std::string{module} + ".lora_" +
         std::string(1, matrix) + ".weight";
}

namespace {

using json = nlohmann::json;

using detail::parse_bounded;

std::optional<lora_target> parse_target(std::string_view name) {
  // PEFT matches by suffix, so "self_attn.q_proj" names q_proj too.
  if (const auto dot = name.rfind('.'); dot != std::string_view::npos)
    name = name.substr(dot + 1);
  for (std::size_t t = 0; t < lora_target_count; ++t)
    if (to_string(static_cast<lora_target>(t)) == name)
      return static_cast<lora_target>(t);
  return std::nullopt;
}

/// [in, out] features of target `t` for the base model `c`.
std::pair<std::uint64_t, std::uint64_t> dims(lora_target t, const llama_config& c) {
  const std::uint64_t hidden = c.hidden_size;
  const std::uint64_t q_dim = std::uint64_t{c.num_heads} * c.head_dim;
  const std::uint64_t kv_dim = std::uint64_t{c.num_kv_heads} * c.head_dim;
  const std::uint64_t inter = c.intermediate_size;
  switch (t) {
    case lora_target::q:
      return {hidden, q_dim};
    case lora_target::k:
    case lora_target::v:
      return {hidden, kv_dim};
    case lora_target::o:
      return {q_dim, hidden};
    case lora_target::gate:
    case lora_target::up:
      return {hidden, inter};
    case lora_target::down:
      return {inter, hidden};
  }
  return {0, 0};
}

bool present(const json& doc, const char* key) {
  return doc.contains(key) && !doc.at(key).is_null();
}

/// True when `v` is a non-empty list or object (PEFT writes {} or [] when unused).
bool non_empty(const json& v) {
  return (v.is_object() || v.is_array()) ? !v.empty() : !v.is_null();
}

/// Parses adapter_config.json into everything but the matrices.
std::variant<lora_adapter, std::string> parse_adapter_config(const json& doc, const std::string& src) {
  const auto key_error = [&src](const char* key, const std::string& what) {
    return src + ": key '" + key + "' " + what;
  };
  if (!doc.is_object())
    return src + ": expected a JSON object at the top level";
  if (present(doc, "peft_type") && doc["peft_type"] != "LORA")
    return key_error("peft_type", "is " + doc["peft_type"].dump() + ": only LORA is supported");
  if (present(doc, "bias") && doc["bias"] != "none")
    return key_error("bias", "is " + doc["bias"].dump() + ": unsupported (only \"none\")");
  if (present(doc, "fan_in_fan_out") && doc["fan_in_fan_out"] != false)
    return key_error("fan_in_fan_out", "is " + doc["fan_in_fan_out"].dump() + ": unsupported");
  if (present(doc, "use_dora") && doc["use_dora"] != false)
    return key_error("use_dora", "is " + doc["use_dora"].dump() + ": DoRA is unsupported");
  // Even an empty list means "adapt only these layers" to PEFT.
  if (present(doc, "layers_to_transform"))
    return key_error("layers_to_transform", "is " + doc["layers_to_transform"].dump() + ": unsupported");
  for (const char* key : {"layers_pattern", "rank_pattern", "alpha_pattern", "modules_to_save"})
    if (present(doc, key) && non_empty(doc[key]))
      return key_error(key, "is " + doc[key].dump() + ": unsupported");

  lora_adapter a;
  if (!present(doc, "r"))
    return key_error("r", "is missing");
  if (!doc["r"].is_number_unsigned() || doc["r"].get<std::uint64_t>() == 0 ||
      doc["r"].get<std::uint64_t>() > 65536)
    return key_error("r", "must be a positive integer, got " + doc["r"].dump());
  a.rank = static_cast<std::uint32_t>(doc["r"].get<std::uint64_t>());
  if (!present(doc, "lora_alpha"))
    return key_error("lora_alpha", "is missing");
  if (!doc["lora_alpha"].is_number() || !std::isfinite(doc["lora_alpha"].get<double>()))
    return key_error("lora_alpha", "must be a number, got " + doc["lora_alpha"].dump());
  a.alpha = static_cast<float>(doc["lora_alpha"].get<double>());
  if (present(doc, "use_rslora")) {
    if (!doc["use_rslora"].is_boolean())
      return key_error("use_rslora", "must be true or false, got " + doc["use_rslora"].dump());
    a.use_rslora = doc["use_rslora"].get<bool>();
  }
  a.scale = a.use_rslora ? a.alpha / std::sqrt(static_cast<float>(a.rank))
                         : a.alpha / static_cast<float>(a.rank);

  if (!present(doc, "target_modules"))
    return key_error("target_modules", "is missing");
  const json& targets = doc["target_modules"];
  std::vector<std::string> names;
  if (targets.is_string()) {
    names.push_back(targets.get<std::string>());
  } else if (targets.is_array()) {
    for (const json& t : targets) {
      if (!t.is_string())
        return key_error("target_modules", "holds " + t.dump() + ", not a module name");
      names.push_back(t.get<std::string>());
    }
  } else {
    return key_error("target_modules", "must be a list of module names, got " + targets.dump());
  }
  for (const auto& name : names) {
    if (name == "all-linear") {
      a.targets.fill(true);
      continue;
    }
    // Phi-3's fused projections: one adapter over q, k and v, one over
    // gate and up.
    const std::string_view last = std::string_view{name}.substr(name.rfind('.') + 1);
    if (last == "qkv_proj" || last == "gate_up_proj") {
      if (last == "qkv_proj")
        for (const auto t : {lora_target::q, lora_target::k, lora_target::v})
          a.targets[static_cast<std::size_t>(t)] = true;
      else
        for (const auto t : {lora_target::gate, lora_target::up})
          a.targets[static_cast<std::size_t>(t)] = true;
      a.names_fused = true;
      continue;
    }
    const auto t = parse_target(name);
    if (!t)
      return key_error("target_modules", "names unsupported target module '" + name +
                                             "' (supported: q_proj, k_proj, v_proj, o_proj, "
                                             "gate_proj, up_proj, down_proj, all-linear; "
                                             "qkv_proj and gate_up_proj for Phi-3)");
    a.targets[static_cast<std::size_t>(*t)] = true;
    a.names_separate = a.names_separate || (*t != lora_target::o && *t != lora_target::down);
  }
  if (a.names_fused && a.names_separate)
    return key_error("target_modules", "names both fused projections (qkv_proj, gate_up_proj) and separate "
                                       "ones (q_proj, k_proj, v_proj, gate_proj, up_proj): a model has one kind");
  if (std::none_of(a.targets.begin(), a.targets.end(), [](bool b) { return b; }))
    return key_error("target_modules", "is empty");
  return a;
}

} // namespace

std::variant<lora_adapter, std::string> read_peft_config(const std::string& dir) {
  try {
    const std::string config_path = (std::filesystem::path{dir} / "adapter_config.json").string();
    std::ifstream file{config_path, std::ios::binary};
    if (!file)
      return config_path + ": cannot open adapter config";
    std::ostringstream text;
    text << file.rdbuf();
    bool too_deep = false;
    const std::string config_text = text.str();
    const json doc = parse_bounded(config_text, too_deep, false);
    if (doc.is_discarded())
      return config_path + ": not valid JSON";
    if (too_deep)
      return config_path + ": JSON nests deeper than 64 levels";
    return parse_adapter_config(doc, config_path);
  } catch (const std::exception& e) {
    return dir + ": " + e.what();
  }
}

std::variant<lora_adapter, std::string> load_peft_adapter(const std::string& dir,
                                                          const llama_config& base) {
  try {
    const std::filesystem::path root{dir};
    const std::string config_path = (root / "adapter_config.json").string();
    auto parsed = read_peft_config(dir);
    if (auto* err = std::get_if<std::string>(&parsed))
      return *err;
    lora_adapter a = std::move(std::get<lora_adapter>(parsed));

    const std::string weights_path = (root / "adapter_model.safetensors").string();
    auto opened = safetensors_archive::open(weights_path);
    if (auto* err = std::get_if<std::string>(&opened))
      return *err;
    const auto& archive = std::get<safetensors_archive>(opened);

    if (base.fused_projections && a.names_separate)
      return config_path + ": key 'target_modules' names q_proj, k_proj, v_proj, gate_proj or up_proj, but the "
                           "base model (" + base.model_type + ") stores them fused, as qkv_proj and gate_up_proj";
    if (!base.fused_projections && a.names_fused)
      return config_path + ": key 'target_modules' names qkv_proj or gate_up_proj, which the base model (" +
             base.model_type + ") does not have (it has q_proj, k_proj, v_proj, gate_proj and up_proj)";

    std::set<std::string> expected;
    // One fused adapter's A and B (Phi-3's qkv_proj: B's rows q's, then k's
    // and v's), each part given A and its rows of B.
    const auto read_fused = [&](std::uint32_t i, std::string_view module,
                                std::initializer_list<lora_target> parts) -> std::optional<std::string> {
      const std::uint64_t in = dims(*parts.begin(), base).first;
      std::uint64_t out = 0;
      for (const auto t : parts)
        out += dims(t, base).second;
      const std::uint64_t shape_a[] = {a.rank, in};
      const std::uint64_t shape_b[] = {out, a.rank};
      std::vector<float> m[2];
      for (const char which : {'A', 'B'}) {
        const std::string name = peft_tensor_name(i, module, which);
        expected.insert(name);
        auto r = archive.read_f32(name, which == 'A' ? std::span<const std::uint64_t>{shape_a}
                                                     : std::span<const std::uint64_t>{shape_b});
        if (auto* err = std::get_if<std::string>(&r))
          return *err;
        m[which == 'B'] = std::move(std::get<std::vector<float>>(r));
      }
      std::size_t row = 0;
      for (const auto t : parts) {
        auto& part = a.layers[i][static_cast<std::size_t>(t)];
        const std::size_t rows = dims(t, base).second;
        part.a = m[0];
        part.b.assign(m[1].begin() + static_cast<std::ptrdiff_t>(row * a.rank),
                      m[1].begin() + static_cast<std::ptrdiff_t>((row + rows) * a.rank));
        row += rows;
      }
      return std::nullopt;
    };
    a.layers.resize(base.num_layers);
    for (std::uint32_t i = 0; i < base.num_layers; ++i) {
      for (std::size_t ti = 0; ti < lora_target_count; ++ti) {
        if (!a.targets[ti])
          continue;
        const auto t = static_cast<lora_target>(ti);
        if (base.fused_projections && (t == lora_target::q || t == lora_target::gate)) {
          const bool qkv = t == lora_target::q;
          if (auto err = qkv ? read_fused(i, "self_attn.qkv_proj", {lora_target::q, lora_target::k, lora_target::v})
                             : read_fused(i, "mlp.gate_up_proj", {lora_target::gate, lora_target::up}))
            return *err;
          continue;
        }
        if (base.fused_projections && (t == lora_target::k || t == lora_target::v || t == lora_target::up))
          continue; // read with its fused tensor
        const auto [in, out] = dims(t, base);
        const std::uint64_t shape_a[] = {a.rank, in};
        const std::uint64_t shape_b[] = {out, a.rank};
        auto& m = a.layers[i][ti];
        for (const char which : {'A', 'B'}) {
          const std::string name = peft_tensor_name(i, t, which);
          expected.insert(name);
          auto r = archive.read_f32(name, which == 'A' ? std::span<const std::uint64_t>{shape_a}
                                                       : std::span<const std::uint64_t>{shape_b});
          if (auto* err = std::get_if<std::string>(&r))
            return *err;
          (which == 'A' ? m.a : m.b) = std::move(std::get<std::vector<float>>(r));
        }
      }
    }
    // Any other LoRA tensor is a target or layer this loader would silently drop.
    for (const auto& name : archive.names())
      if (!expected.count(name) && name.find("lora_") != std::string::npos)
        return weights_path + ": tensor '" + name + "' is not one of the targets in " + config_path;
    return a;
  } catch (const std::exception& e) {
    return dir + ": cannot load adapter: " + e.what();
  }
}

} // namespace troupe::gpu
