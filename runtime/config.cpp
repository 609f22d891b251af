// Parsing and validation of the TOML deployment file (see runtime/config.hpp and
// docs/configuration.md). toml++ stays inside this file.
#include "runtime/config.hpp"

#include "gpu/cost_fit.hpp"
#include "messages/openai.hpp"
#include "policies/session_eviction.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include <toml++/toml.h>

namespace troupe {

namespace {

constexpr std::uint32_t max_lora_rank = 1024;
constexpr std::uint32_t max_page_tokens = 1024;
/// Guard against a typo allocating millions of adapter records.
constexpr std::uint32_t max_generated_adapters = 1u << 20;
constexpr std::uint64_t u32_max = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

constexpr std::array<std::string_view, 16> section_names = {
  "server",      "logging",     "caf",           "model",       "backend", "memory_pool", "scheduler",
  "classifier",  "queue_tuner", "adapter_cache", "copy_engine", "metrics", "adapters",    "adapters_generate",
  "cluster",     "http",
};

const std::vector<std::string> log_levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};

// -- message helpers -------------------------------------------------------------

/// `file:line:column` when the region is known, else `file`.
std::string position(const std::string& source, const toml::source_region& where) {
  if (where.begin.line == 0)
    return source;
  return source + ':' + std::to_string(where.begin.line) + ':' + std::to_string(where.begin.column);
}

std::string_view type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::none:
      return "nothing";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "floating-point";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
  }
  return "value";
}

/// The value as TOML writes it (strings quoted), cut to one short line.
std::string value_text(const toml::node& node) {
  if (node.is_table())
    return "a table";
  std::ostringstream os;
  // no flags: strings come out in double quotes with escapes, integers in decimal
  os << toml::toml_formatter{node, toml::format_flags::allow_unicode_strings};
  std::string text = os.str();
  for (char& ch : text)
    if (ch == '\n' || ch == '\r')
      ch = ' ';
  if (text.size() > 60) {
    text.resize(57);
    text += "...";
  }
  return text;
}

/// Type and value, for wrong-type messages: `string "abc"`, `an array [1, 2]`.
std::string typed_text(const toml::node& node) {
  if (node.is_table())
    return "a table";
  return std::string(type_name(node.type())) + ' ' + value_text(node);
}

std::string in_quotes(std::string_view text) {
  return '"' + std::string(text) + '"';
}

std::string join(const std::vector<std::string>& names) {
  if (names.empty())
    return "none registered";
  std::string out;
  for (const auto& name : names) {
    if (!out.empty())
      out += ", ";
    out += name;
  }
  return out;
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  for (const auto& n : names)
    if (n == name)
      return true;
  return false;
}

/// Optimal string alignment distance: insertions, deletions, substitutions and
/// swaps of adjacent characters each cost 1.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

/// The known word closest to `word` if it is within `max_distance` edits, else empty.
template <class Names>
std::string_view closest(std::string_view word, const Names& known, std::size_t max_distance = 2) {
  std::string_view best;
  std::size_t best_distance = max_distance + 1;
  for (std::string_view candidate : known) {
    const auto distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

bool has_whitespace(std::string_view text) {
  for (char ch : text)
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f')
      return true;
  return false;
}

bool valid_endpoint(std::string_view endpoint) {
  for (std::string_view scheme : {"tcp://", "ipc://", "inproc://"})
    if (endpoint.starts_with(scheme) && endpoint.size() > scheme.size())
      return true;
  return false;
}

/// `i` when `name` is exactly `generated_adapter_name(prefix, i)` for some i < count.
std::optional<std::uint32_t> generated_index(std::string_view name, std::string_view prefix,
                                             std::uint32_t count) {
  if (!name.starts_with(prefix))
    return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 10 || (digits.size() > 1 && digits.front() == '0'))
    return std::nullopt;
  std::uint64_t index = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9')
      return std::nullopt;
    index = index * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  if (index >= count)
    return std::nullopt;
  return static_cast<std::uint32_t>(index);
}

// -- checker -------------------------------------------------------------------

/// Keeps the first error; once one is recorded, every later check is a no-op
/// and readers hand back their defaults.
class checker {
public:
  explicit checker(const std::string& source) : source_(source) {}

  bool failed() const noexcept { return error_.has_value(); }

  /// Records `source:line:col: path: what` unless an earlier error exists.
  void fail(const toml::source_region& where, std::string_view path, std::string_view what) {
    if (failed())
      return;
    error_ = position(source_, where) + ": " + std::string(path) + ": " + std::string(what);
  }

  /// Records `... path: what, got <value>` for a value that is present.
  void reject(const toml::node& node, std::string_view path, std::string_view what) {
    fail(node.source(), path, std::string(what) + ", got " + value_text(node));
  }

  std::optional<std::string> take_error() { return std::exchange(error_, std::nullopt); }

private:
  const std::string& source_;
  std::optional<std::string> error_;
};

/// An unsigned integer node within [lo, hi]; `type_max` names the target type's limit.
std::optional<std::uint64_t> read_unsigned(checker& c, const toml::node& node, std::string_view path,
                                           std::uint64_t lo, std::uint64_t hi, std::uint64_t type_max) {
  const auto* integer = node.as_integer();
  if (integer == nullptr) {
    c.fail(node.source(), path, "expected an integer, got " + typed_text(node));
    return std::nullopt;
  }
  const std::int64_t value = integer->get();
  if (value < 0) {
    c.reject(node, path, lo == 0 ? "must not be negative" : "must be at least " + std::to_string(lo));
    return std::nullopt;
  }
  const auto unsigned_value = static_cast<std::uint64_t>(value);
  if (unsigned_value > type_max) {
    c.reject(node, path,
             "does not fit in " + std::string(type_max == u32_max ? "32" : "64") + " bits (max " +
               std::to_string(type_max) + ")");
    return std::nullopt;
  }
  if (unsigned_value < lo) {
    c.reject(node, path, "must be at least " + std::to_string(lo));
    return std::nullopt;
  }
  if (unsigned_value > hi) {
    c.reject(node, path, "must be at most " + std::to_string(hi));
    return std::nullopt;
  }
  return unsigned_value;
}

// -- section -------------------------------------------------------------------

/// One table of the file and its key path; a missing table reads as all defaults.
class section {
public:
  section(checker& c, const toml::table* table, std::string path)
    : c_(c), table_(table), path_(std::move(path)) {}

  /// The key path of `key` in messages: `scheduler.max_running`.
  std::string path(std::string_view key) const { return path_ + '.' + std::string(key); }

  /// The node at `key`, or nullptr when absent.
  const toml::node* node(std::string_view key) const {
    return table_ == nullptr ? nullptr : table_->get(key);
  }

  /// Rejects any key not in `known`, suggesting the closest known one.
  void allow_only(std::initializer_list<std::string_view> known) {
    if (table_ == nullptr)
      return;
    for (auto&& [key, value] : *table_) {
      bool ok = false;
      for (std::string_view k : known)
        ok = ok || k == key.str();
      if (ok)
        continue;
      std::string what = "unknown key";
      if (auto hint = closest(key.str(), known); !hint.empty())
        what += "; did you mean " + path(hint) + "?";
      c_.fail(key.source(), path(key.str()), what);
    }
  }

  std::string text(std::string_view key, std::string fallback) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    if (const auto* s = n->as_string())
      return s->get();
    c_.fail(n->source(), path(key), "expected a string, got " + typed_text(*n));
    return fallback;
  }

  bool flag(std::string_view key, bool fallback) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    if (const auto* b = n->as_boolean())
      return b->get();
    c_.fail(n->source(), path(key), "expected true or false, got " + typed_text(*n));
    return fallback;
  }

  std::uint32_t u32(std::string_view key, std::uint32_t fallback, std::uint32_t lo = 0,
                    std::uint32_t hi = static_cast<std::uint32_t>(u32_max)) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    const auto value = read_unsigned(c_, *n, path(key), lo, hi, u32_max);
    return value ? static_cast<std::uint32_t>(*value) : fallback;
  }

  /// A whole number that fits 32 bits, signed.
  std::int32_t i32(std::string_view key, std::int32_t fallback) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    const auto* i = n->as_integer();
    if (i == nullptr) {
      c_.fail(n->source(), path(key), "expected an integer, got " + typed_text(*n));
      return fallback;
    }
    if (i->get() < INT32_MIN || i->get() > INT32_MAX) {
      c_.reject(*n, path(key), "must be between -2147483648 and 2147483647");
      return fallback;
    }
    return static_cast<std::int32_t>(i->get());
  }

  std::uint64_t u64(std::string_view key, std::uint64_t fallback, std::uint64_t lo = 0) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    return read_unsigned(c_, *n, path(key), lo, u64_max, u64_max).value_or(fallback);
  }

  /// A finite number; integers are accepted for floating-point keys.
  double real(std::string_view key, double fallback) {
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return fallback;
    double value = 0;
    if (const auto* f = n->as_floating_point())
      value = f->get();
    else if (const auto* i = n->as_integer())
      value = static_cast<double>(i->get());
    else {
      c_.fail(n->source(), path(key), "expected a number, got " + typed_text(*n));
      return fallback;
    }
    if (!std::isfinite(value)) {
      c_.reject(*n, path(key), "must be a finite number");
      return fallback;
    }
    return value;
  }

  /// A table of numbers (`params = { frequency = 0.45 }`), empty when absent.
  std::map<std::string, double> numbers(std::string_view key) {
    std::map<std::string, double> out;
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return out;
    const toml::table* t = n->as_table();
    if (t == nullptr) {
      c_.fail(n->source(), path(key), "expected a table of numbers, e.g. { name = 0.5 }, got " + typed_text(*n));
      return out;
    }
    section inner{c_, t, path(key)};
    for (auto&& [k, v] : *t)
      out[std::string(k.str())] = inner.real(k.str(), 0.0);
    return out;
  }

  /// An array of strings, empty when absent.
  std::vector<std::string> strings(std::string_view key) {
    std::vector<std::string> out;
    const toml::node* n = node(key);
    if (n == nullptr || c_.failed())
      return out;
    const toml::array* items = n->as_array();
    if (items == nullptr) {
      c_.fail(n->source(), path(key), "expected an array of strings, got " + typed_text(*n));
      return out;
    }
    for (std::size_t i = 0; i < items->size() && !c_.failed(); ++i) {
      const toml::node& d = *items->get(i);
      if (const auto* str = d.as_string())
        out.push_back(str->get());
      else
        c_.fail(d.source(), path(key) + '[' + std::to_string(i) + ']', "expected a string, got " + typed_text(d));
    }
    return out;
  }

  /// Fails with `what, got <value>` unless `ok`.
  void require(std::string_view key, bool ok, std::string_view what) {
    if (ok || c_.failed())
      return;
    if (const toml::node* n = node(key))
      c_.reject(*n, path(key), what);
    else
      c_.fail(where(), path(key), std::string(what) + " (the default value)");
  }

  /// A string that must be one of `names`; `kind` names the registry in messages.
  std::string choice(std::string_view key, std::string fallback, const std::vector<std::string>& names,
                     std::string_view kind) {
    std::string value = text(key, std::move(fallback));
    if (c_.failed() || contains(names, value))
      return value;
    std::string what = "unknown " + std::string(kind) + ' ' + in_quotes(value);
    // values are short, so only near-misses get a hint ("fcsf", not "V100" -> "H200")
    const std::size_t max_distance = std::clamp<std::size_t>(value.size() / 3, 1, 2);
    if (auto hint = closest(value, names, max_distance); !hint.empty())
      what += "; did you mean " + in_quotes(hint) + "?";
    what += " (valid: " + join(names) + ')';
    if (const toml::node* n = node(key))
      c_.fail(n->source(), path(key), what);
    else
      c_.fail(where(), path(key), what + " (the default value)");
    return value;
  }

  /// Where the table itself starts (for messages about absent keys).
  toml::source_region where() const { return table_ == nullptr ? toml::source_region{} : table_->source(); }

  checker& check() noexcept { return c_; }

private:
  checker& c_;
  const toml::table* table_;
  std::string path_;
};

// -- sections ------------------------------------------------------------------

server_options read_server(section s) {
  server_options o;
  s.allow_only({"endpoint", "max_frame_bytes", "max_pending", "drain_timeout_s"});
  o.endpoint = s.text("endpoint", o.endpoint);
  s.require("endpoint", valid_endpoint(o.endpoint),
            "must be tcp://, ipc:// or inproc:// followed by an address");
  o.max_frame_bytes = s.u64("max_frame_bytes", o.max_frame_bytes, 1);
  o.max_pending = s.u32("max_pending", o.max_pending, 1);
  o.drain_timeout_s = s.real("drain_timeout_s", o.drain_timeout_s);
  s.require("drain_timeout_s", o.drain_timeout_s >= 0, "must not be negative");
  return o;
}

/// "host:port" with a port in min_port..65535.
bool valid_host_port(const std::string& a, unsigned min_port) {
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size() || a.size() - colon > 6)
    return false;
  unsigned port = 0;
  for (std::size_t i = colon + 1; i < a.size(); ++i) {
    if (a[i] < '0' || a[i] > '9')
      return false;
    port = port * 10 + static_cast<unsigned>(a[i] - '0');
  }
  return port >= min_port && port <= 65535;
}

} // namespace

openai::chat_formats chat_formats_of(const http_options& o) {
  return {o.chat_system, o.chat_user,  o.chat_assistant,  o.chat_generation,
          o.chat_stop,   o.chat_tools, o.chat_tool_call, o.chat_tool_result, o.chat_tool_arguments};
}

namespace {

http_options read_http(section s) {
  http_options o;
  s.allow_only({"listen", "model", "max_connections", "api_keys", "adapter_updates", "chat_template", "chat_jinja",
                "chat_system", "chat_user", "chat_assistant", "chat_generation", "chat_stop", "chat_tools",
                "chat_tool_call", "chat_tool_result", "chat_tool_arguments", "reasoning_parser",
                "request_chat_template", "generation_config", "response_store_mb", "conversation_store_mb", "store_dir", "file_store_mb",
                "batch_concurrency", "batch_priority", "store_sync"});
  o.listen = s.text("listen", o.listen);
  s.require("listen", o.listen.empty() || valid_host_port(o.listen, 0),
            "must be \"host:port\" (an IP address or localhost, port 0..65535; 0: any free port), or empty for "
            "no HTTP front");
  o.model = s.text("model", o.model);
  o.max_connections = s.u32("max_connections", o.max_connections, 1);
  o.api_keys = s.strings("api_keys");
  for (std::size_t i = 0; i < o.api_keys.size(); ++i)
    if (o.api_keys[i].empty() || o.api_keys[i].find_first_of(" \t\r\n") != std::string::npos) {
      // Said without the value: it is a secret.
      s.check().fail(s.node("api_keys")->source(), s.path("api_keys") + '[' + std::to_string(i) + ']',
                     "an API key must not be empty or hold spaces");
      break;
    }
  o.adapter_updates = s.flag("adapter_updates", o.adapter_updates);
  o.response_store_mb = s.u32("response_store_mb", o.response_store_mb, 0);
  o.conversation_store_mb = s.u32("conversation_store_mb", o.conversation_store_mb, 0);
  o.store_dir = s.text("store_dir", o.store_dir);
  o.store_sync = s.flag("store_sync", o.store_sync);
  o.file_store_mb = s.u32("file_store_mb", o.file_store_mb, 0);
  o.batch_concurrency = s.u32("batch_concurrency", o.batch_concurrency, 1);
  o.batch_priority = s.i32("batch_priority", o.batch_priority);
  auto names = openai::chat_template_names();
  names.insert(names.begin(), "");
  names.insert(names.end(), {"custom", "model", "jinja", "auto"});
  o.chat_template = s.choice("chat_template", o.chat_template, names, "chat template");
  o.chat_jinja = s.text("chat_jinja", o.chat_jinja);
  if (o.chat_template == "jinja")
    s.require("chat_jinja", !o.chat_jinja.empty(),
              "must name the file of the chat template (Jinja2 text, or a tokenizer_config.json) with chat_template "
              "= \"jinja\"");
  else
    s.require("chat_jinja", o.chat_jinja.empty(), "is for chat_template = \"jinja\" (chat_template is \"" + o.chat_template + "\")");
  o.chat_system = s.text("chat_system", o.chat_system);
  o.chat_user = s.text("chat_user", o.chat_user);
  o.chat_assistant = s.text("chat_assistant", o.chat_assistant);
  o.chat_generation = s.text("chat_generation", o.chat_generation);
  o.chat_stop = s.strings("chat_stop");
  o.chat_tools = s.text("chat_tools", o.chat_tools);
  o.chat_tool_call = s.text("chat_tool_call", o.chat_tool_call);
  o.chat_tool_result = s.text("chat_tool_result", o.chat_tool_result);
  o.chat_tool_arguments = s.text("chat_tool_arguments", o.chat_tool_arguments);
  auto parsers = openai::reasoning_parser_names();
  parsers.insert(parsers.begin(), "");
  o.reasoning_parser = s.choice("reasoning_parser", o.reasoning_parser, parsers, "reasoning parser");
  s.require("reasoning_parser", o.reasoning_parser.empty() || !o.chat_template.empty(),
            "is for chat completions, which chat_template = \"\" does not serve");
  o.request_chat_template = s.flag("request_chat_template", o.request_chat_template);
  o.generation_config = s.choice("generation_config", o.generation_config, {"auto", ""}, "generation config");
  s.require("request_chat_template", !o.request_chat_template || !o.chat_template.empty(),
            "is for chat completions, which chat_template = \"\" does not serve");
  if (o.chat_template.empty()) {
    if (const auto e = openai::custom_formats_refused("", chat_formats_of(o)))
      s.require(e->key, false, e->what);
  } else if (const auto t = openai::make_chat_template(o.chat_template, chat_formats_of(o));
             const auto* e = std::get_if<openai::chat_template_error>(&t)) {
    // The server makes its template with the same function.
    s.require(e->key, false, e->what);
  }
  return o;
}

logging_options read_logging(section s) {
  logging_options o;
  s.allow_only({"level", "file"});
  o.level = s.choice("level", o.level, log_levels, "log level");
  o.file = s.text("file", o.file);
  return o;
}

caf_options read_caf(section s) {
  caf_options o;
  s.allow_only({"scheduler_threads"});
  o.scheduler_threads = s.u32("scheduler_threads", o.scheduler_threads);
  return o;
}

model_options read_model(section s, const config_catalog& catalog) {
  model_options o;
  s.allow_only({"preset", "shape_file", "path", "max_context"});
  o.shape_file = s.text("shape_file", o.shape_file);
  o.path = s.text("path", o.path);
  // A shape file overrides the preset, so only an explicit preset must then be known.
  if (o.shape_file.empty() || s.node("preset") != nullptr)
    o.preset = s.choice("preset", o.preset, catalog.model_presets, "model preset");
  o.max_context = s.u32("max_context", o.max_context);
  return o;
}

backend_options read_backend(section s, const config_catalog& catalog) {
  backend_options o;
  s.allow_only({"kind", "gpu", "time_scale", "seed", "dtype", "device", "step_graphs", "cost"});
  o.kind = s.choice("kind", o.kind, catalog.backends, "backend");
  o.gpu = s.choice("gpu", o.gpu, catalog.gpus, "GPU preset");
  o.time_scale = s.real("time_scale", o.time_scale);
  s.require("time_scale", o.time_scale >= 0, "must not be negative");
  o.seed = s.u64("seed", o.seed);
  o.dtype = s.choice("dtype", o.dtype, {"float16", "bfloat16"}, "dtype");
  o.device = s.u32("device", o.device);
  o.step_graphs = s.u32("step_graphs", o.step_graphs, 0, 64);
  o.cost = s.numbers("cost");
  s.require("cost", o.cost.empty() || o.kind == "sim",
            "prices the sim backend's steps only; backend.kind is \"" + o.kind + "\"");
  if (!o.cost.empty()) {
    gpu::cost_constants constants;
    auto spec = gpu::find_gpu_spec(o.gpu).value_or(gpu::gpu_spec{});
    const auto error = gpu::apply_cost_overrides(o.cost, constants, spec);
    s.require("cost", !error, error.value_or(""));
  }
  return o;
}

memory_pool_options read_memory_pool(section s) {
  memory_pool_options o;
  s.allow_only({"page_tokens", "pages", "gpu_memory_fraction", "host_pages", "disk_pages", "disk_dir", "disk_write_back",
                "disk_fetch", "disk_bytes_per_s", "disk_max_wait_s"});
  o.page_tokens = s.u32("page_tokens", o.page_tokens, 1, max_page_tokens);
  s.require("page_tokens", std::has_single_bit(o.page_tokens), "must be a power of two");
  o.pages = s.u64("pages", o.pages);
  o.gpu_memory_fraction = s.real("gpu_memory_fraction", o.gpu_memory_fraction);
  s.require("gpu_memory_fraction", o.gpu_memory_fraction > 0 && o.gpu_memory_fraction <= 1,
            "must be in (0, 1]");
  o.host_pages = s.u64("host_pages", o.host_pages);
  o.disk_pages = s.u64("disk_pages", o.disk_pages);
  o.disk_dir = s.text("disk_dir", o.disk_dir);
  o.disk_write_back = s.real("disk_write_back", o.disk_write_back);
  s.require("disk_write_back", o.disk_write_back >= 0 && o.disk_write_back <= 1, "must be in [0, 1]");
  o.disk_fetch = s.text("disk_fetch", o.disk_fetch);
  s.require("disk_fetch", o.disk_fetch == "cost" || o.disk_fetch == "read", "valid: cost, read");
  o.disk_bytes_per_s = s.real("disk_bytes_per_s", o.disk_bytes_per_s);
  s.require("disk_bytes_per_s", o.disk_bytes_per_s > 0, "must be positive");
  o.disk_max_wait_s = s.real("disk_max_wait_s", o.disk_max_wait_s);
  s.require("disk_max_wait_s", o.disk_max_wait_s > 0, "must be positive");
  s.require("disk_pages", o.disk_pages == 0 || o.host_pages > 0,
            "needs memory_pool.host_pages: caches reach the disk through the host pool");
  return o;
}

scheduler_options read_scheduler(section s, const config_catalog& catalog) {
  scheduler_options o;
  s.allow_only({"policy", "params", "max_running", "token_budget", "max_waiting", "kv_reservation",
                "growth_watermark", "session_fraction", "session_eviction", "advise_fetch_lead_s",
                "prefix_caching", "prefix_cache_fraction", "prefix_cache_admission"});
  o.policy = s.choice("policy", o.policy, catalog.scheduling_policies, "scheduling policy");
  o.params = s.numbers("params");
  o.max_running = s.u32("max_running", o.max_running, 1);
  o.token_budget = s.u32("token_budget", o.token_budget, 1);
  o.max_waiting = s.u32("max_waiting", o.max_waiting, 1);
  static const std::vector<std::string> reservations{"full", "on_demand"};
  o.kv_reservation = s.choice("kv_reservation", o.kv_reservation, reservations, "KV reservation");
  o.growth_watermark = s.real("growth_watermark", o.growth_watermark);
  s.require("growth_watermark", o.growth_watermark >= 0 && o.growth_watermark < 1, "must be in [0, 1)");
  o.session_fraction = s.real("session_fraction", o.session_fraction);
  s.require("session_fraction", o.session_fraction >= 0 && o.session_fraction <= 1, "must be in [0, 1]");
  o.session_eviction = s.choice("session_eviction", o.session_eviction, policies::session_eviction_names(),
                                "session eviction policy");
  o.advise_fetch_lead_s = s.real("advise_fetch_lead_s", o.advise_fetch_lead_s);
  s.require("advise_fetch_lead_s", o.advise_fetch_lead_s >= 0, "must be >= 0");
  o.prefix_caching = s.flag("prefix_caching", o.prefix_caching);
  o.prefix_cache_fraction = s.real("prefix_cache_fraction", o.prefix_cache_fraction);
  s.require("prefix_cache_fraction", o.prefix_cache_fraction >= 0 && o.prefix_cache_fraction <= 1, "must be in [0, 1]");
  static const std::vector<std::string> admissions{"repeated", "all"};
  o.prefix_cache_admission = s.choice("prefix_cache_admission", o.prefix_cache_admission, admissions,
                                      "prefix cache admission");
  return o;
}

classifier_options read_classifier(section s, const config_catalog& catalog) {
  classifier_options o;
  s.allow_only({"enabled", "policy", "params", "predictor", "predictor_params"});
  o.enabled = s.flag("enabled", o.enabled);
  o.policy = s.choice("policy", o.policy, catalog.classifier_policies, "classifier policy");
  o.params = s.numbers("params");
  o.predictor = s.choice("predictor", o.predictor, catalog.output_predictors, "output-length predictor");
  o.predictor_params = s.numbers("predictor_params");
  return o;
}

queue_tuner_options read_queue_tuner(section s) {
  queue_tuner_options o;
  s.allow_only({"enabled", "period_s", "window_s", "max_queues", "elbow", "slo_s", "quota_size", "iteration_s"});
  o.enabled = s.flag("enabled", o.enabled);
  o.period_s = s.real("period_s", o.period_s);
  s.require("period_s", o.period_s > 0, "must be positive");
  o.window_s = s.real("window_s", o.window_s);
  s.require("window_s", o.window_s > 0, "must be positive");
  o.max_queues = s.u32("max_queues", o.max_queues, 1, 4);
  o.elbow = s.real("elbow", o.elbow);
  s.require("elbow", o.elbow >= 0 && o.elbow < 1, "must be in [0, 1)");
  o.slo_s = s.real("slo_s", o.slo_s);
  s.require("slo_s", o.slo_s > 0, "must be positive");
  o.quota_size = s.choice("quota_size", o.quota_size, {"max", "mean"}, "quota size");
  o.iteration_s = s.real("iteration_s", o.iteration_s);
  s.require("iteration_s", o.iteration_s > 0, "must be positive");
  return o;
}

adapter_cache_options read_adapter_cache(section s, const config_catalog& catalog) {
  adapter_cache_options o;
  s.allow_only({"policy", "params", "max_resident", "window_s", "prefetch", "prefetch_free_fraction",
                "predictor", "predictor_interval_s", "host_bytes", "directories"});
  o.policy = s.choice("policy", o.policy, catalog.eviction_policies, "eviction policy");
  o.params = s.numbers("params");
  o.max_resident = s.u32("max_resident", o.max_resident);
  o.window_s = s.real("window_s", o.window_s);
  s.require("window_s", o.window_s > 0, "must be positive");
  o.prefetch = s.flag("prefetch", o.prefetch);
  o.prefetch_free_fraction = s.real("prefetch_free_fraction", o.prefetch_free_fraction);
  s.require("prefetch_free_fraction", o.prefetch_free_fraction >= 0 && o.prefetch_free_fraction < 1,
            "must be in [0, 1)");
  o.predictor = s.choice("predictor", o.predictor, catalog.prefetch_policies, "prefetch predictor");
  o.predictor_interval_s = s.real("predictor_interval_s", o.predictor_interval_s);
  s.require("predictor_interval_s", o.predictor_interval_s > 0, "must be positive");
  o.host_bytes = s.u64("host_bytes", o.host_bytes);
  o.directories = s.strings("directories");
  return o;
}

copy_engine_options read_copy_engine(section s) {
  copy_engine_options o;
  s.allow_only({"max_inflight", "layer_streaming"});
  o.max_inflight = s.u32("max_inflight", o.max_inflight, 1);
  o.layer_streaming = s.flag("layer_streaming", o.layer_streaming);
  return o;
}

/// "host:port" with a port in 1..65535.
bool valid_node_address(const std::string& a) {
  return valid_host_port(a, 1);
}

cluster_options read_cluster(section s) {
  cluster_options o;
  s.allow_only({"nodes", "node", "router", "connect_timeout_s", "node_timeout_s", "imbalance", "adapter_affinity",
                 "advise_place_lead_s", "prefix_affinity_tokens"});
  o.nodes = s.strings("nodes");
  for (std::size_t i = 0; i < o.nodes.size(); ++i)
    s.require("nodes", valid_node_address(o.nodes[i]),
              "entry " + std::to_string(i) + " (\"" + o.nodes[i]
                + "\") is not \"host:port\" (a node's CAF middleman address, port 1..65535)");
  const auto last = o.nodes.empty() ? 0u : static_cast<std::uint32_t>(o.nodes.size() - 1);
  o.node = s.u32("node", o.node, 0, last);
  o.router = s.u32("router", o.router, 0, last);
  o.connect_timeout_s = s.real("connect_timeout_s", o.connect_timeout_s);
  s.require("connect_timeout_s", o.connect_timeout_s > 0, "must be positive");
  o.node_timeout_s = s.real("node_timeout_s", o.node_timeout_s);
  s.require("node_timeout_s", o.node_timeout_s > 0, "must be positive");
  o.imbalance = s.u32("imbalance", o.imbalance);
  o.adapter_affinity = s.flag("adapter_affinity", o.adapter_affinity);
  o.prefix_affinity_tokens = s.u32("prefix_affinity_tokens", o.prefix_affinity_tokens);
  o.advise_place_lead_s = s.real("advise_place_lead_s", o.advise_place_lead_s);
  s.require("advise_place_lead_s", o.advise_place_lead_s >= 0, "must not be negative");
  return o;
}

metrics_options read_metrics(section s) {
  metrics_options o;
  s.allow_only({"enabled", "log_interval_s"});
  o.enabled = s.flag("enabled", o.enabled);
  o.log_interval_s = s.real("log_interval_s", o.log_interval_s);
  s.require("log_interval_s", o.log_interval_s >= 0, "must not be negative");
  return o;
}

/// Checks an adapter name (explicit or a generate prefix) for emptiness and whitespace.
void check_name(section& s, std::string_view key, std::string_view name, bool may_be_empty) {
  s.require(key, may_be_empty || !name.empty(), "must not be empty");
  s.require(key, !has_whitespace(name), "must not contain whitespace");
}

/// [[adapters]]: an array of tables, each with a unique name.
std::vector<adapter_spec> read_adapters(checker& c, const toml::node* node) {
  std::vector<adapter_spec> out;
  if (node == nullptr)
    return out;
  const toml::array* entries = node->as_array();
  // first index of each name, for the duplicate message
  std::map<std::string, std::size_t, std::less<>> seen;
  for (std::size_t i = 0; i < entries->size() && !c.failed(); ++i) {
    const std::string path = "adapters[" + std::to_string(i) + ']';
    const toml::node& entry = *entries->get(i);
    const toml::table* table = entry.as_table();
    if (table == nullptr) {
      c.fail(entry.source(), path, "expected a table ([[adapters]]), got " + typed_text(entry));
      break;
    }
    section s{c, table, path};
    if (const toml::node* generate = s.node("generate"))
      c.fail(generate->source(), s.path("generate"), "unknown key; generated adapters go in [adapters_generate]");
    s.allow_only({"name", "rank", "path"});
    adapter_spec spec;
    if (s.node("name") == nullptr)
      c.fail(s.where(), s.path("name"), "missing; every [[adapters]] entry needs a name");
    spec.name = s.text("name", spec.name);
    check_name(s, "name", spec.name, false);
    spec.rank = s.u32("rank", spec.rank, 1, max_lora_rank);
    spec.path = s.text("path", spec.path);
    if (c.failed())
      break;
    if (auto [it, fresh] = seen.try_emplace(spec.name, i); !fresh)
      s.require("name", false,
                "duplicate adapter name, first used by adapters[" + std::to_string(it->second) + ']');
    out.push_back(std::move(spec));
  }
  return out;
}

adapter_generate_options read_generate(section s) {
  adapter_generate_options o;
  s.allow_only({"count", "prefix", "ranks"});
  o.count = s.u32("count", o.count, 0, max_generated_adapters);
  o.prefix = s.text("prefix", o.prefix);
  check_name(s, "prefix", o.prefix, true);
  if (const toml::node* n = s.node("ranks"); n != nullptr && !s.check().failed()) {
    const toml::array* ranks = n->as_array();
    if (ranks == nullptr) {
      s.check().fail(n->source(), s.path("ranks"), "expected an array of integers, got " + typed_text(*n));
      return o;
    }
    o.ranks.clear();
    for (std::size_t i = 0; i < ranks->size(); ++i) {
      const std::string path = s.path("ranks") + '[' + std::to_string(i) + ']';
      if (auto rank = read_unsigned(s.check(), *ranks->get(i), path, 1, max_lora_rank, u32_max))
        o.ranks.push_back(static_cast<std::uint32_t>(*rank));
    }
  }
  s.require("ranks", o.count == 0 || !o.ranks.empty(), "must not be empty when count > 0");
  return o;
}

/// An explicit adapter whose name adapters_generate also produces is an error.
void check_generated_collisions(checker& c, const toml::node* adapters, const deployment_options& o) {
  const auto& gen = o.adapter_generate;
  for (std::size_t i = 0; i < o.adapters.size() && !c.failed(); ++i) {
    const auto& name = o.adapters[i].name;
    if (!generated_index(name, gen.prefix, gen.count))
      continue;
    const toml::node& entry = *adapters->as_array()->get(i);
    const toml::node& name_node = *entry.as_table()->get("name");
    c.reject(name_node, "adapters[" + std::to_string(i) + "].name",
             "collides with a name made by adapters_generate (prefix " + in_quotes(gen.prefix) + ", count " +
               std::to_string(gen.count) + ", names " + generated_adapter_name(gen.prefix, 0) + " .. " +
               generated_adapter_name(gen.prefix, gen.count - 1) + ')');
  }
}

// -- document ------------------------------------------------------------------

/// Top level: only known sections, each a table ([[adapters]]: an array of tables).
void check_sections(checker& c, const toml::table& doc) {
  for (auto&& [key, value] : doc) {
    const std::string_view name = key.str();
    bool known = false;
    for (std::string_view s : section_names)
      known = known || s == name;
    if (!known) {
      std::string what =
        value.is_table() ? "unknown section [" + std::string(name) + ']' : std::string("unknown key");
      if (auto hint = closest(name, section_names); !hint.empty())
        what += "; did you mean [" + std::string(hint) + "]?";
      c.fail(key.source(), name, what);
    } else if (name == "adapters") {
      if (!value.is_array_of_tables() && !(value.is_array() && value.as_array()->empty())) {
        std::string what = "expected an array of tables ([[adapters]]), got " + typed_text(value);
        if (value.is_table() && value.as_table()->contains("generate"))
          what += "; generated adapters go in [adapters_generate]";
        c.fail(value.source(), name, what);
      }
    } else if (!value.is_table()) {
      c.fail(value.source(), name,
             "expected a table ([" + std::string(name) + "]), got " + typed_text(value));
    }
  }
}

std::variant<deployment_options, config_error>
read_document(const toml::table& doc, const std::string& source, const config_catalog& catalog) {
  checker c{source};
  check_sections(c, doc);
  auto at = [&c, &doc](std::string_view name) {
    return section{c, doc.get_as<toml::table>(name), std::string(name)};
  };
  deployment_options o;
  o.source = source;
  if (!c.failed()) {
    o.server = read_server(at("server"));
    o.http = read_http(at("http"));
    o.logging = read_logging(at("logging"));
    o.caf = read_caf(at("caf"));
    o.model = read_model(at("model"), catalog);
    o.backend = read_backend(at("backend"), catalog);
    o.memory_pool = read_memory_pool(at("memory_pool"));
    o.scheduler = read_scheduler(at("scheduler"), catalog);
    o.classifier = read_classifier(at("classifier"), catalog);
    o.queue_tuner = read_queue_tuner(at("queue_tuner"));
    o.adapter_cache = read_adapter_cache(at("adapter_cache"), catalog);
    o.copy_engine = read_copy_engine(at("copy_engine"));
    o.metrics = read_metrics(at("metrics"));
    o.cluster = read_cluster(at("cluster"));
    o.adapters = read_adapters(c, doc.get("adapters"));
    o.adapter_generate = read_generate(at("adapters_generate"));
    if (!c.failed())
      check_generated_collisions(c, doc.get("adapters"), o);
    if (!c.failed() && o.http.chat_template == "model")
      at("http").require("chat_template", !o.model.path.empty(),
                         "\"model\" is the chat template of the model directory (model.path), which is not set");
  }
  if (auto error = c.take_error())
    return config_error{std::move(*error)};
  return o;
}

config_error syntax_error(const std::string& source, const toml::parse_error& e) {
  return config_error{position(source, e.source()) + ": TOML syntax error: " + std::string(e.description())};
}

std::variant<deployment_options, config_error>
parse_or_throw(std::string_view toml_text, const std::string& source, const config_catalog& catalog) {
#if TOML_EXCEPTIONS
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    return syntax_error(source, e);
  }
  return read_document(doc, source, catalog);
#else
  toml::parse_result result = toml::parse(toml_text, source);
  if (!result)
    return syntax_error(source, result.error());
  return read_document(result.table(), source, catalog);
#endif
}

} // namespace

// -- loading -------------------------------------------------------------------

std::variant<deployment_options, config_error>
parse_config(std::string_view toml_text, const std::string& source, const config_catalog& catalog) {
  try {
    return parse_or_throw(toml_text, source, catalog);
  } catch (const std::exception& e) {
    return config_error{source + ": cannot load the configuration: " + e.what()};
  }
}

std::variant<deployment_options, config_error>
load_config_file(const std::string& path, const config_catalog& catalog) {
  try {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      return config_error{path + ": cannot read the config file: it is a directory"};
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return config_error{path + ": cannot read the config file: " +
                          std::error_code(errno, std::generic_category()).message()};
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad())
      return config_error{path + ": cannot read the config file: read error"};
    return parse_config(text, path, catalog);
  } catch (const std::exception& e) {
    return config_error{path + ": cannot read the config file: " + e.what()};
  }
}

// -- adapters ------------------------------------------------------------------

std::string generated_adapter_name(std::string_view prefix, std::uint32_t index) {
  return std::string(prefix) + std::to_string(index);
}

std::vector<adapter_spec> expand_adapters(const deployment_options& opts) {
  const auto& gen = opts.adapter_generate;
  std::vector<adapter_spec> out;
  out.reserve(opts.adapters.size() + gen.count);
  out.insert(out.end(), opts.adapters.begin(), opts.adapters.end());
  for (std::uint32_t i = 0; i < gen.count; ++i) {
    adapter_spec spec;
    spec.name = generated_adapter_name(gen.prefix, i);
    if (!gen.ranks.empty())
      spec.rank = gen.ranks[i % gen.ranks.size()];
    out.push_back(std::move(spec));
  }
  return out;
}

} // namespace troupe
