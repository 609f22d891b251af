#!/usr/bin/env bash
# Clients that misbehave, and the server's books after them: troupe-serve
# (the embedded default's demo model, cpu backend, [http] listen) takes 200
# requests from concurrent clients of every kind (completions streamed and
# dropped after a few chunks, whole and hung up on, several choices, chats,
# background responses cancelled, deleted or read, background streams
# dropped then resumed or cancelled, beam searches kept or hung up on),
# over three adapters; once all is quiet, every request the intake accepted
# has finished exactly once (the finish counters add up to the accepted),
# none is left in flight, and every page of the pool is free or held by
# what holds pages when nothing runs (cached prompts, kept sessions,
# resident adapters). Run on the default's pool, then on one of 120 pages
# with 60 host pages, on-demand pages, the adaptive policy and 6 running
# (preemption, swaps, recomputes). Only answers, statuses and counters are
# checked, never times.
# Usage: chaos.sh BIN_DIR (from the source tree: the demo model's paths are relative)
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
sed 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "chatml"/' config/default.toml > "$work/roomy.toml"
sed -e 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "chatml"/' -e 's/^pages = 0$/pages = 120\nhost_pages = 60/' \
  -e 's/^kv_reservation = "full"/kv_reservation = "on_demand"/' -e '0,/^policy = "fcfs"/s//policy = "adaptive"/' \
  -e 's/^max_running = 32/max_running = 6/' config/default.toml > "$work/tight.toml"
grep -q '^pages = 120$' "$work/tight.toml"
grep -q '^host_pages = 60$' "$work/tight.toml"
grep -q '^kv_reservation = "on_demand"$' "$work/tight.toml"
grep -q '^policy = "adaptive"$' "$work/tight.toml"
grep -q '^max_running = 6$' "$work/tight.toml"
. "$(dirname "$0")/serve_lib.sh"
for cfg in roomy tight; do
  cp "$work/$cfg.toml" "$work/serve.toml"
  serve "$cfg"
  python3 tests/e2e/chaos_clients.py "$http" 7 200 || { echo "chaos ($cfg): the books do not add up"; exit 1; }
  stop
  echo "chaos: $cfg: the books add up"
done
