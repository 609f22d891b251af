// The fp32 reference forward pass of a Llama model on the CPU, batched over
// sequences in prefill and decode, with the KV cache in fixed-size pages and
// unmerged LoRA per sequence. A sequence may keep a hidden cache instead
// (Apt-Serve): per layer the input of the QKV projection, from which K and V
// are recomputed (rotary embeddings at their original positions) every pass;
// a page then holds more tokens. Used by the cpu backend; the CUDA backend is
// checked against it.
#pragma once

#include "gpu/llama_weights.hpp"
#include "gpu/lora.hpp"
#include "gpu/step.hpp"

#include <cstdint>
#include <memory>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu {

/// One sequence's share of a forward pass.
struct cpu_sequence {
  std::span<const std::int32_t> tokens; ///< new tokens this pass
  std::uint32_t start_pos = 0;          ///< tokens already in its KV cache
  std::span<const std::uint32_t> pages; ///< its KV pages, in order; enough for start_pos + tokens
  const lora_adapter* adapter = nullptr; ///< nullptr: base model
  /// Keep a hidden cache instead of K and V (only where hidden_saves()):
  /// its pages hold hidden_page_tokens() tokens each.
  bool hidden = false;
  /// Where set, receives every new token's final hidden state (after the
  /// final norm), [tokens, hidden_size]: the LM head takes those rows a
  /// chunk at a time (prompt_logprobs()), so a client's prompt
  /// log-probabilities never hold every row's logits at once.
  std::vector<float>* final_hidden = nullptr;
};

/// Owns the weights and a paged KV store. One thread calls forward() at a time.
class cpu_model {
public:
  /// A KV store of `num_pages` pages of `page_tokens` tokens each.
  cpu_model(llama_weights weights, std::uint64_t num_pages, std::uint32_t page_tokens);

  /// Runs the batch: writes each sequence's new K/V into its pages and
  /// returns the logits of its last new token, [batch.size(), vocab] (and
  /// fills the final_hidden of those that ask).
  /// Returns an empty vector, touching no page, when the batch is empty or
  /// invalid: a sequence with no new tokens, a token id outside [0, vocab),
  /// fewer pages than start_pos + tokens need, a page id >= num_pages(), an
  /// adapter whose matrices do not fit the model, or weights whose sizes do
  /// not match their config (checked once at construction).
  std::vector<float> forward(std::span<const cpu_sequence> batch);
  /// The logits of final hidden rows ([rows, hidden_size], as forward()
  /// leaves in final_hidden): [rows, vocab].
  std::vector<float> head_logits(std::span<const float> final_hidden) const;
  /// The log-probability of each of `tokens` but the first given those
  /// before it, with the `top` most likely there, from the final hidden
  /// rows of those tokens (row k scores token k + 1): the LM head run on
  /// chunks of rows of at most prompt_logits_bytes of logits.
  std::vector<token_logprobs> prompt_logprobs(std::span<const float> final_hidden,
                                              std::span<const std::int32_t> tokens, std::uint32_t top) const;
  static constexpr std::size_t prompt_logits_bytes = 8u << 20;
  /// Why forward() would refuse a batch holding `seq` ("" if it would not).
  std::string refusal(const cpu_sequence& seq) const;
  /// As above, calling `before_layer(l)` before layer l reads or writes
  /// any cache (layer-wise streaming waits there for layer l's pages).
  std::vector<float> forward(std::span<const cpu_sequence> batch,
                             const std::function<void(std::size_t)>& before_layer);

  /// Floats one page holds (all layers, K and V).
  std::uint64_t page_floats() const noexcept;
  /// Copies page `page` into `out` (page_floats() long); false if `page` is
  /// not in the store or `out` has the wrong size.
  bool read_page(std::uint32_t page, std::span<float> out) const;
  /// Overwrites page `page` with `in` (page_floats() long); false as above.
  bool write_page(std::uint32_t page, std::span<const float> in);
  /// Floats of one layer of a page (K and V); a page is num_layers of them.
  std::uint64_t layer_floats() const noexcept;
  /// Overwrites layer `layer` of page `page` with `in` (layer_floats() long,
  /// the matching slice of a read_page buffer).
  bool write_page_layer(std::uint32_t page, std::size_t layer, std::span<const float> in);

  /// The model's hyperparameters.
  const llama_config& config() const noexcept;
  /// Tokens per KV page.
  std::uint32_t page_tokens() const noexcept;
  /// Pages in the KV store.
  std::uint64_t num_pages() const noexcept;
  /// Tokens a page holds as a hidden cache: the K and V space of page_tokens
  /// tokens over the hidden size.
  std::uint32_t hidden_page_tokens() const noexcept;
  /// Whether a hidden cache holds more tokens per page than K and V do
  /// (false with grouped-query attention where 2·kv_heads·head_dim <= hidden
  /// size: there it saves nothing and forward() refuses hidden sequences).
  bool hidden_saves() const noexcept;

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace troupe::gpu
