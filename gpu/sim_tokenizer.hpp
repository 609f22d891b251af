// sim_tokenizer: a model-free tokenizer for the sim backend. Text encodes to
// one token per byte; ids above the byte range decode to pseudo-words, so
// simulated output reads like text. Used by sim_backend and its tests.
#pragma once

#include "gpu/backend.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::gpu {

/// Vocabulary layout: 0 <pad>, 1 <s>, 2 </s> (eos), 3..258 the bytes 0..255,
/// first_word_token..vocab_size()-1 pseudo-words such as " tavo". Immutable;
/// safe to call from any thread.
class sim_tokenizer final : public tokenizer {
public:
  /// Fixed ids of the layout above.
  static constexpr std::int32_t pad_token = 0;
  static constexpr std::int32_t bos_token = 1;
  static constexpr std::int32_t end_token = 2;
  static constexpr std::int32_t first_byte_token = 3;
  static constexpr std::int32_t first_word_token = first_byte_token + 256;

  /// A vocabulary of `vocab_size` ids, raised to first_word_token + 1 when
  /// smaller (so every byte and at least one word exist) and capped at INT32_MAX.
  explicit sim_tokenizer(std::uint32_t vocab_size);

  /// One byte token per byte of `text` (UTF-8 stays byte-wise); no BOS/EOS.
  std::vector<std::int32_t> encode(const std::string& text) const override;
  /// The byte of a byte token, " " + a lowercase syllable word for a word
  /// token, "" for special tokens and ids outside [0, vocab_size()).
  std::string decode(std::int32_t token) const override;
  /// "<pad>", "<s>", "</s>" for the special tokens.
  std::string special_text(std::int32_t token) const override;
  /// Number of ids; at least first_word_token + 1.
  std::int32_t vocab_size() const override { return vocab_size_; }
  /// Always end_token (2).
  std::int32_t eos_token() const override { return end_token; }

private:
  std::int32_t vocab_size_;
};

} // namespace troupe::gpu
