// The tokenizer of a Hugging Face model directory, whichever kind it ships:
// a SentencePiece tokenizer.model (Llama 2, Mistral) or a byte-level BPE
// tokenizer.json (Llama 3), with every id that ends a sequence. Used by the
// cpu and cuda backends.
#pragma once

#include "gpu/backend.hpp"
#include "gpu/llama_config.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::gpu {

/// The end-of-sequence ids of generation_config.json's text (its
/// eos_token_id, one id or a list; none when it has no such key). The error
/// names `source`.
std::variant<std::vector<std::int32_t>, std::string> parse_generation_eos(std::string_view json_text,
                                                                          const std::string& source);

/// Loads `model_dir`'s tokenizer: tokenizer.model when there is one (BOS from
/// config.json; with the added tokens of tokenizer.json, or else of
/// tokenizer_config.json's added_tokens_decoder, and the dummy prefix where
/// tokenizer.json puts it: sp_tokenizer::prefix_scheme), otherwise tokenizer.json
/// (BOS from its post-processor).
/// Its eos_token() is config.json's first eos id, and its end_tokens() are
/// config.json's ids with generation_config.json's (Llama 3 Instruct ends
/// turns with <|eot_id|>, which only the latter names). Refused when the
/// tokenizer has more ids than config.json's vocab_size, or an end id lies
/// outside it. Errors name the file at fault.
std::variant<std::unique_ptr<tokenizer>, std::string> load_model_tokenizer(const std::string& model_dir,
                                                                           const llama_config& config);

} // namespace troupe::gpu
