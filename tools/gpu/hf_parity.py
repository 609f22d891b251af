#!/usr/bin/env python3
"""Parity with Hugging Face (issue 4), run on a GPU machine with PyTorch,
transformers and PEFT.

Writes a random Llama, a random Qwen2 (biases on q, k and v), a random
Qwen3 (q and k normalised per head, heads wider than the hidden size; where
this transformers has it), a random Mistral with a sliding window of 16
positions (Mistral 7B v0.1's kind), a random Phi-3 (q, k and v fused,
gate and up fused, a window of 24) and two with Phi-4 mini's rotation
(three quarters of each head, LongRoPE): "phi4" with prompts past its
pretrained context of 16 (the long factors), "phi4_short" within its
pretrained context of 512 (the short ones), and "qwen2_yarn", a Qwen2 with
YaRN stretching its 1,024 positions by 4 (Qwen2.5's long-context setting;
the pretrained context left to max_position_embeddings, which every
transformers since YaRN's reads alike), each with two LoRA adapters,
with transformers' and PEFT's own save_pretrained,
computes each case's greedy tokens and logits with transformers + PEFT, then
runs troupe-hf-parity on the same files (all cases in one mixed-adapter
batch) and prints its verdict. Exit 0 when Troupe's logits and greedy tokens
match for every architecture.

  tools/gpu/hf_parity.py --bin build-gpu/bin/troupe-hf-parity --work /tmp/hf --out results/hf_parity.json
"""
import argparse
import inspect
import json
import os
import subprocess
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config,
                          Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM)

ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
         "mistral": (MistralConfig, MistralForCausalLM), "phi3": (Phi3Config, Phi3ForCausalLM),
         "qwen2_yarn": (Qwen2Config, Qwen2ForCausalLM)}
# Phi-4 mini's kind (Phi3Config with these): its pretrained context and
# prompt lengths on the one side of it, steps included.
PHI4 = {"phi4": {"original": 16, "lengths": (17, 20, 33, 18, 64)},
        "phi4_short": {"original": 512, "lengths": (7, 20, 33, 1, 64)}}
if "partial_rotary_factor" in inspect.signature(Phi3Config.__init__).parameters:
    for name in PHI4:
        ARCHS[name] = ARCHS["phi3"]
else:
    print("hf_parity: this transformers' Phi-3 has no partial_rotary_factor; Phi-4 mini's kind left out",
          file=sys.stderr)
try:  # transformers 4.51 on
    from transformers import Qwen3Config, Qwen3ForCausalLM
    ARCHS["qwen3"] = (Qwen3Config, Qwen3ForCausalLM)
except ImportError:
    print("hf_parity: this transformers has no Qwen3; left out", file=sys.stderr)


def make_files(work, arch):
    torch.manual_seed(0)
    config_class, model_class = ARCHS[arch]
    extra = {"head_dim": 128} if arch == "qwen3" else {}  # 8 heads of 128: 1,024 wide
    if arch == "mistral":  # Mistral 7B v0.1's sliding window, shorter than most prompts
        extra = {"sliding_window": 16}
    if arch == "qwen2_yarn":  # head_dim 64: pairs 0-4 keep, 5-18 blend, 19-31 divided by 4
        extra = {"rope_scaling": {"type": "yarn", "factor": 4.0}}
    if arch == "phi3":  # fused projections, Phi-3 mini 4K's kind of window; no rope scaling
        extra = {"sliding_window": 24, "rope_scaling": None, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if arch in PHI4:  # Phi-4 mini's: 48 of each head's 64 elements turn, by LongRoPE's factors
        pairs = 24
        extra = {"partial_rotary_factor": 0.75, "original_max_position_embeddings": PHI4[arch]["original"],
                 "rope_scaling": {"type": "longrope",
                                  "short_factor": [1.0 + 0.25 * i / pairs for i in range(pairs)],
                                  "long_factor": [1.0 + 40.0 * (i / pairs) ** 2 for i in range(pairs)]},
                 "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    cfg = config_class(vocab_size=1000, hidden_size=512, intermediate_size=1024,
                       num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=4,
                       max_position_embeddings=1024, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, initializer_range=0.05, **extra)
    model_dir = os.path.join(work, "model")
    model = model_class(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # transformers initialises biases to zero and norms to one;
            # trained ones are not.
            if name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            elif name.endswith("_norm.weight"):
                p.normal_(1.0, 0.1)
    model.to(torch.float16).save_pretrained(model_dir, safe_serialization=True)
    adapters = {}
    for name, rank in (("a8", 8), ("a16", 16)):
        base = model_class.from_pretrained(model_dir, torch_dtype=torch.float32)
        targets = ["qkv_proj", "o_proj"] if arch == "phi3" or arch in PHI4 else ["q_proj", "k_proj", "v_proj", "o_proj"]
        lc = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, init_lora_weights=False,
                        target_modules=targets)
        peft = get_peft_model(base, lc)
        path = os.path.join(work, name)
        peft.save_pretrained(path)
        adapters[name] = path
    return model_dir, adapters


def reference(model_dir, adapters, steps, arch):
    base = ARCHS[arch][1].from_pretrained(model_dir, torch_dtype=torch.float32).cuda().eval()
    names = list(adapters)
    model = PeftModel.from_pretrained(base, adapters[names[0]], adapter_name=names[0])
    for n in names[1:]:
        model.load_adapter(adapters[n], adapter_name=n)
    g = torch.Generator().manual_seed(1)
    cases = []
    lengths = PHI4[arch]["lengths"] if arch in PHI4 else (7, 20, 33, 1, 64)
    for adapter, length in zip(("", "a8", "a16", "a8", "a16"), lengths):
        prompt = torch.randint(0, 1000, (length,), generator=g).tolist()
        ids = list(prompt)
        tokens, logits = [], []
        for _ in range(steps):
            x = torch.tensor([ids], device="cuda")
            with torch.no_grad():
                if adapter:
                    model.set_adapter(adapter)
                    out = model(input_ids=x).logits[0, -1]
                else:
                    with model.disable_adapter():
                        out = model(input_ids=x).logits[0, -1]
            logits.append(out.float().cpu().tolist())
            tok = int(out.argmax())
            tokens.append(tok)
            ids.append(tok)
        cases.append({"adapter": adapter, "prompt": prompt, "tokens": tokens, "logits": logits})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="troupe-hf-parity")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--arch", choices=["llama", "qwen2", "qwen3", "mistral", "phi3", "qwen2_yarn", *PHI4, "all"],
                    default="all")
    args = ap.parse_args()
    rc = 0
    results = {}
    for arch in (ARCHS if args.arch == "all" else [args.arch]):
        work = os.path.join(args.work, arch)
        os.makedirs(work, exist_ok=True)
        model_dir, adapters = make_files(work, arch)
        cases = reference(model_dir, adapters, args.steps, arch)
        spec = os.path.join(work, "cases.json")
        with open(spec, "w") as f:
            json.dump({"model": model_dir, "adapters": adapters, "cases": cases}, f)
        for dtype in ("f16", "bf16"):
            out = os.path.join(work, f"troupe_{dtype}.json")
            p = subprocess.run([args.bin, "--cases", spec, "--dtype", dtype, "--out", out])
            rc |= p.returncode
            if os.path.exists(out):
                with open(out) as f:
                    # The llama results keep their old keys ("f16", "bf16").
                    results[dtype if arch == "llama" else f"{arch}_{dtype}"] = json.load(f)
    with open(args.out, "w") as f:
        json.dump({"exit": rc, "results": results}, f, indent=2)
    print(json.dumps({"exit": rc, "results": results}, indent=2))
    return rc


if __name__ == "__main__":
    sys.exit(main())
