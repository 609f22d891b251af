#!/usr/bin/env bash
# Copies what tools/gpu-check.sh needs and a GPU machine may lack into
# .gpu-carry/ (ignored by git): GoogleTest's sources from Debian's
# googletest package and nlohmann-json's headers (tools/install-deps.sh
# installs both), for the stand-alone build, troupe-hf-parity and
# cuda_model_parity_test's cpu model. Carry the folder along to the GPU
# machine and run tools/gpu-check.sh there.
#
#   tools/gpu-carry.sh [--server]
#
# --server: also the server as this machine built it (build/, with nvcc, so
# with the cuda backend): troupe-serve, troupe-client and troupe-mkmodel
# stripped, and the shared libraries they load that are neither the C and
# C++ runtime nor CUDA's (CAF, ZeroMQ, spdlog, ...), into .gpu-carry/server.
# gpu-check.sh then also serves the default config on the cuda backend
# (tests/e2e/default_config.sh). The GPU machine must run the same x86-64
# and a C/C++ runtime at least as new as this one's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
server=0
case "${1:-}" in
  "") ;;
  --server) server=1 ;;
  *) echo "gpu-carry: unknown argument $1 (usage: gpu-carry.sh [--server])" >&2; exit 2 ;;
esac
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
# The reference BLAS an older version carried: no longer read.
rm -rf "$root/.gpu-carry/blas"

rm -rf "$root/.gpu-carry/server"
if [ "$server" = 1 ]; then
  bins=(troupe-serve troupe-client troupe-mkmodel)
  for b in "${bins[@]}"; do
    [ -x "$root/build/bin/$b" ] || { echo "gpu-carry: build/bin/$b missing (tools/build.sh)" >&2; exit 1; }
  done
  readelf -d "$root/build/bin/troupe-serve" | grep -q "libcudart" ||
    { echo "gpu-carry: build/ has no cuda backend (nvcc was not found when it was configured)" >&2; exit 1; }
  out="$root/.gpu-carry/server"
  mkdir -p "$out/bin" "$out/lib"
  for b in "${bins[@]}"; do
    strip -o "$out/bin/$b" "$root/build/bin/$b"
  done
  # What the binaries load, less the C/C++ runtime (glibc's libresolv too: it
  # must match the machine's libc) and CUDA's libraries (the GPU machine has
  # its own).
  for b in "${bins[@]}"; do ldd "$root/build/bin/$b"; done | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libresolv|libgcc_s|libstdc\+\+)\.so|/ld-linux|/libcu' |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done
fi
du -sh "$root/.gpu-carry"
