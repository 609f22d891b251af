// Internal to gpu/: parsing JSON from files we do not trust (config.json,
// adapter_config.json, safetensors headers) with a bound on nesting depth.
// Include only from .cpp files: it pulls in nlohmann/json.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace troupe::gpu::detail {

/// Deepest nesting a parsed document keeps.
inline constexpr int max_json_depth = 64;

/// Parses `text` (discarded on a syntax error when !allow_exceptions). Values
/// nested deeper than max_json_depth are dropped and set `too_deep`:
/// nlohmann's dump() recurses, so a hostile file could overflow the stack.
inline nlohmann::json parse_bounded(std::string_view text, bool& too_deep,
                                    bool allow_exceptions) {
  too_deep = false;
  const nlohmann::json::parser_callback_t keep =
    [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > max_json_depth)
        too_deep = true;
      return depth <= max_json_depth;
    };
  return nlohmann::json::parse(text.begin(), text.end(), keep, allow_exceptions);
}

} // namespace troupe::gpu::detail
