#!/usr/bin/env bash
# troupe-sim and troupe-bench on the command line: a sweep writes the report
# JSON, the summary CSV (one row per rate and setup) and the per-request CSV;
# bad flags exit 2 naming the flag.
# Usage: bench_cli.sh BIN_DIR (run from the repository root)
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_cli: $*" >&2; exit 1; }

"$bin/troupe-sim" --trace tests/tools/data/azure_conv_head200.csv --adapters 10 --rates 1,2 \
  --setups fcfs:lru,adaptive:lru --slo-ttft 1 --report "$work/r.json" --csv "$work/s.csv" \
  --records "$work/q.csv" > "$work/out.txt"
grep -q "effective throughput (attainment >= 0.9) adaptive:lru" "$work/out.txt" || fail "no effective throughput line"
[ "$(wc -l < "$work/s.csv")" -eq 5 ] || fail "summary CSV: expected a header and 4 rows"
[ "$(wc -l < "$work/q.csv")" -eq 801 ] || fail "records CSV: expected a header and 800 rows"
python3 - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["runs"]) == 4, r["runs"]
assert set(r["effective_throughput"]) == {"fcfs:lru", "adaptive:lru"}, r["effective_throughput"]
for run in r["runs"]:
    assert run["finished"] == 200 and run["failed"] == 0, run
    assert 0 < run["ttft_s"]["p50"] <= run["ttft_s"]["p99"], run
PY

# Several nodes: conversations behind the router, turns moved off a busy
# node pull their KV along; every turn finishes.
"$bin/troupe-sim" --conversations tests/tools/data/sharegpt_conversations_head60.csv --requests 60 --rate 2 \
  --think 2 --adapters 1 --base-fraction 1 --setups fcfs:lru --session-fraction 0.5 --host-gib 16 \
  --nodes 3 --imbalance 0 --records "$work/m.csv" > "$work/nodes.txt"
grep -Eq "fcfs:lru on 3 nodes: requests placed [0-9]+/[0-9]+/[0-9]+; [1-9][0-9]* turns moved off their session's node, [1-9][0-9]* caches pulled" \
  "$work/nodes.txt" || fail "no multi-node line with moves and pulls: $(grep nodes "$work/nodes.txt")"
python3 - "$work/m.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) > 60, len(rows)
assert all(r["outcome"] == "length" for r in rows), {r["outcome"] for r in rows}
# Each turn's own P99 gap between tokens: at least its mean (-1 below 2 tokens).
for r in rows:
    n, mean, p99 = int(r["completion_tokens"]), float(r["tbt_mean_s"]), float(r["tbt_p99_s"])
    assert (p99 == -1) if n < 2 else p99 >= 0, r
PY

# A node lost mid-run: its requests finish elsewhere, once each.
"$bin/troupe-sim" --conversations tests/tools/data/sharegpt_conversations_head60.csv --requests 60 --rate 2 \
  --think 2 --adapters 1 --base-fraction 1 --setups fcfs:lru --session-fraction 0.5 --host-gib 16 \
  --nodes 3 --fail-node 1@5 --json "$work/lost.json" --records "$work/lost.csv" > "$work/lost.txt"
python3 - "$work/lost.json" "$work/lost.csv" <<'PY'
import csv, json, sys
c = json.load(open(sys.argv[1]))["results"][0]["cluster"]
assert c["nodes"] == 3 and c["nodes_lost"] == 1 and c["resubmitted"] > 0, c
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) > 60 and all(r["outcome"] == "length" for r in rows), {r["outcome"] for r in rows}
PY

# The disk tier below a small host pool: caches written to disk and read
# back for their next turns; every turn finishes. (Prefix caching off: the
# turns' tokens as these runs were sized on.)
"$bin/troupe-sim" --conversations tests/tools/data/sharegpt_conversations_head60.csv --requests 60 --rate 2 \
  --think 2 --adapters 1 --base-fraction 1 --setups fcfs:lru --session-fraction 0.05 --host-pages 400 \
  --prefix-caching off --disk-gib 8 --json "$work/disk.json" --records "$work/disk.csv" > "$work/disk.txt"
python3 - "$work/disk.json" "$work/disk.csv" <<'PY'
import csv, json, sys
r = json.load(open(sys.argv[1]))["results"][0]
assert r["session_disk_writes"] >= r["session_disk_reads"] > 0, r
assert r["session_disk_bytes"] > 0 and r["reused_tokens"] > 0, r
assert r["session_disk_skips"] > 0, r  # by cost (the default): some turns recompute instead
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) > 60 and all(x["outcome"] == "length" for x in rows), {x["outcome"] for x in rows}
PY
"$bin/troupe-sim" --conversations tests/tools/data/sharegpt_conversations_head60.csv --requests 60 --rate 2 \
  --think 2 --adapters 1 --base-fraction 1 --setups fcfs:lru --session-fraction 0.05 --host-pages 400 \
  --prefix-caching off --disk-gib 8 --disk-fetch read --json "$work/disk-read.json" > /dev/null
python3 - "$work/disk.json" "$work/disk-read.json" <<'PY'
import json, sys
cost, read = (json.load(open(f))["results"][0] for f in sys.argv[1:])
assert read["session_disk_skips"] == 0 and read["session_disk_reads"] > cost["session_disk_reads"], (read, cost)
PY

# LongRoPE: a Phi-3.5 mini preset recomputes each request that grows past
# its pretrained context (here 300 tokens); off, none is.
for after in 300 off; do
  "$bin/troupe-sim" --requests 40 --rate 2 --prompt-range 200:400 --output-range 1:200 --adapters 1 \
    --base-fraction 1 --model phi-3.5-mini --gpu H100-80GB --setups fcfs:lru --rope-long-after "$after" \
    --json "$work/rope-$after.json" > /dev/null
done
python3 - "$work/rope-300.json" "$work/rope-off.json" <<'PY'
import json, sys
on, off = (json.load(open(f))["results"][0] for f in sys.argv[1:])
assert on["finished"] == off["finished"] == 40, (on, off)
assert on["squashed"] > 0 and off["squashed"] == 0, (on["squashed"], off["squashed"])
assert on["prefill_tokens"] > off["prefill_tokens"], (on["prefill_tokens"], off["prefill_tokens"])
PY

# The closed loop over both fronts: every request answered, tokens counted
# (a stream's from its usage event), adapters named as models.
for front in "--window 2" "--http" "--http --stream" "--http --adapters 4"; do
  # shellcheck disable=SC2086
  "$bin/troupe-bench" --clients 4 --requests 200 --max-tokens 5 $front > "$work/closed.txt" 2>&1 \
    || fail "closed loop $front: $(cat "$work/closed.txt")"
  grep -q "^troupe-bench: 200 requests (4 clients, .*5 tokens each.* 1000 tokens (.*/s), 0 errors$" "$work/closed.txt" \
    || fail "closed loop $front: $(cat "$work/closed.txt")"
done

# The open loop over the HTTP front: every request answered, its times and
# tokens taken from the events.
"$bin/troupe-bench" --config tests/e2e/configs/sim-realtime.toml --synthetic 20 --rate 20 --output-range 4:8 \
  --http --no-progress --records "$work/http_records.csv" > "$work/http_open.txt" 2>&1 \
  || fail "open loop over HTTP: $(cat "$work/http_open.txt")"
grep -q "20/20 ok" "$work/http_open.txt" || fail "open loop over HTTP: $(cat "$work/http_open.txt")"
python3 - "$work/http_records.csv" <<'PY' || fail "open loop over HTTP: the records"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 20, len(rows)
for r in rows:
    assert r["outcome"] in ("length", "stop"), r
    assert 1 <= int(r["completion_tokens"]) <= int(r["max_tokens"]), r
    assert 0 <= float(r["ttft_s"]) <= float(r["e2e_s"]), r
PY

# Priority classes: each class summarised apart, in the table, the report
# and the records, in the simulator and live (over ZeroMQ and HTTP).
"$bin/troupe-sim" --trace tests/tools/data/azure_conv_head200.csv --adapters 10 --rate 4 \
  --setups fcfs:lru,priority:lru --priorities 0:0.6,-1:0.4 --report "$work/p.json" --records "$work/p.csv" \
  > "$work/p.txt"
grep -Eq "^\| priority:lru \| -1 \| [0-9]+ \| [0-9]+ \|" "$work/p.txt" || fail "no per-class row: $(tail -5 "$work/p.txt")"
for front in "" "--http"; do
  # shellcheck disable=SC2086
  "$bin/troupe-bench" --config tests/e2e/configs/sim-realtime.toml --synthetic 20 --rate 20 --output-range 4:8 \
    --priorities 0:0.5,-1:0.5 --no-progress $front --records "$work/p-live.csv" > "$work/p-live.txt" 2>&1 \
    || fail "open loop with priorities $front: $(cat "$work/p-live.txt")"
  grep -Eq "^  priority -1: [0-9]+/[0-9]+ ok" "$work/p-live.txt" || fail "no per-class line $front: $(cat "$work/p-live.txt")"
done
python3 - "$work/p.json" "$work/p.csv" "$work/p-live.csv" <<'PY' || fail "priority classes: the report or records"
import csv, json, sys
for run in json.load(open(sys.argv[1]))["runs"]:
    classes = run["classes"]
    assert [c["priority"] for c in classes] == [0, -1], classes
    assert sum(c["requests"] for c in classes) == run["requests"] == 200, run
for f in sys.argv[2:]:
    rows = list(csv.DictReader(open(f)))
    assert {r["priority"] for r in rows} == {"0", "-1"}, (f, {r["priority"] for r in rows})
PY

expect_usage_error() { # what, then the command
  local what=$1; shift
  if "$@" > "$work/err.txt" 2>&1; then fail "$what: accepted"; fi
  grep -q -- "$what" "$work/err.txt" || fail "$what: the message does not name it: $(head -1 "$work/err.txt")"
}
set +e
expect_usage_error "window >= 1" "$bin/troupe-bench" --requests 10 --window 0
expect_usage_error "not with --conversations" "$bin/troupe-bench" --http --conversations tests/e2e/data/sharegpt_conversations_head.csv --rate 1
expect_usage_error --rates "$bin/troupe-sim" --requests 10 --rates 0,2
expect_usage_error --prompt-range "$bin/troupe-sim" --requests 10 --rate 1 --prompt-range 5:2
expect_usage_error --sched-params "$bin/troupe-sim" --requests 10 --rate 1 --sched-params bogus
expect_usage_error --adapter-partition-gib "$bin/troupe-sim" --requests 10 --rate 1 --adapter-partition-gib 100000
expect_usage_error --nodes "$bin/troupe-sim" --requests 10 --rate 1 --nodes 0
expect_usage_error --rank-order "$bin/troupe-sim" --requests 10 --rate 1 --rank-order random
expect_usage_error --fail-node "$bin/troupe-sim" --requests 10 --rate 1 --nodes 2 --fail-node 2@1
expect_usage_error --slo-tbt-stat "$bin/troupe-sim" --requests 10 --rate 1 --slo-tbt-stat max
expect_usage_error --turn-tokens "$bin/troupe-sim" --requests 10 --rate 1 --turn-tokens 100
expect_usage_error --slo-tbt-stat "$bin/troupe-bench" --synthetic 10 --rate 1 --slo-tbt-stat max
expect_usage_error --migrate "$bin/troupe-sim" --requests 10 --rate 1 --migrate maybe
expect_usage_error --network-gbps "$bin/troupe-sim" --requests 10 --rate 1 --network-gbps 0
expect_usage_error --disk-gib "$bin/troupe-sim" --requests 10 --rate 1 --disk-gib 8
expect_usage_error --disk-fetch "$bin/troupe-sim" --requests 10 --rate 1 --disk-fetch sometimes
expect_usage_error --disk-gib "$bin/troupe-sim" --requests 10 --rate 1 --host-gib 1 --disk-gib -1
expect_usage_error --rope-long-after "$bin/troupe-sim" --requests 10 --rate 1 --rope-long-after 1
expect_usage_error --token-budget "$bin/troupe-sim" --requests 10 --rate 1 --token-budget 0
expect_usage_error --prompt-range "$bin/troupe-bench" --synthetic 10 --rate 1 --prompt-range x
expect_usage_error "exclusive" "$bin/troupe-bench" --synthetic 10 --trace tests/tools/data/azure_conv_head200.csv
expect_usage_error "--priorities: priority mix entry \"x:1\"" "$bin/troupe-sim" --requests 10 --rate 1 --priorities x:1
expect_usage_error "--priorities: priority mix entry \"0\"" "$bin/troupe-bench" --synthetic 10 --rate 1 --priorities 0
set -e
echo "bench_cli: ok"
