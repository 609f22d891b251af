#!/usr/bin/env bash
# The embedded default as a person runs it: troupe-serve with no --config
# serves the generated demo model on the cpu backend; troupe-client gets real
# text; an adapter changes it; the same seed gives the same text.
set -euo pipefail
bin="$1"
log="$(mktemp)"
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
"$bin/troupe-serve" --endpoint "tcp://127.0.0.1:*" --log-level warn > "$log" 2>&1 &
pid=$!
endpoint=""
for _ in $(seq 1 400); do
  endpoint="$(sed -n 's/^troupe-serve: listening on //p' "$log")"
  [ -n "$endpoint" ] && break
  kill -0 "$pid" || { cat "$log"; exit 1; }
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
echo "default_cpu: ok"
