#!/usr/bin/env bash
# Installs Troupe's build dependencies from Debian's packages; skips what is
# already present (idempotent). Called by tools/test.sh and tools/quickstart.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev libboost-dev libzmq3-dev cppzmq-dev libspdlog-dev
  libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev sentencepiece libpcre2-dev
  python3-numpy python3-regex python3-jinja2
)
# Plots for docs/results.md (tools/plot-latency.sh): only when asked for.
if [ "${1:-}" = "--plots" ]; then
  packages+=(gnuplot-nox)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
