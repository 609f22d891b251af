// A Hugging Face Llama checkpoint (config.json plus safetensors): its
// tensors, checked against the config and visited one at a time, or loaded
// whole into fp32 host memory.
#include "gpu/llama_weights.hpp"

#include "gpu/safetensors.hpp"

#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

namespace troupe::gpu {

std::string llama_tensor_name(std::uint32_t layer, std::string_view module, std::string_view kind) {
  return "model.layers." + std::to_string(layer) + "." + std::string{module} + "." + std::string{kind};
}

std::vector<llama_tensor_ref> llama_checkpoint_tensors(const llama_config& c) {
  const std::uint64_t hidden = c.hidden_size;
  const std::uint64_t q_dim = std::uint64_t{c.num_heads} * c.head_dim;
  const std::uint64_t kv_dim = std::uint64_t{c.num_kv_heads} * c.head_dim;
  const std::uint64_t inter = c.intermediate_size;
  const std::uint64_t vocab = c.vocab_size;
  std::vector<llama_tensor_ref> t;
  t.push_back({llama_tensor::embed, 0, "model.embed_tokens.weight", {vocab, hidden}, {}, 0});
  for (std::uint32_t i = 0; i < c.num_layers; ++i) {
    const auto add = [&](llama_tensor w, std::string_view module, std::vector<std::uint64_t> shape) {
      t.push_back({w, i, llama_tensor_name(i, module), std::move(shape), {}, 0});
    };
    // Rows [row_begin, row_begin + rows) of `module`, stored as [total, cols].
    const auto part = [&](llama_tensor w, std::string_view module, std::uint64_t rows, std::uint64_t cols,
                          std::uint64_t row_begin, std::uint64_t total) {
      t.push_back({w, i, llama_tensor_name(i, module), {rows, cols}, {total, cols}, row_begin});
    };
    add(llama_tensor::attn_norm, "input_layernorm", {hidden});
    if (c.fused_projections) {
      const std::uint64_t qkv = q_dim + 2 * kv_dim;
      part(llama_tensor::q, "self_attn.qkv_proj", q_dim, hidden, 0, qkv);
      part(llama_tensor::k, "self_attn.qkv_proj", kv_dim, hidden, q_dim, qkv);
      part(llama_tensor::v, "self_attn.qkv_proj", kv_dim, hidden, q_dim + kv_dim, qkv);
    } else {
      add(llama_tensor::q, "self_attn.q_proj", {q_dim, hidden});
      add(llama_tensor::k, "self_attn.k_proj", {kv_dim, hidden});
      add(llama_tensor::v, "self_attn.v_proj", {kv_dim, hidden});
    }
    add(llama_tensor::o, "self_attn.o_proj", {hidden, q_dim});
    add(llama_tensor::mlp_norm, "post_attention_layernorm", {hidden});
    if (c.fused_projections) { // gate's rows, then up's
      part(llama_tensor::gate, "mlp.gate_up_proj", inter, hidden, 0, 2 * inter);
      part(llama_tensor::up, "mlp.gate_up_proj", inter, hidden, inter, 2 * inter);
    } else {
      add(llama_tensor::gate, "mlp.gate_proj", {inter, hidden});
      add(llama_tensor::up, "mlp.up_proj", {inter, hidden});
    }
    add(llama_tensor::down, "mlp.down_proj", {hidden, inter});
    const auto bias = [&](llama_tensor w, std::string_view module, std::uint64_t n) {
      t.push_back({w, i, llama_tensor_name(i, module, "bias"), {n}, {}, 0});
    };
    if (c.qkv_bias) {
      bias(llama_tensor::q_bias, "self_attn.q_proj", q_dim);
      bias(llama_tensor::k_bias, "self_attn.k_proj", kv_dim);
      bias(llama_tensor::v_bias, "self_attn.v_proj", kv_dim);
    }
    if (c.o_bias)
      bias(llama_tensor::o_bias, "self_attn.o_proj", hidden);
    if (c.qk_norm) {
      add(llama_tensor::q_norm, "self_attn.q_norm", {c.head_dim});
      add(llama_tensor::k_norm, "self_attn.k_norm", {c.head_dim});
    }
  }
  t.push_back({llama_tensor::final_norm, 0, "model.norm.weight", {hidden}, {}, 0});
  if (!c.tie_word_embeddings)
    t.push_back({llama_tensor::lm_head, 0, "lm_head.weight", {vocab, hidden}, {}, 0});
  return t;
}

std::vector<named_tensor> llama_checkpoint_named(
  const llama_config& c, const std::function<std::vector<float>(const llama_tensor_ref&)>& values) {
  std::vector<named_tensor> out;
  for (const auto& t : llama_checkpoint_tensors(c)) {
    auto v = values(t);
    if (t.stored_shape.empty()) {
      out.push_back({t.name, t.shape, std::move(v)});
      continue;
    }
    // A part of a stored tensor: its parts come in row order, one after another.
    if (t.row_begin == 0)
      out.push_back({t.name, t.stored_shape, {}});
    out.back().values.insert(out.back().values.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float>& llama_weights::tensor(llama_tensor which, std::uint32_t layer) {
  return const_cast<std::vector<float>&>(std::as_const(*this).tensor(which, layer));
}

const std::vector<float>& llama_weights::tensor(llama_tensor which, std::uint32_t layer) const {
  const auto at = [&]() -> const llama_layer_weights& {
    if (layer >= layers.size())
      throw std::out_of_range("llama_weights: layer " + std::to_string(layer) + " of " +
                              std::to_string(layers.size()));
    return layers[layer];
  };
  switch (which) {
    case llama_tensor::embed: return embed;
    case llama_tensor::final_norm: return final_norm;
    case llama_tensor::lm_head: return lm_head;
    case llama_tensor::attn_norm: return at().attn_norm;
    case llama_tensor::q: return at().q;
    case llama_tensor::k: return at().k;
    case llama_tensor::v: return at().v;
    case llama_tensor::o: return at().o;
    case llama_tensor::mlp_norm: return at().mlp_norm;
    case llama_tensor::gate: return at().gate;
    case llama_tensor::up: return at().up;
    case llama_tensor::down: return at().down;
    case llama_tensor::q_bias: return at().q_bias;
    case llama_tensor::k_bias: return at().k_bias;
    case llama_tensor::v_bias: return at().v_bias;
    case llama_tensor::o_bias: return at().o_bias;
    case llama_tensor::q_norm: return at().q_norm;
    case llama_tensor::k_norm: return at().k_norm;
  }
  throw std::invalid_argument("llama_weights: tensor " + std::to_string(static_cast<int>(which)));
}

std::optional<std::string>
visit_llama_tensors(const std::string& model_dir, const llama_config& c,
                    const std::function<void(llama_tensor, std::uint32_t, const tensor_view&)>& visit) {
  auto opened = safetensors_archive::open(model_dir);
  if (auto* err = std::get_if<std::string>(&opened))
    return *err;
  const auto& archive = std::get<safetensors_archive>(opened);
  const auto tensors = llama_checkpoint_tensors(c);
  std::vector<tensor_view> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) {
    auto v = archive.get(t.name, t.stored_shape.empty() ? t.shape : t.stored_shape);
    if (auto* err = std::get_if<std::string>(&v)) {
      if (t.which == llama_tensor::lm_head && archive.find(t.name) == nullptr)
        *err += " (and config.json has tie_word_embeddings false)";
      return *err;
    }
    tensor_view view = *std::get<const tensor_view*>(v);
    if (!t.stored_shape.empty()) { // its rows of the stored tensor
      const std::uint64_t row_bytes = t.shape[1] * dtype_size(view.type);
      view.name += " rows " + std::to_string(t.row_begin) + ".." + std::to_string(t.row_begin + t.shape[0]);
      view.shape = t.shape;
      view.data = view.data.subspan(t.row_begin * row_bytes, t.shape[0] * row_bytes);
    }
    views.push_back(std::move(view));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    visit(tensors[i].which, tensors[i].layer, views[i]);
  return std::nullopt;
}

std::variant<llama_weights, std::string> load_llama(const std::string& model_dir) {
  try {
    const std::filesystem::path dir{model_dir};
    auto config = load_llama_config((dir / "config.json").string());
    if (auto* err = std::get_if<std::string>(&config))
      return *err;
    llama_weights w;
    w.config = std::get<llama_config>(config);
    w.layers.resize(w.config.num_layers);
    const auto problem = visit_llama_tensors(
      model_dir, w.config,
      [&](llama_tensor which, std::uint32_t layer, const tensor_view& t) { w.tensor(which, layer) = to_f32(t); });
    if (problem)
      return *problem;
    return w;
  } catch (const std::exception& e) {
    return model_dir + ": cannot load Llama weights: " + e.what();
  }
}

} // namespace troupe::gpu
