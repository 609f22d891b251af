#!/usr/bin/env python3
"""What a batch (OpenAI's Batch API) costs and what it takes from
interactive requests, on one running server:

1. the same completions run three ways, one after another: as a batch
   (POST /v1/files, POST /v1/batches, polled until completed), by as many
   concurrent clients as the server's batch_concurrency (--concurrency),
   and by one client a request at a time. Prints each one's wall time and
   the ratio of the batch's to the concurrent clients'.
2. an interactive request's latency (a short greedy completion, one at a
   time) with nothing else running, then while a batch runs. Prints the
   median and 90th percentile of each and their ratio.

Needs a running troupe-serve with [http] listen (and file_store_mb, on by
default); --concurrency must be its [http] batch_concurrency.

  tools/bench/batch_time.py --http 127.0.0.1:18080 --lines 64 --max-tokens 32 --concurrency 8
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def post(base, path, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers=headers or {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())


def upload(base, content):
    b = "troupe-bench-boundary"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="bench.jsonl"\r\n\r\n').encode() \
        + content + f'\r\n--{b}--\r\n'.encode()
    return post(base, "/v1/files", body, {"Content-Type": "multipart/form-data; boundary=" + b})["id"]


def run_batch(base, bodies):
    """Runs `bodies` as one batch; returns (seconds, the batch object)."""
    content = "".join(json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/completions", "body": b}) + "\n"
                      for i, b in enumerate(bodies)).encode()
    start = time.perf_counter()
    b = post(base, "/v1/batches", {"input_file_id": upload(base, content), "endpoint": "/v1/completions",
                                   "completion_window": "24h"})
    while b["status"] not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(0.05)  # (a poll is a request the server answers: not too often)
        b = get(base, "/v1/batches/" + b["id"])
    return time.perf_counter() - start, b


def run_clients(base, bodies, clients):
    """Sends `bodies` from `clients` threads, each taking the next; returns seconds."""
    left = list(enumerate(bodies))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not left:
                    return
                _, body = left.pop(0)
            post(base, "/v1/completions", body)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def interactive(base, model, count, busy=None):
    """Latencies of `count` short completions, one at a time (while `busy` runs, where given)."""
    body = {"model": model, "prompt": "The river runs", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    times = []
    for _ in range(count):
        if busy is not None and not busy.is_alive():
            break
        start = time.perf_counter()
        post(base, "/v1/completions", body)
        times.append(time.perf_counter() - start)
    return sorted(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", required=True, help="host:port of the server")
    ap.add_argument("--lines", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8, help="the server's [http] batch_concurrency")
    ap.add_argument("--interactive", type=int, default=40, help="interactive requests in each latency pass")
    ap.add_argument("--model", default="demo")
    a = ap.parse_args()
    base = "http://" + a.http
    def bodies(tag):
        # (Each pass its own prompts, of the same lengths: none reads another's cached prefix.)
        return [{"model": a.model, "prompt": "%s %d: the river runs past the old mill and" % (tag, i),
                 "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True} for i in range(a.lines)]
    run_clients(base, bodies("Warm")[:4], 4)

    batch_s, b = run_batch(base, bodies("Batch"))
    assert b["status"] == "completed" and b["request_counts"]["completed"] == a.lines, b
    clients_s = run_clients(base, bodies("Users"), a.concurrency)
    serial_s = run_clients(base, bodies("Alone"), 1)
    print("%d completions of %d tokens: batch %.2f s, %d concurrent clients %.2f s, one client %.2f s"
          % (a.lines, a.max_tokens, batch_s, a.concurrency, clients_s, serial_s))
    print("ratio batch / concurrent clients: %.3f; one client / batch: %.2f" % (batch_s / clients_s,
                                                                                 serial_s / batch_s))

    if a.interactive == 0:
        return
    alone = interactive(base, a.model, a.interactive)
    done = {}
    busy = threading.Thread(target=lambda: done.update(r=run_batch(base, bodies("Later") * 4)))
    busy.start()
    time.sleep(0.2)  # its lines running
    during = interactive(base, a.model, a.interactive, busy)
    busy.join()
    for name, ts in (("alone", alone), ("during a batch", during)):
        print("interactive %s: %d requests, median %.1f ms, p90 %.1f ms"
              % (name, len(ts), statistics.median(ts) * 1e3, ts[int(0.9 * (len(ts) - 1))] * 1e3))
    print("ratio of medians (during / alone): %.2f" % (statistics.median(during) / statistics.median(alone)))


if __name__ == "__main__":
    main()
