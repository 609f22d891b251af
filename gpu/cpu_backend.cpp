#include "gpu/cpu_backend.hpp"

#include "gpu/sampling.hpp"
#include "gpu/sp_tokenizer.hpp"

#include <chrono>

namespace troupe::gpu {

std::variant<std::unique_ptr<cpu_backend>, std::string>
cpu_backend::open(const std::string& model_dir, std::uint64_t pages, std::uint32_t page_tokens,
                  const std::vector<std::pair<std::uint32_t, std::string>>& adapters) {
  auto weights = load_llama(model_dir);
  if (auto* err = std::get_if<std::string>(&weights))
    return *err;
  auto& w = std::get<llama_weights>(weights);
  const auto config = w.config;
  const auto eos = config.eos_token_ids.empty() ? -1 : config.eos_token_ids.front();
  auto tok = sp_tokenizer::load(model_dir + "/tokenizer.model", config.bos_token_id, eos);
  if (auto* err = std::get_if<std::string>(&tok))
    return *err;
  std::unique_ptr<cpu_backend> b{new cpu_backend};
  b->tokenizer_ = std::move(std::get<std::unique_ptr<sp_tokenizer>>(tok));
  if (b->tokenizer_->vocab_size() > static_cast<std::int32_t>(config.vocab_size))
    return model_dir + "/tokenizer.model: " + std::to_string(b->tokenizer_->vocab_size())
           + " pieces, but config.json's vocab_size is " + std::to_string(config.vocab_size);
  for (const auto& [id, dir] : adapters) {
    auto a = load_peft_adapter(dir, config);
    if (auto* err = std::get_if<std::string>(&a))
      return *err;
    b->adapters_.emplace(id, std::move(std::get<lora_adapter>(a)));
  }
  b->model_ = std::make_unique<cpu_model>(std::move(w), pages, page_tokens);
  return b;
}

step_result cpu_backend::run_step(std::span<const step_entry> batch) {
  const auto started = std::chrono::steady_clock::now();
  step_result out;
  out.tokens.assign(batch.size(), -1);
  std::vector<cpu_sequence> seqs;
  std::vector<std::size_t> index; // seqs[i] runs batch[index[i]]
  seqs.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& e = batch[i];
    cpu_sequence s;
    s.tokens = e.tokens;
    s.start_pos = e.context_tokens;
    s.pages = e.pages;
    if (e.adapter_id != 0) {
      auto a = adapters_.find(e.adapter_id);
      if (a == adapters_.end())
        continue; // stays -1: the request ends with an error
      s.adapter = &a->second;
    }
    seqs.push_back(s);
    index.push_back(i);
  }
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  auto logits = model_->forward(seqs);
  if (logits.size() == seqs.size() * vocab) {
    for (std::size_t k = 0; k < seqs.size(); ++k) {
      const auto& e = batch[index[k]];
      const std::span<const float> row{logits.data() + k * vocab, vocab};
      out.tokens[index[k]] = sample_token(row, {e.temperature, e.top_p, e.top_k}, e.seed,
                                          e.output_index);
    }
  }
  out.device_seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

double cpu_backend::transfer_seconds(std::uint64_t bytes) const {
  // A host-to-host copy at a conservative 10 GB/s.
  return static_cast<double>(bytes) / 10e9;
}

} // namespace troupe::gpu
