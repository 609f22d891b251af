// Logging set-up from the [logging] section (spdlog). Called once by
// troupe-serve before the deployment starts.
#pragma once

#include "runtime/options.hpp"

#include <optional>
#include <string>

namespace troupe {

/// Applies level and sink; an error message if the level or file is bad.
std::optional<std::string> configure_logging(const logging_options& opts);

} // namespace troupe
