// What the HTTP front reads of a Hugging Face model directory at start:
// where a chat template comes from, the model directory (chat_template =
// "model" or "auto") or a file (chat_template = "jinja", http.chat_jinja),
// which messages/openai makes into the template; and the sampling defaults
// of its generation_config.json.
#pragma once

#include "messages/openai.hpp"

#include <string>
#include <variant>
#include <vector>

namespace troupe {

/// A model directory's chat template: chat_template.jinja when present
/// (with additional_chat_templates/tool_use.jinja beside it, if there),
/// else tokenizer_config.json's "chat_template" (a string, or a list of
/// {"name", "template"}: "default", and "tool_use" for chats with tools),
/// with that file's bos_token and eos_token (strings, or {"content": ...};
/// "" when absent).
/// The error names the file and what is wrong with it.
std::variant<openai::jinja_source, std::string> read_model_chat_template(const std::string& model_dir);

/// A chat template file: a .json file is read as a tokenizer_config.json;
/// any other file is the template's text, given bos_token and eos_token
/// from `model_dir`'s tokenizer_config.json when there is one.
std::variant<openai::jinja_source, std::string> read_chat_template_file(const std::string& path,
                                                                        const std::string& model_dir);

/// The sampling defaults a model directory's generation_config.json gives
/// (vLLM's --generation-config auto): its temperature (0 to 100), top_p
/// (above 0, at most 1), top_k (0 or more; 0: no cut), min_p (0 to 1),
/// repetition_penalty (above 0, at most 100) and max_new_tokens (1 to
/// 4294967295: a chat's max_tokens when it gives none), each where the file
/// has it; none when there is no such file.
/// The error names the file and the key.
std::variant<openai::sampling_defaults, std::string> read_generation_defaults(const std::string& model_dir);

} // namespace troupe
