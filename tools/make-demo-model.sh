#!/usr/bin/env bash
# Writes the demo model config/default.toml serves (models/demo: a ~3M
# parameter Llama, its sentencepiece tokenizer and three PEFT adapters) with
# troupe-mkmodel, unless it is already there. Usage: make-demo-model.sh BIN_DIR [OUT_DIR]
set -euo pipefail
bin="$1"
out="${2:-models/demo}"
if [ -f "$out/config.json" ] && [ -f "$out/model.safetensors" ] && [ -f "$out/tokenizer.model" ] \
   && [ -f "$out/adapters/lora-2/adapter_model.safetensors" ]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d "$(dirname "$out")/.demo.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$bin/troupe-mkmodel" --out "$tmp" --adapters 3 --ranks 4,8,16 --targets all-linear --seed 1 > /dev/null
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "make-demo-model: wrote $out"
