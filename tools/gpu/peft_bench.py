#!/usr/bin/env python3
"""The baseline for troupe-gpu-bench's multi-adapter decode (issue 4), run on
a GPU machine with PyTorch, transformers and PEFT: a Llama-2-7B-shaped model
with random fp16 weights, 64 distinct rank-16 LoRA adapters on q, k, v and o,
and one decode batch of 64 sequences (128-token prompts), one adapter each,
served by PEFT's mixed-adapter batches (adapter_names) with transformers' KV
cache. Prints and writes the median decode step time, and the same batch
through the base model alone.

  tools/gpu/peft_bench.py --out results/peft_bench.json [--layers 32] [--steps 16]
"""
import argparse
import json
import statistics
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def decode_ms(model, ids, steps, **kw):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **kw)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        times = []
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(input_ids=nxt, past_key_values=past, use_cache=True, **kw)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args()
    cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=args.layers, num_attention_heads=32,
                      num_key_value_heads=32, max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        base = LlamaForCausalLM(cfg).to(torch.float16).eval()
    lc = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                    init_lora_weights=False, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = get_peft_model(base, lc, adapter_name="a0")
    for i in range(1, args.batch):
        model.add_adapter(f"a{i}", lc)
    model.to("cuda", dtype=torch.float16).eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, 128), device="cuda")
    names = [f"a{i}" for i in range(args.batch)]
    peft_ms = decode_ms(model, ids, args.steps, adapter_names=names)
    with model.disable_adapter():
        base_ms = decode_ms(model, ids, args.steps)
    res = {"gpu": torch.cuda.get_device_name(), "layers": args.layers, "batch": args.batch,
           "rank": args.rank, "steps": args.steps,
           "peft_decode_ms": peft_ms, "hf_base_decode_ms": base_ms,
           "torch": torch.__version__}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
