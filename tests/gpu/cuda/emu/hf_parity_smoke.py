#!/usr/bin/env python3
"""troupe-hf-parity on the emulated device, with the NumPy oracle
(tests/oracle/llama_numpy.py, Hugging Face's forward pass in float64) in
transformers' place: a random Llama, a random Qwen2 (biases on q, k and v)
a random Qwen3 (q and k normalised per head, heads wider than the hidden
size), a random Mistral with a sliding window of 16, a random Phi-3
(fused projections, a window of 24) and two with Phi-4 mini's rotation
(three quarters of each head, LongRoPE: sequences within the pretrained
context, which turn by the short factors, and past it, by the long), a
Qwen2 with YaRN stretching a pretrained context of 16 to 128 (Qwen2.5's
long-context setting), each with PEFT adapters written by troupe-mkmodel, five
prompts with and without adapters, the oracle's greedy
tokens and logits as the cases file tools/gpu/hf_parity.py writes, then
troupe-hf-parity at fp16 and bf16. Passes when all match.
usage: hf_parity_smoke.py HF_PARITY MKMODEL ORACLE [PYTHON]"""
import json, os, random, subprocess, sys, tempfile

hf_parity, mkmodel, oracle = sys.argv[1:4]
python = sys.argv[4] if len(sys.argv) > 4 else "/usr/bin/python3"
STEPS = 4


# Phi-4 mini's rotation (--arch phi3 with these): its mkmodel arguments and
# prompt lengths on the one side of the pretrained context (with the steps
# after them).
PHI4 = {"phi4_short": {"args": ["--partial-rotary", "0.75", "--longrope", "64", "--max-context", "128"],
                       "lengths": (7, 20, 33, 1, 40)},
        "phi4_long": {"args": ["--partial-rotary", "0.75", "--longrope", "16", "--max-context", "128"],
                      "lengths": (17, 20, 33, 18, 40)}}
# Variants of an architecture: the one troupe-mkmodel writes, its
# arguments and prompt lengths.
VARIANTS = {name: {"arch": "phi3", **v} for name, v in PHI4.items()}
VARIANTS["qwen2_yarn"] = {"arch": "qwen2", "args": ["--yarn", "16", "--max-context", "128"],
                          "lengths": (17, 20, 33, 18, 40)}


def check(work, arch):
    model = os.path.join(work, "model")
    subprocess.run([mkmodel, "--out", model, "--hidden", "256", "--intermediate", "512", "--heads", "4",
                    "--kv-heads", "2", "--layers", "2", "--vocab", "512", "--adapters", "2", "--ranks", "8,16",
                    "--targets", "q_proj,k_proj,v_proj,o_proj", "--dtype", "f16", "--seed", "3",
                    "--arch", VARIANTS.get(arch, {}).get("arch", arch)]
                   # Qwen3's heads wider than the hidden size: 4 of 128 over 256.
                   + (["--head-dim", "128"] if arch == "qwen3" else [])
                   # Mistral 7B v0.1's sliding window, shorter than most prompts.
                   + (["--sliding-window", "16"] if arch == "mistral" else [])
                   + (["--sliding-window", "24"] if arch == "phi3" else [])
                   + VARIANTS.get(arch, {}).get("args", []),
                   check=True, stdout=subprocess.DEVNULL)
    adapter_dirs = sorted(os.listdir(os.path.join(model, "adapters")))
    adapters = {name: os.path.join(model, "adapters", name) for name in adapter_dirs}
    rng = random.Random(1)
    cases = []
    lengths = VARIANTS.get(arch, {}).get("lengths", (7, 20, 33, 1, 40))
    for adapter, length in zip(("", adapter_dirs[0], adapter_dirs[1], adapter_dirs[0], adapter_dirs[1]), lengths):
        prompt = [rng.randrange(512) for _ in range(length)]
        ids, tokens, logits = list(prompt), [], []
        for _ in range(STEPS):
            cmd = [python, oracle, "--model", model, "--tokens", ",".join(map(str, ids))]
            if adapter:
                cmd += ["--adapter", adapters[adapter]]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            row = out["logits"]
            tok = max(range(len(row)), key=row.__getitem__)
            logits.append(row)
            tokens.append(tok)
            ids.append(tok)
        cases.append({"adapter": adapter, "prompt": prompt, "tokens": tokens, "logits": logits})
    spec = os.path.join(work, "cases.json")
    with open(spec, "w") as f:
        json.dump({"model": model, "adapters": adapters, "cases": cases}, f)
    failed = []
    for dtype in ("f16", "bf16"):
        out = os.path.join(work, f"troupe_{dtype}.json")
        r = subprocess.run([hf_parity, "--cases", spec, "--dtype", dtype, "--out", out],
                           capture_output=True, text=True, timeout=900)
        print(r.stdout, end="")
        if r.returncode != 0:
            failed.append(f"{dtype}: exit {r.returncode}\n{r.stderr}")
            continue
        with open(out) as f:
            res = json.load(f)
        if not res["ok"] or res["greedy_checked"] == 0:
            failed.append(f"{dtype}: not ok")
    return [f"{arch} {f}" for f in failed]


failed = []
for arch in ("llama", "qwen2", "qwen3", "mistral", "phi3", "phi4_short", "phi4_long", "qwen2_yarn"):
    with tempfile.TemporaryDirectory() as work:
        failed += check(work, arch)
if failed:
    sys.exit("troupe-hf-parity against the oracle failed:\n" + "\n".join(failed))
print("troupe-hf-parity against the oracle: ok")
