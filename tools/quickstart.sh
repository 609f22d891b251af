#!/usr/bin/env bash
# Installs what is missing, builds, and starts troupe-serve on the embedded
# default deployment (config/default.toml, which serves the demo model it
# generates into models/demo) or on the file given as $1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tools/install-deps.sh
tools/build.sh troupe-serve troupe-client troupe-mkmodel
tools/make-demo-model.sh build/bin
if [ $# -gt 0 ]; then
  exec build/bin/troupe-serve --config "$1"
fi
exec build/bin/troupe-serve
