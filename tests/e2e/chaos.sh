#!/usr/bin/env bash
# Clients that misbehave, and the server's books after them: troupe-serve
# (the embedded default's demo model, cpu backend, [http] listen) takes 200
# requests from concurrent clients of every kind (completions streamed and
# dropped after a few chunks, whole and hung up on, several choices, chats,
# background responses cancelled, deleted or read, background streams
# dropped then resumed or cancelled, beam searches kept or hung up on,
# turns of three shared conversations whole or dropped, conversations
# deleted while their background turn runs, two batches of completions,
# one cancelled midway),
# over three adapters; once all is quiet, every request the intake accepted
# has finished exactly once (the finish counters add up to the accepted),
# none is left in flight, and every page of the pool is free or held by
# what holds pages when nothing runs (cached prompts, kept sessions,
# resident adapters); each shared conversation's items are whole turns, each
# batch's lines are answered once in its output and error files, and
# with store_dir its file and those of the kept responses are what the
# front keeps. Run on the default's pool (with store_dir), then on one of 120 pages
# with 60 host pages, on-demand pages, the adaptive policy and 6 running
# (preemption, swaps, recomputes). Only answers, statuses and counters are
# checked, never times.
# Usage: chaos.sh BIN_DIR (from the source tree: the demo model's paths are relative)
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
sed "s|^listen = \"\"\$|listen = \"127.0.0.1:0\"\nchat_template = \"chatml\"\nstore_dir = \"$work/store\"|" \
  config/default.toml > "$work/roomy.toml"
grep -q "^store_dir = \"$work/store\"\$" "$work/roomy.toml"
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
  if [ "$cfg" = roomy ]; then
    # The files are what the front keeps: the three shared conversations
    # (each with the log of the turns added since it was written whole),
    # and as many responses as it holds.
    kept="$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
      "http://$http/metrics" | sed -n 's/^troupe_http_responses_kept //p')"
    [ "$(ls "$work/store/conversations" | grep -c '\.json$')" = 3 ] \
      || { echo "chaos: conversation files"; ls "$work/store/conversations"; exit 1; }
    [ "$(ls "$work/store/conversations" | grep -vc '\.\(json\|log\)$')" = 0 ] \
      || { echo "chaos: other conversation files"; ls "$work/store/conversations"; exit 1; }
    [ "$(ls "$work/store/responses" | wc -l)" = "${kept%.*}" ] || { echo "chaos: $kept kept, files:"; ls "$work/store/responses" | wc -l; exit 1; }
  fi
  stop
  echo "chaos: $cfg: the books add up"
done
