#!/usr/bin/env bash
# Copies what tools/gpu-check.sh needs and a GPU machine may lack into
# .gpu-carry/ (ignored by git): GoogleTest's sources from Debian's
# googletest package (tools/install-deps.sh installs it). Carry the folder
# along to the GPU machine and run tools/gpu-check.sh there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src=/usr/src/googletest
[ -f "$src/CMakeLists.txt" ] || { echo "gpu-carry: $src missing (apt-get install googletest)" >&2; exit 1; }
rm -rf "$root/.gpu-carry/googletest"
mkdir -p "$root/.gpu-carry"
cp -r "$src" "$root/.gpu-carry/googletest"
du -sh "$root/.gpu-carry"
