#!/usr/bin/env bash
# The GPU check (issue 4): builds gpu/cuda on its own (CUDA toolkit, cuBLAS
# and GoogleTest only), runs its tests and the GPU benchmark, and writes
# the results as JSON. Runs on any machine with nvcc; the kernel tests and
# the benchmark need a visible GPU (without one the tests skip and the
# benchmark is left out, which the JSON says).
#
#   tools/gpu-check.sh [--out DIR] [--gtest DIR] [--layers N] [--no-bench]
#                      [--tests REGEX] [--sanitize GTEST_FILTER] [--budget S]
#                      [--steps LIST] [--jobs N]
#
# --steps: which of tests, bench, peft, hf and serve to run, comma-separated
# (default all of them; the build always runs), so a check too long for one
# device call can be split over several: say --steps tests,bench, then
# --steps peft,hf,serve. --no-bench is --steps without bench and peft.
# --tests: run only the ctest tests matching REGEX (default: all).
# --jobs: tests run at once (default the cores, at most 8): the GPU tests
# spend most of their time in their CPU references, and each test is its
# own process with its own CUDA context.
# --sanitize: also run cuda_kernel_test's cases matching the filter under
# compute-sanitizer's memcheck, racecheck and synccheck (each up to 240 s),
# into DIR/sanitizer.log: out-of-bounds accesses, shared-memory races and
# misplaced barriers, which a wrong answer alone does not locate.
#
# --gtest: GoogleTest's sources (a copy of Debian's /usr/src/googletest, made
# by tools/gpu-carry.sh) for machines where it is not installed.
# Where PyTorch, transformers and PEFT import: the same multi-adapter decode
# batch on them (tools/gpu/peft_bench.py, the throughput ratio) and, when
# troupe-hf-parity was built (nlohmann-json found), the parity with them
# (tools/gpu/hf_parity.py). Writes DIR/gpu-check.json (default
# build-gpu/results), DIR/tests.xml (JUnit), DIR/bench.json,
# DIR/peft_bench.json, DIR/hf_parity.json, DIR/build.log, DIR/tests.log and
# DIR/sanitizer.log (eight files at most: what a device call brings back).
# Where tools/gpu-carry.sh --server carried the server: the default config
# served on the cuda backend (tests/e2e/default_config.sh ... cuda).
# Each step has its own time limit, so a hung kernel costs that step only,
# and all of them fit --budget seconds (default 560: a device call runs at
# most 600): a step is cut short at the budget, a step that would start
# with too little of it left is skipped, and the JSON is written either way
# (naming what was cut short or skipped, under "out_of_time") unless the
# build itself failed, whose log says why.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/build-gpu/results"
gtest=""
layers=32
bench=1
tests_regex=""
steps="tests,bench,peft,hf,serve"
jobs=$(( $(nproc) < 8 ? $(nproc) : 8 ))
sanitize=""
budget=560
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --gtest) gtest="$(cd "$2" && pwd)"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --tests) tests_regex="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
for s in ${steps//,/ }; do
  case "$s" in
    tests|bench|peft|hf|serve) ;;
    *) echo "gpu-check: unknown step $s in --steps (tests, bench, peft, hf, serve)" >&2; exit 2 ;;
  esac
done
# Whether step $1 was asked for (--no-bench leaves out bench and peft).
wanted() {
  case ",$steps," in *",$1,"*) ;; *) return 1 ;; esac
  [ "$bench" = 1 ] || { [ "$1" != bench ] && [ "$1" != peft ]; }
}
mkdir -p "$out"
start=$SECONDS
step() { echo "gpu-check: [$((SECONDS - start)) s] $*"; }
# Seconds a step may take: its own limit, or what the budget has left after
# 15 s kept for the summary; 0 when under 30 s are left (the step is skipped).
out_of_time=()
limit() {
  local left=$((budget - (SECONDS - start) - 15))
  if [ "$left" -lt 30 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# Runs "$@" under `timeout $2`, named $1 in out_of_time if it ran out.
timed() {
  local name="$1" secs="$2"
  shift 2
  if [ "$secs" = 0 ]; then
    out_of_time+=("$name (skipped)")
    echo "gpu-check: no time left for $name" >&2
    return 124
  fi
  local rc=0
  timeout "$secs" "$@" || rc=$?
  [ "$rc" = 124 ] && out_of_time+=("$name (cut at $secs s)")
  return "$rc"
}
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[ -x "$nvcc" ] || { echo "gpu-check: nvcc not found (set CUDACXX)" >&2; exit 2; }
if [ -z "$gtest" ] && [ -d .gpu-carry/googletest ]; then
  gtest="$root/.gpu-carry/googletest"
fi

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc")
[ -n "$gtest" ] && args+=(-DTROUPE_GTEST_SOURCE_DIR="$gtest")
step "building gpu/cuda into build-gpu"
if ! { cmake -S gpu/cuda -B build-gpu "${gen[@]}" "${args[@]}" &&
       timed build "$(limit 480)" cmake --build build-gpu -j "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  if [ ${#out_of_time[@]} -gt 0 ]; then
    echo "gpu-check: the build ran out of --budget's time: ${out_of_time[*]}" >&2
  else
    echo "gpu-check: the build failed (see $out/build.log)" >&2
  fi
  exit 1
fi

tests_rc=-1
if wanted tests; then
  step "running the tests ($jobs at once)"
  # ctest stops starting tests 10 s before the step's limit and still writes
  # its JUnit file; the limit itself is for a test that hangs past that.
  tests_secs=$(limit 100000)
  ctest_args=(--output-on-failure --timeout 240 -j "$jobs" --output-junit "$out/tests.xml")
  [ "$tests_secs" -gt 20 ] && ctest_args+=(--stop-time "$(date -d "+$((tests_secs - 10)) seconds" +%H:%M:%S)")
  [ -n "$tests_regex" ] && ctest_args+=(-R "$tests_regex")
  set +e
  cd build-gpu
  timed tests "$tests_secs" ctest "${ctest_args[@]}" > "$out/tests.log" 2>&1
  tests_rc=$?
  cd "$root"
  set -e
  # The failed tests, then ctest's summary (their output is in tests.log).
  grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(Failed|Timeout|Exception|SEGFAULT)" "$out/tests.log" | head -40 || true
  grep -E "tests passed|tests failed|Total Test time" "$out/tests.log" || true
fi

sanitize_rc=-1
if [ -n "$sanitize" ]; then
  sanitizer="$(command -v compute-sanitizer || echo "$(dirname "$nvcc")/compute-sanitizer")"
  if [ -x "$sanitizer" ] && [ -x build-gpu/tests/cuda_kernel_test ]; then
    step "compute-sanitizer over cuda_kernel_test --gtest_filter=$sanitize"
    sanitize_rc=0
    : > "$out/sanitizer.log"
    for tool in memcheck racecheck synccheck; do
      echo "== $tool" >> "$out/sanitizer.log"
      set +e
      timed "sanitizer $tool" "$(limit 240)" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
        build-gpu/tests/cuda_kernel_test --gtest_filter="$sanitize" --gtest_brief=1 \
        >> "$out/sanitizer.log" 2>&1
      rc=$?
      set -e
      echo "== $tool exit $rc" >> "$out/sanitizer.log"
      [ "$rc" != 0 ] && sanitize_rc=$rc
    done
    grep -E "^== |=========  (Invalid|Race|Barrier|Error)" "$out/sanitizer.log" | head -30 || true
  else
    echo "gpu-check: compute-sanitizer or cuda_kernel_test missing; no sanitizer run" >&2
  fi
fi

bench_rc=-1
if wanted bench; then
  step "running the benchmark"
  set +e
  timed bench "$(limit 300)" build-gpu/bin/troupe-gpu-bench --layers "$layers" --json "$out/bench.json"
  bench_rc=$?
  set -e
fi

hf_rc=-1
peft_rc=-1
if wanted peft && python3 -c "import torch, transformers, peft" 2> /dev/null; then
  step "the same multi-adapter decode batch on transformers + PEFT"
  set +e
  timed peft_bench "$(limit 300)" env PYTHONUNBUFFERED=1 python3 tools/gpu/peft_bench.py --layers "$layers" \
    --out "$out/peft_bench.json"
  peft_rc=$?
  set -e
fi
if wanted hf && [ -x build-gpu/bin/troupe-hf-parity ] && python3 -c "import torch, transformers, peft" 2> /dev/null; then
  step "parity with transformers + PEFT"
  set +e
  timed hf_parity "$(limit 300)" env PYTHONUNBUFFERED=1 python3 tools/gpu/hf_parity.py --bin build-gpu/bin/troupe-hf-parity --work build-gpu/hf \
    --out "$out/hf_parity.json"
  hf_rc=$?
  set -e
fi

# The default config served on the cuda backend, where tools/gpu-carry.sh
# --server carried the server (troupe-serve with its libraries).
serve_rc=-1
if wanted serve && [ -x .gpu-carry/server/bin/troupe-serve ]; then
  step "serving the default config on the cuda backend (tests/e2e/default_config.sh)"
  set +e
  cuda_lib="$(cd "$(dirname "$nvcc")/.." && pwd)/lib64"
  timed serve_cuda "$(limit 300)" \
    env LD_LIBRARY_PATH="$root/.gpu-carry/server/lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    tests/e2e/default_config.sh "$root/.gpu-carry/server/bin" cuda
  serve_rc=$?
  set -e
  [ "$serve_rc" = 77 ] && serve_rc=-1 # skipped: no CUDA device visible
fi

step "done"
python3 tools/gpu/summarize.py "$out" "$tests_rc" "$bench_rc" "$hf_rc" "$peft_rc" "$sanitize_rc" "$serve_rc" "$nvcc" \
  ${out_of_time[@]+"${out_of_time[@]}"}
[ "$tests_rc" -le 0 ] && [ "$bench_rc" -le 0 ] && [ "$hf_rc" -le 0 ] && [ "$peft_rc" -le 0 ] &&
  [ "$sanitize_rc" -le 0 ] && [ "$serve_rc" -le 0 ]
