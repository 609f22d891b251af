// sp_tokenizer: the tokenizer of real Llama-family models, a SentencePiece
// model file (tokenizer.model) read with libsentencepiece. Used by the cpu
// (and later cuda) backend, troupe-mkmodel's tests and the oracle tests.
#pragma once

#include "gpu/added_tokens.hpp"
#include "gpu/backend.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
} // namespace sentencepiece

namespace troupe::gpu {

/// A loaded SentencePiece model. Immutable after load(); safe to call from
/// any thread. Per-token decode() is concatenation-correct: joining the
/// decodes of a token run gives its text, with the model's dummy-prefix
/// space (if it adds one) kept at the front, so streamed text needs no
/// look-back. (A literal U+2581 in the input comes back as ' ', as with
/// every SentencePiece decoder.)
class sp_tokenizer final : public tokenizer {
public:
  /// Which text pieces get SentencePiece's dummy prefix ("\u2581") when the
  /// model adds one, as Hugging Face's tokenizer.json says: `always`, each
  /// piece between special tokens (the Prepend normalizer of legacy Llama
  /// tokenizers, Meta's reference); `first`, only the one at the text's
  /// start (Metaspace's prepend_scheme "first": legacy=false); `never`.
  enum class prefix_scheme : std::uint8_t { always, first, never };

  /// Loads `model_path`; `bos_id` is prepended by encode() (-1: none) and
  /// `eos_id` is what eos_token() reports. `added` are the model's added
  /// tokens (tokenizer.json's, as Hugging Face adds them beside the
  /// SentencePiece model: ChatML's <|im_start|> on a Mistral, Phi-3's
  /// <|user|>): each is cut out of a text before SentencePiece reads it,
  /// with its lstrip, rstrip and single_word (every one matched in the raw
  /// text: SentencePiece's normalization only maps blanks), and its id may
  /// lie past the model's pieces. The error names the file.
  static std::variant<std::unique_ptr<sp_tokenizer>, std::string>
  load(const std::string& model_path, std::int32_t bos_id, std::int32_t eos_id,
       std::vector<added_token> added = {}, prefix_scheme prefix = prefix_scheme::always);

  ~sp_tokenizer() override;
  sp_tokenizer(const sp_tokenizer&) = delete;
  sp_tokenizer& operator=(const sp_tokenizer&) = delete;

  // -- tokenizer ---------------------------------------------------------

  /// BOS (when set) followed by the ids of `text`'s pieces; bytes outside
  /// the vocabulary become byte-fallback pieces when the model has them. An
  /// added token's text, then a control or unknown piece's ("</s><s>"), is
  /// that token, and the text between such tokens is encoded chunk by chunk
  /// (each with the model's dummy prefix), as Hugging Face's Llama
  /// tokenizers read it.
  std::vector<std::int32_t> encode(const std::string& text) const override;
  /// The piece with U+2581 turned into ' ', a byte piece <0xAB> as that
  /// byte, a non-special added token's content, "" for control/unknown
  /// pieces, special added tokens and ids outside [0, vocab_size()).
  std::string decode(std::int32_t token) const override;
  /// A control or unknown piece's text ("</s>", "<unk>"), or a special
  /// added token's.
  std::string special_text(std::int32_t token) const override;
  /// Number of pieces in the model, or past them the largest added id + 1.
  std::int32_t vocab_size() const override;
  /// The eos id given to load().
  std::int32_t eos_token() const override { return eos_id_; }

  // -- observers ---------------------------------------------------------

  /// The BOS id given to load() (-1: encode() prepends nothing).
  std::int32_t bos_token() const noexcept { return bos_id_; }

private:
  sp_tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> p, std::int32_t bos_id,
               std::int32_t eos_id, std::vector<added_token> added, prefix_scheme prefix);
  /// `chunk`'s pieces, with the dummy prefix or without it.
  void encode_chunk(std::string_view chunk, bool prefixed, std::vector<std::int32_t>& ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::string> pieces_; ///< [vocab] decoded text of each id
  /// Special tokens' texts by id: control and unknown pieces ("<s>",
  /// "</s>", "<unk>") and special added tokens.
  std::unordered_map<std::int32_t, std::string> special_of_;
  /// The added tokens and the control and unknown pieces: in a text, each
  /// is the token itself.
  added_vocabulary added_;
  std::int32_t bos_id_;
  std::int32_t eos_id_;
  prefix_scheme prefix_;
  /// Without a prefix, a chunk is encoded after this text and its pieces
  /// dropped (as Hugging Face's Llama tokenizer does with legacy=false):
  /// the unknown piece's text, and how many pieces it encodes to.
  std::string lead_;
  std::size_t lead_pieces_ = 0;
};

} // namespace troupe::gpu
