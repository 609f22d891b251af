// The deployment-file loader: parses and validates a TOML deployment file once
// into plain `deployment_options` (runtime/options.hpp). Used by troupe-serve and
// troupe-sim at startup; actors and policies only ever see the option structs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/options.hpp"

namespace troupe::openai {
struct chat_formats;
}

namespace troupe {

/// The names valid for each string-valued choice in the file. The caller fills
/// it from the registries (backends, GPU presets, model presets, policies), so
/// the loader itself knows nothing about which policies exist.
struct config_catalog {
  std::vector<std::string> backends;            ///< backend.kind
  std::vector<std::string> gpus;                ///< backend.gpu
  std::vector<std::string> model_presets;       ///< model.preset
  std::vector<std::string> scheduling_policies; ///< scheduler.policy
  std::vector<std::string> classifier_policies; ///< classifier.policy
  std::vector<std::string> eviction_policies;   ///< adapter_cache.policy
  std::vector<std::string> prefetch_policies;   ///< adapter_cache.predictor
  std::vector<std::string> output_predictors;   ///< classifier.predictor
};

/// Why a deployment file was rejected: one line naming the file, the position
/// and the key path, e.g.
/// `deploy.toml:12:15: scheduler.max_running: must be at least 1, got 0`.
struct config_error {
  std::string message;
};

// -- loading -------------------------------------------------------------------

/// Parses `toml_text` and validates every key against options.hpp and `catalog`.
/// `source` names the text in error messages and becomes `deployment_options::source`.
/// Keys left out keep the defaults of options.hpp. Returns the first error found.
/// Never throws. Pure: callable from any thread.
std::variant<deployment_options, config_error>
parse_config(std::string_view toml_text, const std::string& source, const config_catalog& catalog);

/// Reads the file at `path` and hands it to `parse_config` with `path` as the
/// source. An unreadable file is a `config_error` naming the path. Never throws.
std::variant<deployment_options, config_error>
load_config_file(const std::string& path, const config_catalog& catalog);

/// The text of config/default.toml, compiled into the binary by CMake
/// (runtime/embedded_default.cpp.in). troupe-serve uses it when no --config is given.
std::string_view embedded_default_config() noexcept;

/// The chat template texts the [http] section gives (chat_system, ...;
/// used with chat_template = "custom"). Declared here, defined with the
/// config reader; messages/openai.hpp has the type.
openai::chat_formats chat_formats_of(const http_options& o);

// -- adapters ------------------------------------------------------------------

/// Name of the `index`-th generated adapter (0-based): `<prefix><index>`.
/// The one place that spells the naming rule of [adapters_generate].
std::string generated_adapter_name(std::string_view prefix, std::uint32_t index);

/// Every adapter of the deployment: the explicit [[adapters]] entries in file
/// order, then the `adapters_generate.count` generated ones, whose ranks cycle
/// through `adapters_generate.ranks`. Names are unique when `opts` came from
/// `parse_config`. Pure: callable from any thread.
std::vector<adapter_spec> expand_adapters(const deployment_options& opts);

} // namespace troupe
