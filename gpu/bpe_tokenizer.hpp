// bpe_tokenizer: the byte-level BPE tokenizers that Hugging Face's
// tokenizer.json describes (Llama 3, Qwen2, GPT-2 and the models built on
// their vocabularies), read without the tokenizers library. Text is cut at
// the added tokens first (those not normalized in the raw text, then the
// normalized ones in the text normalized), then pre-tokenized by the file's
// Split / Digits / ByteLevel steps (regular expressions run with PCRE2 in
// UTF mode with Unicode properties), each piece mapped byte by byte to
// GPT-2's printable alphabet and merged by rank. Used by the cpu and cuda backends when a model
// directory has a tokenizer.json and no tokenizer.model.
//
// What a file may hold (anything else is refused by name at load):
//   model         BPE; merges as "a b" strings or [a, b] pairs; ignore_merges;
//                 no continuing_subword_prefix / end_of_word_suffix / dropout
//   normalizer    none, NFC, NFD, NFKC, NFKD, in a Sequence (Unicode 14.0's
//                 tables: gpu/unicode_norm.hpp)
//   pre_tokenizer ByteLevel (required, once), Split (Regex or String pattern;
//                 Isolated, Removed, MergedWithPrevious, MergedWithNext,
//                 Contiguous; invert), Digits, in a Sequence
//   post_processor none, ByteLevel, TemplateProcessing (its `single`), Sequence
//   decoder       ByteLevel, alone or in a Sequence
#pragma once

#include "gpu/backend.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// A loaded byte-level BPE tokenizer. Immutable after parse(); safe to call
/// from any thread. Per-token decode() is concatenation-correct at the byte
/// level: joining the decodes of a token run gives its text's bytes (one
/// token may hold part of a multi-byte character).
class bpe_tokenizer final : public tokenizer {
public:
  /// Parses tokenizer.json text. `eos_id` is what eos_token() reports (-1:
  /// none). The error names `source` and the part of the file at fault.
  static std::variant<std::unique_ptr<bpe_tokenizer>, std::string>
  parse(std::string_view json_text, const std::string& source, std::int32_t eos_id);
  /// Reads and parses the file at `path`.
  static std::variant<std::unique_ptr<bpe_tokenizer>, std::string>
  load(const std::string& path, std::int32_t eos_id);

  ~bpe_tokenizer() override;
  bpe_tokenizer(const bpe_tokenizer&) = delete;
  bpe_tokenizer& operator=(const bpe_tokenizer&) = delete;

  // -- tokenizer ---------------------------------------------------------

  /// The post-processor's leading ids (Llama 3's <|begin_of_text|>), the
  /// ids of `text` and its trailing ids. Never fails: bytes that are not
  /// UTF-8 become pieces of their own, every byte has a symbol.
  std::vector<std::int32_t> encode(const std::string& text) const override;
  /// The token's bytes; an added token's content, "" for a special one
  /// and for ids no token has.
  std::string decode(std::int32_t token) const override;
  /// A special added token's content ("<|eot_id|>").
  std::string special_text(std::int32_t token) const override;
  /// One past the largest id of the vocabulary and the added tokens.
  std::int32_t vocab_size() const override;
  std::int32_t eos_token() const override { return eos_id_; }

  // -- observers ---------------------------------------------------------

  /// The ids encode() puts before and after the text's.
  const std::vector<std::int32_t>& prefix() const noexcept;
  const std::vector<std::int32_t>& suffix() const noexcept;
  /// The id of the added token with this content, or of the vocabulary
  /// entry spelling these bytes; -1 when none.
  std::int32_t find(std::string_view content) const;

  struct impl;

private:
  explicit bpe_tokenizer(std::unique_ptr<impl> p, std::int32_t eos_id);

  std::unique_ptr<impl> impl_;
  std::int32_t eos_id_;
};

/// Llama 3's pre-tokenizer pattern.
inline constexpr std::string_view llama3_split_pattern =
  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
/// Qwen2's: Llama 3's with each digit a piece of its own.
inline constexpr std::string_view qwen2_split_pattern =
  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// What train_bpe() builds.
struct bpe_training {
  /// Size of the vocabulary before the special tokens: 256 byte symbols,
  /// then one token per merge (fewer when the corpus runs out of pairs:
  /// their ids then have no token).
  std::uint32_t vocab_size = 512;
  /// Added as special tokens from id vocab_size on, in this order.
  std::vector<std::string> special_tokens;
  /// Added after the special tokens, in this order, not special: their text
  /// decodes (Qwen3's <think> and </think>).
  std::vector<std::string> added_tokens;
  /// One of special_tokens that encode() puts first ("": none).
  std::string bos_token;
  /// The Split step's regular expression.
  std::string pattern{llama3_split_pattern};
  /// The file's normalizer ("": none; "NFC", as Qwen2's); the corpus is
  /// learnt normalized.
  std::string normalizer;
  bool ignore_merges = true;
};

/// A learnt tokenizer.json, or what was wrong with the options.
struct bpe_trained {
  std::string json;
  std::string error; ///< empty on success
};

/// A byte-level BPE tokenizer.json learnt from `corpus` by merging the most
/// frequent pair of symbols (ties to the pair of smaller ids) until the
/// vocabulary is full: for troupe-mkmodel and the tests.
bpe_trained train_bpe_json(std::string_view corpus, const bpe_training& options);

} // namespace troupe::gpu
