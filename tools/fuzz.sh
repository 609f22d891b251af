#!/usr/bin/env bash
# Builds the libFuzzer programs with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer into build-fuzz/ and runs each target for a while.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60, every target)
#
# Each target starts from its seeds in tests/fuzz/corpus/NAME and keeps what it
# finds in build-fuzz/corpus/NAME (kept between runs). An input that crashes a
# target or breaks one of its invariants is written to build-fuzz/crashes/ and
# the script exits 1 after the remaining targets ran: fix the code, then copy
# the input into tests/fuzz/corpus/NAME/ so that fuzz_corpus_test replays it in
# every build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
all=(wire_request wire_reply openai openai_stream openai_tools openai_responses conversations batches config llama_config safetensors peft_config trace sim sim_tiers json_schema grammar lark reasoning_gate tokenizer_json bpe_encode jinja unicode_norm)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target \"$t\" (have: ${all[*]})" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt install clang)" >&2; exit 2; }

if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DTROUPE_BUILD_FUZZERS=ON -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_BENCHMARKS=OFF -DTROUPE_ENABLE_CUDA=OFF
fi
cmake --build build-fuzz -j "${TROUPE_JOBS:-$(nproc)}" --target "${targets[@]/#/troupe-fuzz-}"

mkdir -p build-fuzz/crashes
failed=()
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "== $t: ${seconds} s"
  if ! build-fuzz/bin/troupe-fuzz-"$t" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
      -dict=tests/fuzz/json.dict -artifact_prefix="build-fuzz/crashes/$t-" -print_final_stats=1 \
      "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" 2> "build-fuzz/$t.log"; then
    failed+=("$t")
    grep -E "ERROR|invariant_broken|what\(\)|SUMMARY|Test unit written" "build-fuzz/$t.log" | head -20 >&2
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "build-fuzz/$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]} (inputs in build-fuzz/crashes/, logs in build-fuzz/NAME.log)" >&2
  exit 1
fi
echo "fuzz.sh: every target ran ${seconds} s without a failure"
