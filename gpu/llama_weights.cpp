// Loading a Hugging Face Llama checkpoint (config.json plus safetensors) into
// fp32 host memory, checking every tensor's shape against the config.
#include "gpu/llama_weights.hpp"

#include "gpu/safetensors.hpp"

#include <exception>
#include <filesystem>

namespace troupe::gpu {

std::string llama_tensor_name(std::uint32_t layer, std::string_view module) {
  return "model.layers." + std::to_string(layer) + "." + std::string{module} + ".weight";
}

namespace {

/// Reads tensors into fp32 and keeps the first error.
class tensor_reader {
public:
  explicit tensor_reader(const safetensors_archive& archive) : archive_(archive) {}

  void read(const std::string& name, std::initializer_list<std::uint64_t> shape, std::vector<float>& out) {
    if (error_)
      return;
    auto r = archive_.read_f32(name, std::span<const std::uint64_t>{shape.begin(), shape.size()});
    if (auto* err = std::get_if<std::string>(&r))
      error_ = *err;
    else
      out = std::move(std::get<std::vector<float>>(r));
  }

  const std::optional<std::string>& error() const noexcept { return error_; }

private:
  const safetensors_archive& archive_;
  std::optional<std::string> error_;
};

} // namespace

std::variant<llama_weights, std::string> load_llama(const std::string& model_dir) {
  try {
    const std::filesystem::path dir{model_dir};
    auto config = load_llama_config((dir / "config.json").string());
    if (auto* err = std::get_if<std::string>(&config))
      return *err;
    auto opened = safetensors_archive::open(model_dir);
    if (auto* err = std::get_if<std::string>(&opened))
      return *err;
    const auto& archive = std::get<safetensors_archive>(opened);

    llama_weights w;
    w.config = std::get<llama_config>(config);
    const llama_config& c = w.config;
    const std::uint64_t hidden = c.hidden_size;
    const std::uint64_t q_dim = std::uint64_t{c.num_heads} * c.head_dim;
    const std::uint64_t kv_dim = std::uint64_t{c.num_kv_heads} * c.head_dim;
    const std::uint64_t inter = c.intermediate_size;
    const std::uint64_t vocab = c.vocab_size;

    tensor_reader in{archive};
    in.read("model.embed_tokens.weight", {vocab, hidden}, w.embed);
    w.layers.resize(c.num_layers);
    for (std::uint32_t i = 0; i < c.num_layers && !in.error(); ++i) {
      auto& l = w.layers[i];
      in.read(llama_tensor_name(i, "input_layernorm"), {hidden}, l.attn_norm);
      in.read(llama_tensor_name(i, "self_attn.q_proj"), {q_dim, hidden}, l.q);
      in.read(llama_tensor_name(i, "self_attn.k_proj"), {kv_dim, hidden}, l.k);
      in.read(llama_tensor_name(i, "self_attn.v_proj"), {kv_dim, hidden}, l.v);
      in.read(llama_tensor_name(i, "self_attn.o_proj"), {hidden, q_dim}, l.o);
      in.read(llama_tensor_name(i, "post_attention_layernorm"), {hidden}, l.mlp_norm);
      in.read(llama_tensor_name(i, "mlp.gate_proj"), {inter, hidden}, l.gate);
      in.read(llama_tensor_name(i, "mlp.up_proj"), {inter, hidden}, l.up);
      in.read(llama_tensor_name(i, "mlp.down_proj"), {hidden, inter}, l.down);
    }
    in.read("model.norm.weight", {hidden}, w.final_norm);
    if (!c.tie_word_embeddings)
      in.read("lm_head.weight", {vocab, hidden}, w.lm_head);
    if (in.error()) {
      if (!c.tie_word_embeddings && !archive.find("lm_head.weight") && w.lm_head.empty() &&
          in.error()->find("'lm_head.weight'") != std::string::npos)
        return *in.error() + " (and config.json has tie_word_embeddings false)";
      return *in.error();
    }
    return w;
  } catch (const std::exception& e) {
    return model_dir + ": cannot load Llama weights: " + e.what();
  }
}

} // namespace troupe::gpu
