#!/usr/bin/env bash
# The README's commands as a person runs them: troupe-serve on a config file,
# then troupe-client streams 16 tokens and a done line with timings; an
# unknown adapter makes the client exit non-zero with the error; an adapter
# loaded at run time serves, and after unloading it is unknown again.
set -euo pipefail
bin="$1"
log="$(mktemp)"
out="$(mktemp)"
err="$(mktemp)"
cfg="$(mktemp --suffix=.toml)"
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log" "$out" "$err" "$cfg"' EXIT

# The shipped config, on a free port so parallel runs do not collide.
sed 's|^endpoint = .*|endpoint = "tcp://127.0.0.1:*"|' config/sim-h100-llama7b.toml > "$cfg"
"$bin/troupe-serve" --config "$cfg" --log-level warn > "$log" 2>&1 &
pid=$!
endpoint=""
for _ in $(seq 1 200); do
  endpoint="$(sed -n 's/^troupe-serve: listening on //p' "$log")"
  [ -n "$endpoint" ] && break
  kill -0 "$pid" || { cat "$log"; exit 1; }
  sleep 0.05
done
[ -n "$endpoint" ] || { echo "server did not start"; cat "$log"; exit 1; }

"$bin/troupe-client" --endpoint "$endpoint" --prompt hello --max-tokens 16 --json > "$out" 2> "$err"
tokens=$(grep -o '"type":"token"[^}]*"tokens":\[[^]]*\]' "$out" | sed 's/.*"tokens":\[\([^]]*\)\]/\1/' | tr ',' '\n' | grep -c .)
[ "$tokens" -eq 16 ] || { echo "expected 16 streamed tokens, got $tokens"; cat "$out"; exit 1; }
grep -q '"type":"done".*"completion_tokens":16' "$out" || { echo "no done with 16 tokens"; cat "$out"; exit 1; }
grep -q '"timings":{"queue_ms":' "$out" || { echo "done has no timings"; cat "$out"; exit 1; }
grep -q 'finish_reason=length' "$err" || { cat "$err"; exit 1; }

if "$bin/troupe-client" --endpoint "$endpoint" --prompt hi --adapter no-such 2> "$err"; then
  echo "client exited 0 on an error reply"; exit 1
fi
grep -q 'unknown_adapter' "$err" || { cat "$err"; exit 1; }
# Choices reach the server, whose sim backend samples from no logits: refused, saying so.
if "$bin/troupe-client" --endpoint "$endpoint" --prompt hi --choice yes --choice no 2> "$err"; then
  echo "client exited 0 on choices the sim backend cannot hold"; exit 1
fi
grep -q 'bad_request.*"choice".*sim backend' "$err" || { cat "$err"; exit 1; }

# Adapters at run time (the sim backend needs only a rank): load, use, unload.
"$bin/troupe-client" --endpoint "$endpoint" --load-adapter extra:32 > "$out"
grep -q '"status":"loaded"' "$out" || { echo "load_adapter failed"; cat "$out"; exit 1; }
"$bin/troupe-client" --endpoint "$endpoint" --prompt hi --adapter extra --max-tokens 4 2> "$err" > /dev/null
grep -q 'completion_tokens=4' "$err" || { cat "$err"; exit 1; }
"$bin/troupe-client" --endpoint "$endpoint" --unload-adapter extra > "$out"
grep -q '"status":"unloaded"' "$out" || { echo "unload_adapter failed"; cat "$out"; exit 1; }
if "$bin/troupe-client" --endpoint "$endpoint" --prompt hi --adapter extra 2> "$err"; then
  echo "an unloaded adapter still served"; exit 1
fi
grep -q 'unknown_adapter' "$err" || { cat "$err"; exit 1; }

kill -INT "$pid"
wait "$pid"
echo "serve_and_client: ok"
