#!/usr/bin/env python3
"""What [http] store_dir costs a response: two servers side by side, the
same but for store_dir, each answering the same turns of conversations
(POST /v1/conversations, then responses naming it, one token each, so that
the front's work weighs most), one request at a time, alternating between
them. Each turn writes the response's file and the conversation's, which
grows by two items a turn. Prints each server's median and 90th percentile
turn time and the ratio of the medians.

Needs two running troupe-serve with [http] listen and chat_template set
(the second with store_dir).

  tools/bench/store_dir_time.py --http 127.0.0.1:18080 --http 127.0.0.1:18081 --conversations 4 --turns 25
"""
import argparse
import json
import statistics
import time
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", action="append", required=True, help="host:port of a server (twice)")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--turns", type=int, default=25)
    ap.add_argument("--model", default="demo")
    a = ap.parse_args()
    bases = ["http://" + h for h in a.http]
    times = {b: [] for b in bases}
    for _ in range(a.conversations):
        convs = {b: post(b, "/v1/conversations", {})["id"] for b in bases}
        for t in range(a.turns):
            for b in bases:
                body = {"model": a.model, "input": "Turn %d: the river runs past the old mill." % t,
                        "conversation": convs[b], "max_output_tokens": 1, "temperature": 0,
                        "truncation": "auto"}
                start = time.perf_counter()
                post(b, "/v1/responses", body)
                times[b].append(time.perf_counter() - start)
    medians = []
    for b in bases:
        ts = sorted(times[b])
        medians.append(statistics.median(ts))
        print("%s: %d turns, median %.2f ms, p90 %.2f ms" % (b, len(ts), medians[-1] * 1e3,
                                                               ts[int(0.9 * (len(ts) - 1))] * 1e3))
    print("ratio of medians (second / first): %.3f" % (medians[1] / medians[0]))


if __name__ == "__main__":
    main()
