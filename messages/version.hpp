// The build's version (CMakeLists.txt's project VERSION), for --version and
// GET /version.
#pragma once

#include <string_view>

namespace troupe {

/// "MAJOR.MINOR.PATCH", as CMake's project() names it.
std::string_view version() noexcept;

} // namespace troupe
