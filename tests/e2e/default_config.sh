#!/usr/bin/env bash
# The embedded default as a person runs it: troupe-serve with no --config
# serves the generated demo model on the cpu backend; troupe-client gets real
# text; an adapter changes it; the same seed gives the same text.
# Usage: default_config.sh BIN_DIR [cuda]
#   cuda: the same file with backend.kind = "cuda", over a model of the demo's
#   size in the cuda backend's shapes (head_dim 64, adapters on q, k, v and
#   o only), fp16 on the GPU; exits 77 (skipped) where no CUDA device is
#   visible.
set -euo pipefail
bin="$1"
backend="${2:-cpu}"
log="$(mktemp)"
config="$(mktemp --suffix=.toml)"
model="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$log" "$config" "$model"' EXIT
args=(--endpoint "tcp://127.0.0.1:*" --log-level warn)
if [ "$backend" != cpu ]; then
  "$bin/troupe-mkmodel" --out "$model" --hidden 256 --heads 4 --kv-heads 2 --layers 4 --adapters 3 \
    --ranks 4,8,16 --targets q_proj,k_proj,v_proj,o_proj --seed 1 > /dev/null
  sed -e "s/^kind = \"cpu\"/kind = \"$backend\"/" -e "s|\"models/demo|\"$model|" config/default.toml > "$config"
  grep -q "^kind = \"$backend\"" "$config"
  grep -q "^path = \"$model/adapters/lora-2\"" "$config"
  args+=(--config "$config")
fi
"$bin/troupe-serve" "${args[@]}" > "$log" 2>&1 &
pid=$!
endpoint=""
for _ in $(seq 1 400); do
  endpoint="$(sed -n 's/^troupe-serve: listening on //p' "$log")"
  [ -n "$endpoint" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$log"
    if grep -q "no CUDA device is visible" "$log"; then
      pid=""
      exit 77
    fi
    exit 1
  fi
  sleep 0.05
done
[ -n "$endpoint" ] || { echo "server did not start"; cat "$log"; exit 1; }

ask() { "$bin/troupe-client" --endpoint "$endpoint" --prompt "The river runs" --max-tokens 12 --no-stream "$@" 2>/dev/null; }
base="$(ask --seed 3)"
again="$(ask --seed 3)"
adapted="$(ask --seed 3 --adapter demo-r8)"
greedy="$(ask --temperature 0)"
[ -n "$(echo "$base" | tr -d '[:space:]')" ] || { echo "no text from the base model"; exit 1; }
[ "$base" = "$again" ] || { echo "same seed, different text: '$base' vs '$again'"; exit 1; }
[ "$base" != "$adapted" ] || { echo "the adapter did not change the text: '$base'"; exit 1; }
[ -n "$greedy" ] || { echo "no greedy text"; exit 1; }
echo "base:    $base"
echo "adapted: $adapted"
kill -INT "$pid"
wait "$pid"
echo "default_config on $backend: ok"
