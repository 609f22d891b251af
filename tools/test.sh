#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with
# ctest. Extra arguments go to ctest (e.g. -L cpu, -R wire).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tools/install-deps.sh
tools/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
