#!/usr/bin/env python3
"""What keeping a long conversation in [http] store_dir writes: --turns
Responses turns in one conversation (store false, so that only the
conversation is kept), one at a time, timed, with the bytes the server
process wrote meanwhile (/proc/PID/io write_bytes) and the size of the
conversation's items at the end. Run it against servers alike but for
their build (or store_dir, store_sync) and compare the figures.

Needs a running troupe-serve with [http] listen and a chat template; --pid
is its process id.

  tools/bench/conversation_store_writes.py --http 127.0.0.1:18080 --pid 1234 --turns 200
"""
import argparse
import json
import statistics
import time

from batch_time import get, post  # (the same directory)
from batch_store_writes import written


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", required=True, help="host:port of the server")
    ap.add_argument("--pid", type=int, required=True, help="the server's process id")
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--model", default="demo")
    a = ap.parse_args()
    base = "http://" + a.http
    conv = post(base, "/v1/conversations", {})["id"]
    before = written(a.pid)
    times = []
    start = time.perf_counter()
    for i in range(a.turns):
        t = time.perf_counter()
        post(base, "/v1/responses", {"model": a.model, "input": "Turn %d: go on." % i, "conversation": conv,
                                     "store": False, "max_output_tokens": a.max_tokens, "temperature": 0,
                                     "truncation": "auto"})
        times.append(time.perf_counter() - t)
    seconds = time.perf_counter() - start
    wrote = written(a.pid) - before
    items, after = [], None
    while True:
        q = "?limit=100&order=asc" + ("&after=" + after if after else "")
        page = get(base, "/v1/conversations/" + conv + "/items" + q)
        items += page["data"]
        if not page["has_more"]:
            break
        after = page["last_id"]
    size = sum(len(json.dumps(i)) for i in items)
    print(json.dumps({"turns": a.turns, "items": len(items), "items_bytes": size, "seconds": round(seconds, 2),
                      "turn_p50_ms": round(1000 * statistics.median(times), 1), "written_bytes": wrote,
                      "written_over_items": round(wrote / max(size, 1), 2)}))


if __name__ == "__main__":
    main()
