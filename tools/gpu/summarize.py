#!/usr/bin/env python3
"""The GPU check's summary (tools/gpu-check.sh runs it last): each step's
exit, the device, the tests' counts from the JUnit file, the benchmark's,
PEFT's and the HF parity's JSON, the throughput against PEFT, and issue 4's
figures beside their bounds (must_show), into OUT/gpu-check.json.
usage: summarize.py OUT TESTS_RC BENCH_RC HF_RC PEFT_RC SANITIZE_RC SERVE_RC NVCC [OUT_OF_TIME ...]
(an exit of -1: the step did not run)"""
import json, os, subprocess, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
tests_rc, bench_rc, hf_rc, peft_rc, sanitize_rc, serve_rc = (int(x) for x in sys.argv[2:8])
# An exit of -1: the step did not run (not asked for, or what it needs is missing).
res = {"tests_exit": tests_rc, "bench_exit": bench_rc, "hf_parity_exit": hf_rc,
       "peft_bench_exit": peft_rc, "sanitizer_exit": sanitize_rc, "serve_cuda_exit": serve_rc,
       "out_of_time": sys.argv[9:]}
def command(*argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
res["device"] = command("nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                        "clocks.max.mem", "--format=csv,noheader")
res["nvcc"] = (command(sys.argv[8], "--version") or "").splitlines()[-1:]
try:
    if tests_rc == -1:
        raise OSError("the tests did not run")
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
# Throughput against PEFT for the same batch (same tokens per step), both
# timed on the host from the step's start to its tokens on the host; beside
# it, against Troupe's GPU time alone.
if "bench" in res and "peft_bench" in res:
    peft_ms = res["peft_bench"]["peft_decode_ms"]
    res["throughput_over_peft"] = peft_ms / res["bench"]["decode_b64_lora_r16_wall_ms"]
    res["throughput_over_peft_gpu_time"] = peft_ms / res["bench"]["decode_b64_lora_r16_ms"]
# Issue 4's figures beside their targets (each "ok" is the figure against
# its bound; the bounds are the issue's).
bench = res.get("bench")
if bench:
    def figure(key, bound, at_most=True):
        if key not in bench:
            return {"missing": True}
        v = bench[key]
        return {"value": v, "bound": bound, "ok": v <= bound if at_most else v >= bound}
    must = {
        "decode_b1_over_bound": figure("decode_b1_over_bound", 1.15),
        # the same step as the server runs it with backend.step_graphs
        "decode_b1_over_bound_step_graphs": figure("decode_b1_step_graphs_over_bound", 1.15),
        "decode_b64_lora_over_base_ctx128": figure("decode_b64_lora_over_base", 1.10),
        "decode_b64_lora_over_base_ctx512": figure("decode_b64_c512_lora_over_base", 1.10),
        "prefill_over_dense_gemm": figure("prefill_over_dense_gemm", 0.60, at_most=False),
    }
    timeline = bench.get("timeline_ms", {})
    must["adapter_copy_overlaps_decode_ms"] = {"value": timeline.get("overlap"),
                                               "ok": (timeline.get("overlap") or 0) > 0}
    if "throughput_over_peft" in res:
        must["throughput_over_peft"] = {"value": res["throughput_over_peft"]}
    res["must_show"] = must
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(res, f, indent=2)
print(json.dumps(res, indent=2))
