#!/usr/bin/env bash
# Configures (once) and builds Troupe into build/ with Ninja. Extra arguments
# go to the build step (e.g. a target name).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${TROUPE_JOBS:-$(nproc)}"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${TROUPE_BUILD_TYPE:-RelWithDebInfo}" ${TROUPE_CMAKE_ARGS:-}
fi
cmake --build build -j "$jobs" "$@"
