#!/usr/bin/env python3
"""troupe-gpu-bench --smoke on the emulated device: every step of the
benchmark runs to its end and writes the JSON that tools/gpu-check.sh and
troupe-cost-fit read, with each figure they take; troupe-cost-fit refuses
it (its times mean nothing); the GPU check's summary (tools/gpu/summarize.py)
finds every figure of issue 4's it reports.
usage: bench_smoke.py BENCH [COST_FIT [SUMMARIZE]]"""
import json, os, subprocess, sys, tempfile

bench = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "bench.json")
    r = subprocess.run([bench, "--smoke", "--layers", "2", "--reps", "2", "--json", path],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"troupe-gpu-bench --smoke exited {r.returncode}:\n{r.stderr}")
    with open(path) as f:
        js = json.load(f)
    errors = [k for k in js if k.endswith("_error")]
    if errors:
        sys.exit(f"steps that failed: {', '.join(f'{k}: {js[k]}' for k in errors)}")
    wanted = ["gpu", "smoke", "hbm_bytes_per_s", "dense_gemm_flops", "decode_b1_ms", "decode_b1_over_bound", "decode_b1_step_graphs_over_bound",
              "decode_b1_separate_qkv_ms", "decode_b1_cublas_ms", "decode_b1_graph_ms", "decode_b1_step_graphs_ms", "decode_b1_parts_ms",
              "decode_b64_ms", "decode_b64_lora_r16_ms", "decode_b64_lora_over_base", "decode_b64_lora_r16_wall_ms",
              "decode_b64_lora_r16_graph_ms", "decode_b64_lora_r16_step_graphs_ms", "decode_b64_lora_r16_parts_ms", "decode_b64_c512_lora_over_base",
              "prefill_8x1024_ms", "prefill_over_dense_gemm", "decode_b1_linear_ms", "decode_b1_linear_cublas_ms",
              "decode_b64_linear_ms", "prefill_8x1024_linear_ms", "timeline_ms", "h2d_pinned_bytes_per_s", "steps"]
    missing = [k for k in wanted if k not in js]
    if missing:
        sys.exit(f"figures missing: {', '.join(missing)}")
    for key in ("decode_b1_parts_ms", "decode_b64_lora_r16_parts_ms"):
        parts = js[key]
        if "all" not in parts or "attention" not in parts or "lora" not in parts:
            sys.exit(f"{key} lacks parts: {sorted(parts)}")
        longer = [p for p, v in parts.items() if v < 0 or v > parts["all"] * 1.001 + 1e-6]
        if longer:
            sys.exit(f"{key}: parts outside the whole step: {longer}")
    t = js["timeline_ms"]
    for k in ("decode_start", "decode_end", "adapter_copy_start", "adapter_copy_end", "adapter_bytes", "overlap"):
        if k not in t:
            sys.exit(f"timeline_ms lacks {k}")
    if not (t["decode_start"] <= t["decode_end"] and t["adapter_copy_start"] <= t["adapter_copy_end"]):
        sys.exit(f"a timeline that ends before it starts: {t}")
    shapes = {(s["sequences"], s["context_tokens"], s["new_tokens"], s["adapter_rank"]) for s in js["steps"]}
    if len(shapes) < 6:
        sys.exit(f"too few step shapes for troupe-cost-fit: {sorted(shapes)}")
    for s in js["steps"]:
        if not all(k in s for k in ("sequences", "context_tokens", "new_tokens", "adapter_rank", "ms")):
            sys.exit(f"a step troupe-cost-fit cannot read: {s}")
    if len(sys.argv) > 2:  # and it refuses to fit a smoke run's times
        r = subprocess.run([sys.argv[2], "--bench", path], capture_output=True, text=True, timeout=120)
        if r.returncode != 2 or "--smoke" not in r.stderr:
            sys.exit(f"troupe-cost-fit took a --smoke run (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    if len(sys.argv) > 3:  # only the benchmark ran: every other step's exit is -1
        r = subprocess.run([sys.executable, sys.argv[3], d, "-1", "0", "-1", "-1", "-1", "-1", "nvcc"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit(f"summarize.py exited {r.returncode}:\n{r.stderr}")
        with open(os.path.join(d, "gpu-check.json")) as f:
            must = json.load(f).get("must_show", {})
        wanted = ("decode_b1_over_bound", "decode_b1_over_bound_step_graphs", "decode_b64_lora_over_base_ctx128",
                  "decode_b64_lora_over_base_ctx512", "prefill_over_dense_gemm", "adapter_copy_overlaps_decode_ms")
        lacking = [k for k in wanted if k not in must or must[k].get("missing") or must[k].get("value") is None]
        if lacking:
            sys.exit(f"gpu-check.json's must_show lacks {lacking}: {must}")
print("troupe-gpu-bench --smoke: every figure written")
