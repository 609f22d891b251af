#!/usr/bin/env bash
# Issue 9's multi-node check at a small scale: three troupe-serve processes
# from one config (nodes on loopback, CAF's middleman between them) serve
# multi-turn conversations from the ShareGPT conversations trace (its first
# rows, tests/e2e/data) on the cpu backend. Sessions migrate (KV pulled between nodes), the load spreads over
# the three, and one worker node is killed while it has requests in flight.
# Every turn must still end normally with the same tokens as on one node
# (greedy decoding: the conversation's history depends on every reply). The
# cpu backend is batch-invariant (gpu/cpu_gemm), so a turn's tokens do not
# depend on the batches it ran in, on recomputing after the kill, or on KV
# pulled from another node: bit for bit, not only up to near-ties.
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "cluster: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

"$bin/troupe-mkmodel" --out "$work/model" --hidden 256 --intermediate 512 --layers 4 --heads 8 --kv-heads 4 \
  --vocab 512 --max-context 1024 --seed 3 > /dev/null

# Free ports for the three middleman listeners.
ports=($(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
PY
))

write_config() { # $1: file, $2: cluster section or ""
  cat > "$1" <<TOML
[server]
endpoint = "tcp://127.0.0.1:*"
drain_timeout_s = 5.0
[logging]
level = "info"
[caf]
scheduler_threads = 1
[model]
path = "$work/model"
[backend]
kind = "cpu"
[memory_pool]
page_tokens = 8
pages = 96
host_pages = 256
[scheduler]
session_fraction = 0.5
[metrics]
log_interval_s = 0.0
$2
TOML
}
write_config "$work/one.toml" ""
write_config "$work/three.toml" "[cluster]
nodes = [\"127.0.0.1:${ports[0]}\", \"127.0.0.1:${ports[1]}\", \"127.0.0.1:${ports[2]}\"]
imbalance = 0
advise_place_lead_s = 0.1
connect_timeout_s = 30
node_timeout_s = 5"

start() { # $1: log, then troupe-serve arguments; sets $pid
  "$bin/troupe-serve" "${@:2}" > "$1" 2>&1 &
  pid=$!
  pids+=("$pid")
}
wait_listening() { # $1: log; prints the endpoint
  for _ in $(seq 1 600); do
    local ep
    ep="$(sed -n 's/^troupe-serve: listening on //p' "$1")"
    if [ -n "$ep" ]; then echo "$ep"; return 0; fi
    sleep 0.05
  done
  return 1
}
stat() { # $1: endpoint, $2: name
  "$bin/troupe-client" --endpoint "$1" --stats --timeout-ms 5000 | tr ',{}' '\n\n\n' \
    | sed -n "s/^\"$2\":\([0-9.]*\)$/\1/p"
}
bench() { # $1: endpoint, $2: records
  "$bin/troupe-bench" --endpoint "$1" --conversations tests/e2e/data/sharegpt_conversations_head.csv \
    --requests 24 --rate 24 --think 0.2 --max-rounds 4 --turn-tokens 32:64 --time-scale 1 --advise \
    --records "$2" --no-progress
}

# The reference: one node.
start "$work/one.log" --config "$work/one.toml"
one=$pid
ep="$(wait_listening "$work/one.log")" || fail "the single node did not start"
t0=$(date +%s.%N); bench "$ep" "$work/one.csv" > "$work/one.out" 2>&1 || fail "the single-node run failed: $(cat "$work/one.out")"
echo "cluster: one node took $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; kill -INT "$one"; wait "$one" || true

# Three nodes; node 0 holds the router and takes the clients.
start "$work/n1.log" --config "$work/three.toml" --node 1
start "$work/n2.log" --config "$work/three.toml" --node 2
victim=$pid
start "$work/n0.log" --config "$work/three.toml" --node 0
ep="$(wait_listening "$work/n0.log")" || fail "the router node did not start"
bench "$ep" "$work/three.csv" > "$work/three.out" 2>&1 &
bp=$!
# Kill node 2 while it has requests in flight: stopped first, so that what
# it holds stays in flight while the router is asked (its stats time out).
killed=0
placed=()
for _ in $(seq 1 400); do
  n="$(stat "$ep" node2_in_flight || true)"
  done_before="$(stat "$ep" finished_length || true)"
  if [ "${n%.*}" != "" ] && [ "${n%.*}" -gt 0 ] && [ "${done_before%.*}" -ge 36 ]; then
    # The spread is read before the first stop: each stop stalls node 2 for
    # the router's 2 s stats limit, and a stalled node is given less.
    [ ${#placed[@]} -eq 3 ] || placed=($(for i in 0 1 2; do stat "$ep" "node${i}_placed"; done))
    kill -STOP "$victim"
    n="$(stat "$ep" node2_in_flight || true)"
    if [ "${n%.*}" != "" ] && [ "${n%.*}" -gt 0 ]; then
      kill -9 "$victim"
      killed=1
      break
    fi
    kill -CONT "$victim"
  fi
  sleep 0.05
done
[ "$killed" = 1 ] || fail "node 2 never had requests in flight"
wait "$bp" || fail "the three-node run lost requests: $(cat "$work/three.out")"

# No request lost, every turn ended normally with the reference's tokens.
python3 - "$work/one.csv" "$work/three.csv" <<'PY' || fail "the runs differ"
import csv, sys
def load(p):
    return {r["id"]: r for r in csv.DictReader(open(p))}
one, three = load(sys.argv[1]), load(sys.argv[2])
assert len(one) >= 48 and one.keys() == three.keys(), (len(one), len(three))
bad = [i for i, r in three.items() if r["outcome"] != "length"]
assert not bad, f"turns that did not end normally: {bad}"
diff = [i for i in one if (one[i]["tokens_fnv"], one[i]["completion_tokens"]) != (three[i]["tokens_fnv"], three[i]["completion_tokens"])]
assert not diff, f"turns whose tokens differ from one node's: {diff}"
print(f"cluster: {len(three)} turns of 24 conversations, all ended normally with the same tokens as on one node")
PY

alive="$(stat "$ep" router_nodes_alive)"
resub="$(stat "$ep" router_resubmitted)"
pulls="$(stat "$ep" router_kv_pulls)"
migr="$(stat "$ep" router_migrations)"; pf="$(stat "$ep" router_kv_pulls_failed)"
reused="$(stat "$ep" prompt_tokens_reused)"
late="$(stat "$ep" router_advisories_placed_late)"
echo "cluster: nodes alive $alive, resubmitted $resub, migrations $migr, KV pulls $pulls (failed $pf), placed before the first stop ${placed[*]}, prompt tokens reused $reused, advisories placed near their turn $late"
# Advisories come 0.2 s ahead and are placed 0.1 s before their turn.
[ "${late%.*}" -ge 1 ] || fail "no advisory was placed near its turn"
[ "${alive%.*}" -eq 2 ] || fail "expected two nodes alive after the kill"
[ "${resub%.*}" -ge 1 ] || fail "node 2's requests were not placed again"
if [ "${pulls%.*}" -lt 1 ]; then
  # A migration to or from node 2 while it was stopped is never pulled; on a
  # loaded machine it can be the run's only one. Once more, from the start.
  if [ -z "${TROUPE_CLUSTER_RETRY:-}" ]; then
    echo "cluster: no KV pull in this run (migrations $migr, failed pulls $pf); running it once more"
    cleanup
    trap - EXIT
    TROUPE_CLUSTER_RETRY=1 exec "$0" "$@"
  fi
  fail "no session migrated"
fi
[ "${reused%.*}" -gt 0 ] || fail "no session reused its KV"
# The router's stats: counters add up over the nodes, a level (a percentile,
# the uptime) is the largest node's and each node's is given, node 2 (killed)
# has none.
"$bin/troupe-client" --endpoint "$ep" --stats --timeout-ms 5000 > "$work/stats.json" || fail "no stats"
python3 - "$work/stats.json" <<'PY' || fail "the router's stats do not add up"
import json, sys
r = json.load(open(sys.argv[1]))
stats, counters, levels = r["stats"], set(r["counters"]), set(r["levels"])
assert {"intake_accepted", "output_tokens", "router_migrations", "finished_length"} <= counters, counters
assert {"ttft_ms_p99", "uptime_s", "mean_batch_size"} <= levels, levels
assert "requests_running" not in counters | levels
for name in ("ttft_ms_p99", "e2e_ms_p50", "uptime_s", "mean_batch_size"):
    nodes = [stats.get("node%d_%s" % (i, name)) for i in range(3)]
    assert nodes[0] is not None and nodes[1] is not None and nodes[2] is None, (name, nodes)
    assert stats[name] == max(nodes[0], nodes[1]), (name, stats[name], nodes)
    assert "node0_" + name in levels
hits, misses = stats["adapter_cache_hits"], stats["adapter_cache_misses"]
assert stats["adapter_cache_hit_rate"] == (hits / (hits + misses) if hits + misses else 0), stats
print("cluster: stats add counters over the nodes, levels are the largest node's (uptime %.1f s; nodes %.1f, %.1f)"
      % (stats["uptime_s"], stats["node0_uptime_s"], stats["node1_uptime_s"]))
PY
# Load spread: until node 2 was first stopped each node took at least an
# eighth of the turns.
# Placement follows load, not counts: sessions stay with their KV,
# conversations differ in length, and on a busy machine a node the OS runs
# less finishes later and gets less (the larger run in docs/benchmarks.md
# spreads 3,474 turns within 4 %).
total=$(( ${placed[0]%.*} + ${placed[1]%.*} + ${placed[2]%.*} ))
for p in "${placed[@]}"; do
  [ $(( ${p%.*} * 8 )) -ge "$total" ] || fail "load not spread: ${placed[*]}"
done
echo "cluster: ok"
