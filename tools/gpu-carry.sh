#!/usr/bin/env bash
# Copies what tools/gpu-check.sh needs and a GPU machine may lack into
# .gpu-carry/ (ignored by git): GoogleTest's sources from Debian's
# googletest package and nlohmann-json's headers (tools/install-deps.sh
# installs both), for the stand-alone build and troupe-hf-parity. Carry the folder
# along to the GPU machine and run tools/gpu-check.sh there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src=/usr/src/googletest
[ -f "$src/CMakeLists.txt" ] || { echo "gpu-carry: $src missing (apt-get install googletest)" >&2; exit 1; }
rm -rf "$root/.gpu-carry/googletest"
mkdir -p "$root/.gpu-carry"
cp -r "$src" "$root/.gpu-carry/googletest"
json=/usr/include/nlohmann
[ -f "$json/json.hpp" ] || { echo "gpu-carry: $json missing (apt-get install nlohmann-json3-dev)" >&2; exit 1; }
rm -rf "$root/.gpu-carry/include"
mkdir -p "$root/.gpu-carry/include"
cp -r "$json" "$root/.gpu-carry/include/nlohmann"
du -sh "$root/.gpu-carry"
