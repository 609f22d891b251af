// Where a Hugging Face chat template comes from: a model directory
// (chat_template = "model") or a file (chat_template = "jinja",
// http.chat_jinja), read at start; messages/openai makes the template.
#pragma once

#include "messages/openai.hpp"

#include <string>
#include <variant>

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

} // namespace troupe
