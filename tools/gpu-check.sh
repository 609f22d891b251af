#!/usr/bin/env bash
# The GPU check (issue 4): builds gpu/cuda on its own (CUDA toolkit, cuBLAS
# and GoogleTest only), runs its tests and the GPU benchmark, and writes
# the results as JSON. Runs on any machine with nvcc; the kernel tests and
# the benchmark need a visible GPU (without one the tests skip and the
# benchmark is left out, which the JSON says).
#
#   tools/gpu-check.sh [--out DIR] [--gtest DIR] [--layers N] [--no-bench]
#
# --gtest: GoogleTest's sources (a copy of Debian's /usr/src/googletest, made
# by tools/gpu-carry.sh) for machines where it is not installed.
# Where PyTorch, transformers and PEFT import: the same multi-adapter decode
# batch on them (tools/gpu/peft_bench.py, the throughput ratio) and, when
# troupe-hf-parity was built (nlohmann-json found), the parity with them
# (tools/gpu/hf_parity.py). Writes DIR/gpu-check.json (default
# build-gpu/results), DIR/tests.xml (JUnit), DIR/bench.json,
# DIR/peft_bench.json, DIR/hf_parity.json and DIR/build.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/build-gpu/results"
gtest=""
layers=32
bench=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --gtest) gtest="$(cd "$2" && pwd)"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[ -x "$nvcc" ] || { echo "gpu-check: nvcc not found (set CUDACXX)" >&2; exit 2; }
if [ -z "$gtest" ] && [ -d .gpu-carry/googletest ]; then
  gtest="$root/.gpu-carry/googletest"
fi

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc")
[ -n "$gtest" ] && args+=(-DTROUPE_GTEST_SOURCE_DIR="$gtest")
echo "gpu-check: building gpu/cuda into build-gpu"
if ! { cmake -S gpu/cuda -B build-gpu "${gen[@]}" "${args[@]}" &&
       cmake --build build-gpu -j "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "gpu-check: the build failed (see $out/build.log)" >&2
  exit 1
fi

echo "gpu-check: running the tests"
set +e
(cd build-gpu && ctest --output-on-failure --timeout 900 --output-junit "$out/tests.xml")
tests_rc=$?
set -e

bench_rc=0
if [ "$bench" = 1 ]; then
  echo "gpu-check: running the benchmark"
  set +e
  build-gpu/bin/troupe-gpu-bench --layers "$layers" --json "$out/bench.json"
  bench_rc=$?
  set -e
fi

hf_rc=-1
peft_rc=-1
if python3 -c "import torch, transformers, peft" 2> /dev/null && [ "$bench" = 1 ]; then
  echo "gpu-check: the same multi-adapter decode batch on transformers + PEFT"
  set +e
  python3 tools/gpu/peft_bench.py --layers "$layers" --out "$out/peft_bench.json"
  peft_rc=$?
  set -e
fi
if [ -x build-gpu/bin/troupe-hf-parity ] && python3 -c "import torch, transformers, peft" 2> /dev/null; then
  echo "gpu-check: parity with transformers + PEFT"
  set +e
  python3 tools/gpu/hf_parity.py --bin build-gpu/bin/troupe-hf-parity --work build-gpu/hf \
    --out "$out/hf_parity.json"
  hf_rc=$?
  set -e
fi

python3 - "$out" "$tests_rc" "$bench_rc" "$hf_rc" "$peft_rc" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
tests_rc, bench_rc, hf_rc, peft_rc = (int(x) for x in sys.argv[2:6])
res = {"tests_exit": tests_rc, "bench_exit": bench_rc, "hf_parity_exit": hf_rc,
       "peft_bench_exit": peft_rc}
try:
    suite = ET.parse(os.path.join(out, "tests.xml")).getroot()
    cases = suite.iter("testcase")
    summary = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    for c in cases:
        status = c.get("status", "run")
        if c.find("failure") is not None or status == "fail":
            summary["failed"] += 1
            failed.append(c.get("name"))
        elif c.find("skipped") is not None or status in ("notrun", "disabled"):
            summary["skipped"] += 1
        else:
            summary["passed"] += 1
    res["tests"] = summary
    res["failed_tests"] = failed
except (OSError, ET.ParseError) as e:
    res["tests_error"] = str(e)
for key, name in (("bench", "bench.json"), ("hf_parity", "hf_parity.json"),
                  ("peft_bench", "peft_bench.json")):
    path = os.path.join(out, name)
    if os.path.exists(path):
        with open(path) as f:
            res[key] = json.load(f)
# Throughput against PEFT for the same batch (same tokens per step).
if "bench" in res and "peft_bench" in res:
    res["throughput_over_peft"] = (res["peft_bench"]["peft_decode_ms"] /
                                   res["bench"]["decode_b64_lora_r16_ms"])
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(res, f, indent=2)
print(json.dumps(res, indent=2))
PY
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ] && [ "$hf_rc" -le 0 ] && [ "$peft_rc" -le 0 ]
