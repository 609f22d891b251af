#!/usr/bin/env python3
"""Multi-turn chats over the OpenAI-compatible HTTP front, with and without
Troupe's `session` field: how much of each later turn's prompt the session
cache serves, when the history comes back as text (the chat template
re-rendered, the replies tokenized again by the server) rather than as the
tokens generated.

The same conversations through the Responses API (POST /v1/responses): each
turn's whole conversation sent again (store false), against each turn going
on from the last with previous_response_id, whose kept conversation runs in
a session of its own; and each turn naming a conversation
(POST /v1/conversations), which keeps the items and a session of its own.

Needs a running troupe-serve with [http] listen and chat_template set; the
user messages are sentences of tools/mkmodel/corpus.txt. Prints the server's
session counters before and after each pass, and the prompt tokens each pass
prefilled.

  tools/bench/chat_sessions.py --http 127.0.0.1:8000 --conversations 20 --turns 4
"""
import argparse
import json
import random
import sys
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read().decode())


def metrics(base):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line.startswith("troupe_"):
                name, value = line.split()
                # Counters carry Prometheus' "_total"; keyed by the stats name.
                out[name[len("troupe_"):].removesuffix("_total")] = float(value)
        return out


def run(base, model, sentences, args, with_session):
    rng = random.Random(args.seed)
    before = metrics(base)
    prompt_tokens = 0
    for c in range(args.conversations):
        messages = [{"role": "system", "content": "You answer briefly."}]
        for t in range(args.turns):
            messages.append({"role": "user", "content": " ".join(rng.sample(sentences, 2))})
            body = {"model": model, "messages": messages, "max_tokens": args.max_tokens,
                    "temperature": 0.8, "seed": c * 100 + t}
            if with_session:
                body["session"] = "chat-%d" % c
            answer = post(base, "/v1/chat/completions", body)
            prompt_tokens += answer["usage"]["prompt_tokens"]
            messages.append(answer["choices"][0]["message"])
    after = metrics(base)
    delta = {k: after.get(k, 0) - before.get(k, 0)
             for k in ("session_hits", "session_partial_hits", "prompt_tokens_reused", "prompt_tokens_prefilled")}
    return prompt_tokens, delta


def run_responses(base, model, sentences, args, chained, conversation=False):
    rng = random.Random(args.seed)
    before = metrics(base)
    prompt_tokens = 0
    for c in range(args.conversations):
        items, previous = [], None
        conv = post(base, "/v1/conversations", {})["id"] if conversation else None
        for t in range(args.turns):
            said = {"role": "user", "content": " ".join(rng.sample(sentences, 2))}
            body = {"model": model, "instructions": "You answer briefly.", "max_output_tokens": args.max_tokens,
                    "temperature": 0.8, "seed": c * 100 + t}
            if conversation:
                body.update(input=[said], conversation=conv, store=False)
            elif chained:
                body.update(input=[said], previous_response_id=previous) if previous else body.update(input=[said])
            else:
                items.append(said)
                body.update(input=items, store=False)
            answer = post(base, "/v1/responses", body)
            prompt_tokens += answer["usage"]["input_tokens"]
            previous = answer["id"]
            items.extend(answer["output"])
    after = metrics(base)
    delta = {k: after.get(k, 0) - before.get(k, 0)
             for k in ("session_hits", "session_partial_hits", "prompt_tokens_reused", "prompt_tokens_prefilled")}
    return prompt_tokens, delta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--http", required=True, help="HOST:PORT of the HTTP front")
    ap.add_argument("--conversations", type=int, default=20)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", default="tools/mkmodel/corpus.txt")
    args = ap.parse_args()
    base = "http://" + args.http
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        model = json.loads(r.read().decode())["data"][0]["id"]
    with open(args.corpus, encoding="utf-8") as f:
        sentences = [s.strip() for s in f if s.strip()]
    turns = args.conversations * args.turns
    passes = [("chat, without", lambda: run(base, model, sentences, args, False)),
              ("chat, sessions", lambda: run(base, model, sentences, args, True)),
              ("responses, whole input", lambda: run_responses(base, model, sentences, args, False)),
              ("responses, previous_response_id", lambda: run_responses(base, model, sentences, args, True)),
              ("responses, conversation", lambda: run_responses(base, model, sentences, args, False, True))]
    for label, one in passes:
        prompt, d = one()
        print("%-32s %d turns, %d prompt tokens: %d prefilled, %d reused; session hits %d (%d partial)"
              % (label, turns, prompt, d["prompt_tokens_prefilled"], d["prompt_tokens_reused"],
                 d["session_hits"], d["session_partial_hits"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
