#!/usr/bin/env python3
"""Concurrent clients of every kind against a troupe-serve HTTP front, many
of them going away early, then the server's books (tests/e2e/chaos.sh).

  chaos_clients.py HOST:PORT SEED REQUESTS

Exits 0 when, with nothing left to run, the finish counters add up to the
requests the intake accepted, none is in flight, the pool's pages are free
or held by cached prompts, kept sessions and resident adapters alone, and
every answer that came was one a client may get; 1 otherwise.
"""
import http.client
import json
import random
import re
import socket
import sys
import threading
import time
import urllib.request

host, port = sys.argv[1].rsplit(":", 1)
port = int(port)
base = "http://" + sys.argv[1]
rng = random.Random(int(sys.argv[2]))
requests = int(sys.argv[3])
lock = threading.Lock()
problems = []


def note(*what):
    with lock:
        problems.append(what)


def metrics():
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(troupe_\S+) (\S+)$", text, re.M)}


def post(path, body, events=None, hang_up_after_s=None):
    """The status and body; with `events`, the bytes of the first `events`
    server-sent events, then the connection closed; with hang_up_after_s,
    nothing: the connection is closed that long after the request."""
    c = http.client.HTTPConnection(host, port, timeout=120)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        if hang_up_after_s is not None:
            time.sleep(hang_up_after_s)
            return None
        r = c.getresponse()
        if events is not None:
            got = b""
            while got.count(b"\n\n") < events:
                piece = r.read1(4096)
                if not piece:
                    break
                got += piece
            return got
        return r.status, r.read()
    finally:
        c.close()


def call(path, method):
    c = http.client.HTTPConnection(host, port, timeout=120)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def expect(kind, answer, allowed=(200, 503)):
    if answer is not None and answer[0] not in allowed:
        note(kind, answer[0], answer[1][:300])


def client(i, kind, model, prompt, r):
    if kind == "conversation":
        # A turn of one of the shared conversations, whole or streamed and
        # dropped; the earliest turns cut where the context is short.
        body = {"model": model, "input": prompt[:r.randint(10, 200)], "conversation": r.choice(shared),
                "max_output_tokens": r.randint(1, 40), "truncation": "auto", "store": r.random() < 0.5}
        if r.random() < 0.3:
            post("/v1/responses", dict(body, stream=True), events=r.randint(1, 8))
        else:
            expect(kind, post("/v1/responses", body))
    elif kind == "conversation_deleted":
        # A conversation deleted while its background turn runs.
        made = post("/v1/conversations", {"items": [{"role": "user", "content": prompt[:100]}]})
        expect(kind, made, (200,))
        conv = json.loads(made[1])["id"]
        expect(kind, post("/v1/responses", {"model": model, "input": "More?", "conversation": conv,
                                            "max_output_tokens": r.randint(1, 100), "background": True}))
        time.sleep(r.random() * 0.3)
        expect(kind + " delete", call("/v1/conversations/" + conv, "DELETE"), (200,))
        expect(kind + " gone", call("/v1/conversations/" + conv, "GET"), (404,))
    elif kind == "stream_dropped":
        post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": r.randint(1, 200), "stream": True},
             events=r.randint(0, 6))
    elif kind == "whole":
        expect(kind, post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": r.randint(1, 100),
                                              "temperature": 1, "seed": i}))
    elif kind == "hung_up":
        post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 300}, hang_up_after_s=r.random() * 0.3)
    elif kind == "choices":
        expect(kind, post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": r.randint(1, 50),
                                              "n": 3, "best_of": 4, "seed": i}))
    elif kind == "chat":
        expect(kind, post("/v1/chat/completions", {"model": model, "max_tokens": r.randint(1, 60),
                                                   "messages": [{"role": "user", "content": prompt}]}))
    elif kind == "background":
        answer = post("/v1/responses", {"model": model, "input": prompt, "max_output_tokens": r.randint(1, 300),
                                        "background": True})
        expect(kind, answer)
        if answer[0] != 200:
            return
        rid = json.loads(answer[1])["id"]
        time.sleep(r.random() * 0.5)
        what = r.choice(["cancel", "delete", "read"])
        got = call("/v1/responses/" + rid + ("/cancel" if what == "cancel" else ""),
                   {"cancel": "POST", "delete": "DELETE", "read": "GET"}[what])
        expect(kind + " " + what, got, (200,))
    elif kind == "background_stream_dropped":
        got = post("/v1/responses", {"model": model, "input": prompt, "max_output_tokens": r.randint(1, 300),
                                     "background": True, "stream": True}, events=r.randint(1, 5))
        blocks = [b.split(b"\ndata: ", 1)[1] for b in (got or b"").split(b"\n\n") if b"\ndata: " in b]
        first = json.loads(blocks[0]) if blocks else {}
        if "response" not in first:
            return
        rid = first["response"]["id"]
        if r.random() < 0.5:
            expect(kind + " cancel", call("/v1/responses/" + rid + "/cancel", "POST"), (200,))
        else:
            expect(kind + " resumed", call("/v1/responses/" + rid + "?stream=true&starting_after=0", "GET"), (200,))
    elif kind == "beam":
        expect(kind, post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": r.randint(1, 12),
                                              "use_beam_search": True, "n": 2, "best_of": r.randint(2, 5)}))
    elif kind == "beam_hung_up":
        post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 30, "use_beam_search": True,
                                 "best_of": 4}, hang_up_after_s=r.random() * 0.5)


def run(i, seed):
    r = random.Random(seed)
    kind = r.choice(["stream_dropped", "whole", "hung_up", "choices", "chat", "background",
                     "background_stream_dropped", "beam", "beam_hung_up", "conversation", "conversation",
                     "conversation_deleted"])
    model = r.choice(["demo", "demo-r8", "demo-r16"])
    prompt = "The river runs " * r.randint(1, 60)
    try:
        client(i, kind, model, prompt, r)
    except (ConnectionError, socket.timeout, http.client.HTTPException):
        pass  # a client that went away, or was dropped by the server: the books still hold
    except Exception as e:  # noqa: BLE001 (anything else is a finding)
        note(kind, repr(e))


shared = [json.loads(post("/v1/conversations", {"metadata": {"shared": str(k)}})[1])["id"] for k in range(3)]


def start_batch(k, lines):
    """A batch of `lines` completions over the adapters (one in seven refused
    for a bad max_tokens), run beside the clients."""
    rows = []
    for n in range(lines):
        body = {"model": rng.choice(["demo", "demo-r8", "demo-r16"]), "prompt": "Line %d runs " % n * rng.randint(1, 20),
                "max_tokens": -1 if n % 7 == 3 else rng.randint(1, 16)}
        rows.append(json.dumps({"custom_id": "b%d-%d" % (k, n), "method": "POST", "url": "/v1/completions",
                                "body": body}))
    b = "chaos"
    upload = ('--%s\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--%s\r\nContent-Disposition: '
              'form-data; name="file"; filename="c.jsonl"\r\n\r\n%s\n\r\n--%s--\r\n' % (b, b, "\n".join(rows), b))
    c = http.client.HTTPConnection(host, port, timeout=120)
    c.request("POST", "/v1/files", upload.encode(), {"Content-Type": "multipart/form-data; boundary=" + b})
    f = json.loads(c.getresponse().read())
    c.close()
    status, body = post("/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/completions",
                                        "completion_window": "24h"})
    assert status == 200, body
    return json.loads(body)["id"], lines


# Two batches run beside the clients; one of them is cancelled midway.
batches = [start_batch(0, 60), start_batch(1, 60)]
threading.Timer(0.5 + rng.random(), lambda: call("/v1/batches/%s/cancel" % batches[1][0], "POST")).start()
threads = []
for i in range(requests):
    t = threading.Thread(target=run, args=(i, rng.randrange(1 << 30)))
    t.start()
    threads.append(t)
    time.sleep(rng.random() * 0.02)
    if len(threads) % 32 == 0:
        for t in threads[-32:]:
            t.join()
for t in threads:
    t.join()

quiet = ("troupe_intake_in_flight", "troupe_requests_running", "troupe_requests_waiting", "troupe_requests_admitting",
         "troupe_http_batches_running")
for _ in range(600):
    m = metrics()
    if all(m[k] == 0 for k in quiet):
        break
    time.sleep(0.1)
m = metrics()
finished = sum(v for k, v in m.items() if k.startswith("troupe_finished_") and k.endswith("_total"))
held = m["troupe_prefix_cache_pages"] + m["troupe_session_pages"]
checks = {
    "nothing in flight or running": all(m[k] == 0 for k in quiet),
    "each accepted request finished once": finished == m["troupe_intake_accepted_total"],
    "kv pages are the cached prompts' and the sessions'": m["troupe_pool_pages_kv"] == held,
    "pages reserved are theirs": m["troupe_kv_pages_reserved"] == held,
    "adapter pages are the resident adapters'": m["troupe_pool_pages_adapters"] == m["troupe_adapter_pages_resident"],
    "every page counted": m["troupe_pool_pages_free"] + m["troupe_pool_pages_kv"] + m["troupe_pool_pages_adapters"]
    + m.get("troupe_pool_pages_hidden", 0) == m["troupe_pool_pages_total"],
    "no page released twice": m["troupe_pool_empty_releases_total"] == 0,
    "every answer one a client may get": not problems,
}
# Each turn's input and output joined its conversation together: the shared
# conversations' items are turns, a user's message then its answer (none
# where the answer was empty), and no id is given twice.
for conv in shared:
    items, after = [], ""
    while True:
        status, body = call("/v1/conversations/%s/items?order=asc&limit=100%s" % (conv, after), "GET")
        page = json.loads(body)
        items += page["data"]
        if not page["has_more"]:
            break
        after = "&after=" + page["last_id"]
    roles = "".join("u" if i.get("role") == "user" else "a" if i.get("role") == "assistant" else "?" for i in items)
    # (A turn whose answer was empty, an end token first, adds its input alone.)
    checks["conversation %s: its turns whole (%s)" % (conv[:12], roles)] = (
        re.fullmatch(r"(ua?)*", roles) is not None and len({i["id"] for i in items}) == len(items))
# Each batch ended with every line answered once, in its output or its
# error file, and its counts adding up.
for batch_id, lines in batches:
    b = json.loads(call("/v1/batches/" + batch_id, "GET")[1])
    answered = []
    for f in (b["output_file_id"], b["error_file_id"]):
        if f is not None:
            answered += [json.loads(x)["custom_id"] for x in call("/v1/files/%s/content" % f, "GET")[1].decode().splitlines()]
    counts = b["request_counts"]
    print("chaos: batch %s %s: %d completed, %d failed of %d" % (batch_id[:14], b["status"], counts["completed"],
                                                                 counts["failed"], counts["total"]))
    checks["batch %s: each line answered once (%s, %s)" % (batch_id[:14], b["status"], counts)] = (
        b["status"] in ("completed", "cancelled") and len(answered) == lines == len(set(answered))
        and counts["completed"] + counts["failed"] == counts["total"] == lines)
print("chaos: accepted %d, finished %d (%s)" % (m["troupe_intake_accepted_total"], finished, ", ".join(
    "%s %d" % (k[len("troupe_finished_"):-len("_total")], v) for k, v in sorted(m.items())
    if k.startswith("troupe_finished_") and v > 0)))
for name, ok in checks.items():
    if not ok:
        print("chaos: FAILED:", name)
for p in problems[:10]:
    print("chaos: answer:", p)
sys.exit(0 if all(checks.values()) else 1)
