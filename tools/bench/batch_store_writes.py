#!/usr/bin/env python3
"""What keeping a batch in [http] store_dir writes: one batch of --lines
short completions (one token each by default, so that the front's work
weighs most) on a running server, timed from its creation to its end, with
the bytes the server process wrote meanwhile (/proc/PID/io write_bytes:
what reached the file system, the batch's state and log and the other
stores alike) and the size of the batch's output. Run it against servers
alike but for store_dir (or but for their build) and compare the figures.

With --interactive, a client sends short greedy completions one at a time
while the batch runs, and their latency's median and 90th percentile are
printed too: what the batch's writes take from interactive requests.

Needs a running troupe-serve with [http] listen; --pid is its process id.

  tools/bench/batch_store_writes.py --http 127.0.0.1:18080 --pid 1234 --lines 5000 [--interactive]
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

from batch_time import get, post, upload  # (the same directory)


def interactive_while(base, model, running, times):
    """Short completions one at a time while `running` is set; their latencies into `times`."""
    body = {"model": model, "prompt": "The river runs", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    while running.is_set():
        start = time.perf_counter()
        post(base, "/v1/completions", body)
        times.append(time.perf_counter() - start)


def written(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no write_bytes in /proc/%d/io" % pid)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", required=True, help="host:port of the server")
    ap.add_argument("--pid", type=int, required=True, help="the server's process id")
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--max-tokens", type=int, default=1)
    ap.add_argument("--model", default="demo")
    ap.add_argument("--interactive", action="store_true", help="time short completions while the batch runs")
    a = ap.parse_args()
    base = "http://" + a.http
    content = "".join(json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/completions",
                                  "body": {"model": a.model, "prompt": "Line %d" % i, "max_tokens": a.max_tokens,
                                           "temperature": 0}}) + "\n" for i in range(a.lines)).encode()
    file_id = upload(base, content)
    before = written(a.pid)
    start = time.perf_counter()
    batch = post(base, "/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/completions",
                                       "completion_window": "24h"})
    running, times = threading.Event(), []
    running.set()
    client = threading.Thread(target=interactive_while, args=(base, a.model, running, times))
    if a.interactive:
        client.start()
    while batch["status"] not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(0.1)
        batch = get(base, "/v1/batches/" + batch["id"])
    seconds = time.perf_counter() - start
    running.clear()
    if a.interactive:
        client.join()
    wrote = written(a.pid) - before
    with urllib.request.urlopen(base + "/v1/files/" + batch["output_file_id"] + "/content", timeout=600) as r:
        output = len(r.read())
    result = {"lines": a.lines, "status": batch["status"], "counts": batch["request_counts"],
              "seconds": round(seconds, 2), "written_bytes": wrote, "output_bytes": output,
              "input_bytes": len(content), "written_over_output": round(wrote / max(output, 1), 2)}
    if a.interactive and times:
        times.sort()
        result["interactive"] = {"count": len(times), "p50_ms": round(1000 * statistics.median(times), 1),
                                 "p90_ms": round(1000 * times[int(0.9 * (len(times) - 1))], 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
