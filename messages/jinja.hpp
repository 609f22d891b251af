// A Jinja2 interpreter for chat templates: the `chat_template` a Hugging
// Face model ships in tokenizer_config.json (or chat_template.jinja),
// rendered the way transformers renders it (`apply_chat_template`): Jinja2's
// sandbox with trim_blocks and lstrip_blocks, the loop controls, `tojson`
// as json.dumps (non-ASCII kept, keys in order), and the globals
// `raise_exception` and `strftime_now`.
//
// The language is the part chat templates use: text, {{ }}, {% %} and
// {# #} with whitespace control; if/elif/else, for (with loop, else,
// a filter, unpacking, break and continue), set (names, namespace
// attributes, blocks), macro; Python's values and operators; the common
// filters, tests and string and dict methods. Anything else is refused by
// name when the template is read (an unknown tag, filter or test), or when
// it renders (a method Jinja's sandbox would not call either). Python's
// semantics are kept where templates see them: strings index and count by
// code point, str() of values, truthiness, == across numbers.
//
// No I/O; one template is read once and rendered for each request, from
// any thread (a program is immutable).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::jinja {

/// A template that cannot be read, or a render that fails (an undefined
/// value used, a type error, raise_exception): what went wrong, and the
/// template's line.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Limits on one render: a template's loops run over the request's
/// messages, but a template (or a request) must not make a render without
/// end.
struct limits {
  std::size_t max_output_bytes = 64u << 20; ///< the rendered text
  std::size_t max_steps = 10'000'000;       ///< statements and loop iterations run
  std::size_t max_depth = 64;               ///< macro calls within macro calls
};

class program {
public:
  /// Reads `source`; throws jinja::error naming the line and what is wrong.
  explicit program(std::string_view source);

  /// The text of the template with `vars` (a JSON object) as its variables;
  /// throws jinja::error. `now` (seconds since the epoch) is strftime_now's
  /// time, in UTC; negative: the clock's.
  std::string render(const nlohmann::ordered_json& vars, const limits& lim = {}, double now = -1) const;

  struct impl;

private:
  std::shared_ptr<const impl> impl_;
};

} // namespace troupe::jinja
