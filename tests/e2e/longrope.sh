#!/usr/bin/env bash
# LongRoPE end to end, as Hugging Face turns it: troupe-mkmodel writes a
# Phi-4 mini-style model (three quarters of each head turning, LongRoPE over
# a pretrained context of 24 positions); troupe-serve serves it on the cpu
# backend. Greedy completions of token-id prompts must be the tokens the
# NumPy oracle (tests/oracle/llama_numpy.py: one forward pass per token, its
# factors chosen by the pass's length, Hugging Face's rule) picks, each with
# its log-probability within 1e-5 (a cache turned by the other factors
# moves them by about 1e-3 on this small model): a prompt
# within the 24 positions whose output grows past them (recomputed there, by
# the long factors, as Hugging Face's generate() recomputes its cache), one
# past them from the start, and one that stays within; the server counts the
# one recompute (requests_rope_recomputed).
# Usage: longrope.sh BIN_DIR [cpu|cuda]
#   cuda: the same on backend.kind "cuda" (fp16; heads of 64, 48 of them
#   turning, as its kernels take), over a wider model; the tokens must agree
#   while the oracle's top two are far apart and the log-probabilities
#   within fp16's reach. Exits 77 (skipped) where no CUDA device is visible.
set -euo pipefail
bin="$1"
backend="${2:-cpu}"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
. "$(dirname "$0")/serve_lib.sh"
export E2E_DIR="$(cd "$(dirname "$0")" && pwd)"
export ORACLE_DIR="$(cd "$(dirname "$0")/../oracle" && pwd)"

hidden=64
[ "$backend" = cpu ] || hidden=256
"$bin/troupe-mkmodel" --out "$work/model" --arch phi3 --hidden "$hidden" --intermediate 128 --layers 2 --heads 4 \
  --kv-heads 2 --max-context 96 --partial-rotary 0.75 --longrope 24 --adapters 3 > /dev/null
grep -q '"type": "longrope"' "$work/model/config.json" \
  || { echo "longrope: troupe-mkmodel --longrope wrote no such config"; exit 1; }
sed -e "s#models/demo#$work/model#g" -e 's/^listen = ""$/listen = "127.0.0.1:0"/' \
  -e "s/^kind = \"cpu\"/kind = \"$backend\"/" config/default.toml > "$work/serve.toml"
grep -q "^kind = \"$backend\"" "$work/serve.toml"

serve "a LongRoPE model on $backend"
"${TROUPE_PYTHON:-/usr/bin/python3}" - "$http" "$work/model" "$backend" <<'PY'
import os, re, sys, urllib.request
import numpy as np

sys.path.insert(0, os.environ["E2E_DIR"])
sys.path.insert(0, os.environ["ORACLE_DIR"])
from http_call import call
import llama_numpy as ln

base = "http://" + sys.argv[1]
model = ln.Llama(sys.argv[2])
exact = sys.argv[3] == "cpu" # fp32 on the cpu backend; fp16 on a GPU

def oracle_greedy(prompt, n):
    """The greedy tokens after `prompt`, each one's log-probability, and
    how many come before the first whose top two logits are close."""
    ids, logprobs, clear = list(prompt), [], None
    for i in range(n):
        logits = model.last_logits(ids)
        top, second = np.argsort(logits)[::-1][:2]
        if clear is None and logits[top] - logits[second] < 0.1:
            clear = i
        logprobs.append(float(logits[top] - logits.max() - np.log(np.exp(logits - logits.max()).sum())))
        ids.append(int(top))
    return ids[len(prompt):], logprobs, n if clear is None else clear

def detok(tokens):
    status, out = call(base, "/detokenize", {"tokens": tokens})
    assert status == 200, out
    return out["prompt"]

# (prompt length, tokens): 18 + 12 grows past 24 at its seventh token; 30
# starts past it; 10 + 8 stays within.
for length, n in ((18, 12), (30, 6), (10, 8)):
    prompt = [1] + [3 + (7 * i + length) % 200 for i in range(length - 1)]
    want, want_logprobs, clear = oracle_greedy(prompt, n)
    status, out = call(base, "/v1/completions", {"model": "model", "prompt": prompt, "max_tokens": n,
                                                 "temperature": 0, "ignore_eos": True, "logprobs": 0})
    assert status == 200, out
    choice = out["choices"][0]
    assert out["usage"]["completion_tokens"] == n, out["usage"]
    got = choice["logprobs"]["token_logprobs"]
    assert len(got) == n, got
    if exact:
        assert choice["text"] == detok(want), (length, choice["text"], detok(want), want)
        # Each token's log-probability too, which a cache turned by the
        # other factors would move.
        assert max(abs(g - w) for g, w in zip(got, want_logprobs)) < 1e-5, (length, got, want_logprobs)
    else:
        # fp16: the same tokens while the oracle's choice is clear (the
        # first token's log-probability even where it is not).
        assert clear == 0 or choice["text"].startswith(detok(want[:clear])), \
            (length, clear, choice["text"], detok(want[:clear]))
        agree = max(clear, 1)
        assert max(abs(g - w) for g, w in zip(got[:agree], want_logprobs[:agree])) < 0.01, \
            (length, got, want_logprobs)

# The first request, and only it, was recomputed as it grew past.
with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
    metrics = r.read().decode()
found = re.search(r"^troupe_requests_rope_recomputed_total (\S+)$", metrics, re.M)
assert found and float(found.group(1)) == 1, [l for l in metrics.splitlines() if "rope" in l]
PY
stop
echo "longrope: ok"
