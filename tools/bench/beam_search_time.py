#!/usr/bin/env python3
"""What vLLM's use_beam_search costs over Troupe's HTTP front: the time of a
completion searched with W beams against the same greedy completion, over
the same prompts, one request at a time. The front runs a search as steps
of one-token generates (a step's W generates sent together), so each step
is a round trip through the intake and the scheduler; with prefix caching
on, a step's prompt pages that earlier steps computed may be read from the
cache. Prints the median and the slowest time of each, the ratio of the
medians, and the server's prefill counters (tokens computed) per pass.

Needs a running troupe-serve with [http] listen; prompts are sentences of
tools/mkmodel/corpus.txt.

  tools/bench/beam_search_time.py --http 127.0.0.1:8000 --beams 4 --max-tokens 16 --prompts 8
"""
import argparse
import json
import re
import statistics
import time
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def counter(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(r"^" + name + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", required=True, help="host:port of the server's HTTP front")
    ap.add_argument("--model", default="demo")
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--corpus", default="tools/mkmodel/corpus.txt")
    a = ap.parse_args()
    base = "http://" + a.http
    with open(a.corpus) as f:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", f.read()) if len(s.strip()) > 20]
    prompts = sentences[: a.prompts]
    ask = {"model": a.model, "max_tokens": a.max_tokens, "ignore_eos": True}
    passes = [("greedy", dict(ask, temperature=0)),
              (f"{a.beams} beams", dict(ask, use_beam_search=True, n=1, best_of=a.beams))]
    post(base, "/v1/completions", dict(ask, prompt="warm up", temperature=0))
    medians = {}
    for name, body in passes:
        prefilled = counter(base, "troupe_prompt_tokens_prefilled_total")
        times = []
        for p in prompts:
            t = time.perf_counter()
            post(base, "/v1/completions", dict(body, prompt=p))
            times.append(time.perf_counter() - t)
        medians[name] = statistics.median(times)
        print(f"{name}: median {medians[name] * 1e3:.1f} ms, slowest {max(times) * 1e3:.1f} ms, "
              f"prompt tokens computed {counter(base, 'troupe_prompt_tokens_prefilled_total') - prefilled:.0f}")
    names = [n for n, _ in passes]
    print(f"ratio of medians ({names[1]} / {names[0]}): {medians[names[1]] / medians[names[0]]:.2f}")


if __name__ == "__main__":
    main()
