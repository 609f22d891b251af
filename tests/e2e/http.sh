#!/usr/bin/env bash
# The OpenAI-compatible HTTP front as a client sees it: troupe-serve with the
# embedded default's demo model (cpu backend) and [http] listen; plain HTTP
# from Python's standard library. A greedy completion gives the same text as
# the ZeroMQ front, whole or streamed, and ends before a stop string; a chat
# completion (chatml) gives the text of a completion of its rendered prompt;
# bad requests get the right status and a message naming the field; a client
# that drops a stream has its request cancelled and the server goes on
# serving. A server with API keys wants one on /v1/ paths; one without a chat
# template answers chat with 404. Log-probabilities asked for over HTTP are
# the ZeroMQ front's, list the greedy token as the most likely, and are the
# same streamed; echoed, a prompt's score its greedy tokens' own; best_of
# answers its most likely candidate. vLLM's stop_token_ids, ignore_eos and
# min_tokens end the output where they say. A batch (OpenAI's Files and
# Batch APIs) answers its lines as the requests sent alone answer them, and
# one running at a stop goes on at the next start, each line answered once.
# Usage: http.sh BIN_DIR (from the source tree: the demo model's paths are relative)
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
# start CONFIG: troupe-serve on it; sets pid, http and zmq.
start() {
  : > "$work/log" # there before the server's shell opens it: read at once below, under set -e
  "$bin/troupe-serve" --config "$1" --endpoint "tcp://127.0.0.1:*" --log-level warn > "$work/log" 2>&1 &
  pid=$!
  http="" zmq=""
  for _ in $(seq 1 400); do
    http="$(sed -n 's/^troupe-serve: http on //p' "$work/log")"
    zmq="$(sed -n 's/^troupe-serve: listening on //p' "$work/log")"
    [ -n "$http" ] && [ -n "$zmq" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/log"; exit 1; }
    sleep 0.05
  done
  [ -n "$http" ] || { echo "http: the server did not start"; cat "$work/log"; exit 1; }
}
stop() {
  kill -INT "$pid"
  wait "$pid"
  pid=""
}
sed -e 's/^listen = ""$/listen = "127.0.0.1:0"\napi_keys = ["k-1", "k-2"]/' -e 's/^max_pending = .*/max_pending = 2/' \
  config/default.toml > "$work/plain.toml"
grep -q '^api_keys = \["k-1", "k-2"\]$' "$work/plain.toml"
grep -q '^max_pending = 2$' "$work/plain.toml"
sed 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "chatml"\nadapter_updates = true/' config/default.toml \
  > "$work/http.toml"
grep -q '^chat_template = "chatml"$' "$work/http.toml"
grep -q '^adapter_updates = true$' "$work/http.toml"
start "$work/http.toml"

# The reference: the same greedy completion over ZeroMQ.
ref="$("$bin/troupe-client" --endpoint "$zmq" --prompt "The river runs" --max-tokens 12 --temperature 0 \
  --no-stream --json 2>/dev/null | tail -1)"

ref_lp="$("$bin/troupe-client" --endpoint "$zmq" --prompt "The river runs" --max-tokens 12 --temperature 0 \
  --no-stream --logprobs 2 --json 2>/dev/null | tail -1)"

ref_plp="$("$bin/troupe-client" --endpoint "$zmq" --prompt "The river runs" --max-tokens 12 --temperature 0 \
  --no-stream --prompt-logprobs 1 --json 2>/dev/null | tail -1)"

# GET /version is the build's, as every tool's --version says.
version="$("$bin/troupe-serve" --version)"
[[ "$version" =~ ^troupe-serve\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "http: troupe-serve --version: $version"; exit 1; }
for tool in troupe-client troupe-bench troupe-sim; do
  [ "$("$bin/$tool" --version)" = "$tool ${version#troupe-serve }" ] || { echo "http: $tool --version differs"; exit 1; }
done
served="$(python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["version"])' \
  "http://$http/version")"
[ "$served" = "${version#troupe-serve }" ] || { echo "http: GET /version gave $served, not ${version#troupe-serve }"; exit 1; }

# troupe-client's sampling flags reach the wire: the end-of-sequence token
# (2) forced by its bias is held off three tokens.
ref_min="$("$bin/troupe-client" --endpoint "$zmq" --prompt "The river runs" --max-tokens 5 --temperature 0 \
  --no-stream --logit-bias 2=100 --min-tokens 3 --stop-token 7 --presence-penalty 0.5 --frequency-penalty 0.5 \
  --json 2>/dev/null | tail -1)"
if "$bin/troupe-client" --endpoint "$zmq" --prompt x --logit-bias 2 > /dev/null 2>&1; then
  echo "http: troupe-client took --logit-bias without a bias"; exit 1
fi
# ... and its tokenizer queries read back what they wrote.
ids="$("$bin/troupe-client" --endpoint "$zmq" --tokenize "The river runs" \
  | python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')"
"$bin/troupe-client" --endpoint "$zmq" --detokenize "$ids" | grep -q '"text":" *The river runs"' \
  || { echo "http: --detokenize $ids did not give the text back"; exit 1; }

# ... and --json-schema holds its answers to the schema in the file: of a
# few seeds, every answer that ends is {"n": <a digit>}.
echo '{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"],
  "additionalProperties":false}' > "$work/digit.json"
# schema_answers SCHEMA PROMPT MAX_TOKENS: troupe-client's done lines for seeds 1-6.
schema_answers() {
  for seed in 1 2 3 4 5 6; do
    "$bin/troupe-client" --endpoint "$zmq" --prompt "$2" --max-tokens "$3" --seed "$seed" --no-stream \
      --json-schema "$1" --json 2>/dev/null | tail -1
  done
}
schema_answers "$work/digit.json" "A digit:" 24 > "$work/digits.jsonl"
python3 - "$work/digits.jsonl" <<'PY'
import json, sys
ended = 0
for line in open(sys.argv[1]):
    done = json.loads(line)
    assert done["finish_reason"] in ("stop", "length"), done
    if done["finish_reason"] == "stop":
        ended += 1
        assert set(json.loads(done["text"])) == {"n"} and json.loads(done["text"])["n"] in range(10), done
    else:
        assert done["text"].lstrip().startswith("{"), done
assert ended >= 1, "no --json-schema answer of 6 ended"
PY
# A pattern holds each answer that ends to it; one with lookaround is
# refused, naming it.
echo '{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2}$"}},"required":["code"],
  "additionalProperties":false}' > "$work/code.json"
schema_answers "$work/code.json" "A code:" 80 > "$work/codes.jsonl"
python3 - "$work/codes.jsonl" <<'PY'
import json, re, sys
ended = 0
for line in open(sys.argv[1]):
    done = json.loads(line)
    if done["finish_reason"] == "stop":
        ended += 1
        code = json.loads(done["text"])["code"]
        assert re.fullmatch(r"[A-Z]{3}-[0-9]{2}", code), done
assert ended >= 1, "no pattern answer of 6 ended"
PY
echo '{"type":"object","properties":{"n":{"type":"string","pattern":"(?=x)y"}}}' > "$work/pattern.json"
if "$bin/troupe-client" --endpoint "$zmq" --prompt x --json-schema "$work/pattern.json" 2> "$work/pattern.err" > /dev/null \
  || ! grep -q '"pattern"' "$work/pattern.err" || ! grep -q 'lookaround' "$work/pattern.err"; then
  echo "http: a pattern with lookaround was not refused by name"; cat "$work/pattern.err"; exit 1
fi
if "$bin/troupe-client" --endpoint "$zmq" --prompt x --json-schema "$work/no-such.json" > /dev/null 2>&1; then
  echo "http: troupe-client took --json-schema without a file"; exit 1
fi

python3 - "$http" "$ref" "$ref_lp" "$ref_plp" "$ref_min" <<'PY'
import json, re, socket, sys, time, urllib.request, urllib.error

base = "http://" + sys.argv[1]
ref = json.loads(sys.argv[2])
ref_lp = json.loads(sys.argv[3])
ref_plp = json.loads(sys.argv[4])
ref_min = json.loads(sys.argv[5])
assert ref_min["finish_reason"] == "eos" and ref_min["usage"]["completion_tokens"] == 4, ref_min

def call(path, body=None, method=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()

def events(text):
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            p = block[6:]
            out.append(p if p == "[DONE]" else json.loads(p))
    return out

# A Responses stream's typed events ("event: TYPE" then its data).
def typed_events(text):
    out = []
    for block in text.strip().split("\n\n"):
        if not block:
            continue
        head, data = block.split("\n", 1)
        out.append(json.loads(data[len("data: "):]))
        assert head == "event: " + out[-1]["type"], block
    return out

status, _, body = call("/health")
assert status == 200 and json.loads(body) == {"status": "ok"}, (status, body)

status, _, body = call("/v1/models")
models = [m["id"] for m in json.loads(body)["data"]]
assert status == 200 and models[0] == "demo" and "demo-r8" in models, (status, body)
status, _, body = call("/v1/models/demo-r8")
assert status == 200 and json.loads(body)["id"] == "demo-r8" and json.loads(body)["parent"] == "demo", body
status, _, body = call("/v1/models/nope")
assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found", body

req = {"model": "demo", "prompt": "The river runs", "max_tokens": 12, "temperature": 0}
status, ctype, body = call("/v1/completions", req)
assert status == 200 and ctype == "application/json", (status, body)
whole = json.loads(body)
choice = whole["choices"][0]
assert whole["object"] == "text_completion" and whole["model"] == "demo", whole
assert choice["text"] == ref["text"], (choice["text"], ref["text"])
assert whole["usage"]["completion_tokens"] == ref["usage"]["completion_tokens"], (whole, ref)
assert whole["usage"]["total_tokens"] == whole["usage"]["prompt_tokens"] + whole["usage"]["completion_tokens"]

status, ctype, body = call("/v1/completions", dict(req, stream=True, stream_options={"include_usage": True}))
assert status == 200 and ctype == "text/event-stream", (status, ctype)
ev = events(body)
assert ev[-1] == "[DONE]", ev[-3:]
usage = ev[-2]
assert usage["choices"] == [] and usage["usage"] == whole["usage"], usage
streamed = "".join(e["choices"][0]["text"] for e in ev[:-2])
assert streamed == choice["text"], (streamed, choice["text"])
assert ev[-3]["choices"][0]["finish_reason"] == choice["finish_reason"], ev[-3]

# vLLM's continuous_usage_stats: every chunk with the usage so far.
status, _, body = call("/v1/completions", dict(req, stream=True, stream_options={"include_usage": True,
                                                                                "continuous_usage_stats": True}))
ev = events(body)
counted = [e["usage"]["completion_tokens"] for e in ev[:-2]]
assert status == 200 and all(e["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"] for e in ev[:-1]), ev
assert counted == sorted(counted) and counted[-1] == whole["usage"]["completion_tokens"], counted
assert counted[0] >= 1 and ev[-2]["usage"] == whole["usage"], ev[-2:]
status, _, body = call("/v1/completions", dict(req, model="demo-r8", temperature=1, seed=3))
assert status == 200 and json.loads(body)["model"] == "demo-r8", body

def refused(expect, path="/v1/completions", body=None, method=None, raw=None, says=""):
    status, _, text = call(path, body, method, raw)
    err = json.loads(text)["error"]
    assert status == expect and says in err["message"], (path, body, status, text)
    return err

assert refused(404, body=dict(req, model="nope"))["code"] == "model_not_found"
assert refused(404, body=dict(req, model="nope", n=3))["code"] == "model_not_found", "every choice refused: one answer"
refused(400, body=dict(req, max_tokens=-5), says="max_tokens")
refused(400, raw=b"{not json", says="not valid JSON")
refused(400, body=dict(req, n=0), says='"n"')
refused(400, body=dict(req, prompt=["a", 5]), says="an array of those")

# Several prompts and n choices: one choice each, in order, each as its own
# request would give (greedy: the same text; seeded: seed + K for choice K).
status, _, body = call("/v1/completions", dict(req, prompt=["The river runs", "Once upon"], n=2))
many = json.loads(body)
assert status == 200 and [c["index"] for c in many["choices"]] == [0, 1, 2, 3], body
assert many["choices"][0]["text"] == ref["text"] and many["choices"][1]["text"] == ref["text"], body
status, _, body = call("/v1/completions", dict(req, prompt="Once upon"))
assert many["choices"][2]["text"] == json.loads(body)["choices"][0]["text"] == many["choices"][3]["text"], body
assert many["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"] + json.loads(body)["usage"]["prompt_tokens"]
status, _, body = call("/v1/completions", dict(req, prompt=["The river runs", "Once upon"], n=2, stream=True))
texts = {}
for e in events(body)[:-1]:
    texts[e["choices"][0]["index"]] = texts.get(e["choices"][0]["index"], "") + e["choices"][0]["text"]
assert texts == {k: c["text"] for k, c in enumerate(many["choices"])}, (texts, many)
sampled = dict(req, temperature=1, seed=3, max_tokens=8)
status, _, body = call("/v1/completions", dict(sampled, n=2))
pair = [c["text"] for c in json.loads(body)["choices"]]
singles = [json.loads(call("/v1/completions", dict(sampled, seed=s))[2])["choices"][0]["text"] for s in (3, 4)]
assert pair == singles, (pair, singles)
# best_of: of its candidates (seed + K, as n's), the one of the highest
# mean log-probability per token; every candidate's tokens billed; not
# streamed.
cands = [json.loads(call("/v1/completions", dict(sampled, seed=s, logprobs=0))[2])["choices"][0] for s in (3, 4, 5)]
means = [sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"]) for c in cands]
status, _, body = call("/v1/completions", dict(sampled, best_of=3))
best = json.loads(body)
assert status == 200 and len(best["choices"]) == 1 and best["choices"][0]["logprobs"] is None, body
assert best["choices"][0]["text"] == cands[means.index(max(means))]["text"], (body, cands, means)
assert best["usage"]["completion_tokens"] == sum(len(c["logprobs"]["tokens"]) for c in cands), (body, cands)
refused(400, body=dict(sampled, best_of=3, stream=True), says="cannot be streamed")
# Beam search (vLLM's use_beam_search): one beam is the greedy answer; three
# give their n best, each a sequence the model's own log-probabilities
# score (the mean per token, length_penalty 1), best first, the first no
# worse than greedy's; every step's tokens billed once per choice shown.
greedy = dict(req, max_tokens=6, ignore_eos=True, logprobs=0)
g = json.loads(call("/v1/completions", greedy)[2])["choices"][0]
status, _, body = call("/v1/completions", dict(greedy, use_beam_search=True))
one = json.loads(body)
assert status == 200 and one["choices"][0]["text"] == g["text"], (body, g)
assert one["choices"][0]["logprobs"]["token_logprobs"] == g["logprobs"]["token_logprobs"], (body, g)
status, _, body = call("/v1/completions", dict(greedy, use_beam_search=True, n=2, best_of=3))
beams = json.loads(body)
assert status == 200 and len(beams["choices"]) == 2, body
def mean(c):
    return sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"])
assert all(c["finish_reason"] == "length" and len(c["logprobs"]["tokens"]) == 6 for c in beams["choices"]), body
assert mean(beams["choices"][0]) >= mean(beams["choices"][1]) >= mean(beams["choices"][1]) - 1e-9, body
assert mean(beams["choices"][0]) >= mean(g) - 1e-6, (body, g)
assert beams["usage"]["completion_tokens"] == 12, body
# Each beam's tokens are the model's: its text completed greedily token by
# token (n 1) from its own prefix scores each token as the beam did.
for c in beams["choices"]:
    text, lps = "", []
    for tok, lp in zip(c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"]):
        step = json.loads(call("/v1/completions", dict(req, prompt=req["prompt"] + text, max_tokens=1,
                                                       logprobs=6, ignore_eos=True))[2])["choices"][0]
        alts = step["logprobs"]["top_logprobs"][0]
        assert tok in alts and abs(alts[tok] - lp) < 1e-3, (tok, lp, alts)
        text += tok
    assert text == c["text"], (text, c)
# A chat's: one beam says what the greedy chat says (its template's stop
# strings cut both); two give two messages.
chat_greedy = {"model": "demo", "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 6,
               "ignore_eos": True, "temperature": 0}
g = json.loads(call("/v1/chat/completions", chat_greedy)[2])
status, _, body = call("/v1/chat/completions", dict(chat_greedy, use_beam_search=True))
one = json.loads(body)
assert status == 200 and one["object"] == "chat.completion" and one["id"].startswith("chatcmpl-"), body
assert one["choices"][0]["message"]["content"] == g["choices"][0]["message"]["content"], (body, g)
status, _, body = call("/v1/chat/completions", dict(chat_greedy, use_beam_search=True, n=2))
assert status == 200 and len(json.loads(body)["choices"]) == 2, body
refused(400, path="/v1/chat/completions", body=dict(chat_greedy, use_beam_search=True, max_tokens=None),
        says="needs \"max_completion_tokens\"")
refused(400, body=dict(greedy, use_beam_search=True, stream=True), says="not served with")
refused(400, body=dict(greedy, use_beam_search=True, stop=["x"]), says='"stop" is not served')
refused(400, body=dict(greedy, use_beam_search=True, temperature=0.7), says='"temperature" is not served')
refused(400, body=dict(greedy, use_beam_search=True, best_of=11), says="at most 10 beams")
refused(400, body=dict(greedy, length_penalty=2), says="needs \"use_beam_search\": true")
refused(400, body=dict(greedy, use_beam_search="yes"), says="true or false")
refused(413, raw=b'{"model":"demo","prompt":"' + b"x" * (2 << 20) + b'"}')
refused(405, method="GET")
refused(405, path="/v1/chat/completions", method="GET")

# Adapters loaded and unloaded over HTTP (vLLM's paths): a second name for
# demo-r8's files answers as demo-r8 does and is listed; loaded twice, 409;
# unloaded, its name is unknown again; a bad body, 400 naming the field.
status, _, body = call("/v1/load_lora_adapter", {"lora_name": "again-r8", "lora_path": "models/demo/adapters/lora-1"})
assert status == 200 and json.loads(body) == {"lora_name": "again-r8", "rank": 8, "status": "loaded"}, (status, body)
assert "again-r8" in [m["id"] for m in json.loads(call("/v1/models")[2])["data"]]
r8 = json.loads(call("/v1/completions", dict(req, model="demo-r8"))[2])["choices"][0]["text"]
status, _, body = call("/v1/completions", dict(req, model="again-r8"))
assert status == 200 and json.loads(body)["choices"][0]["text"] == r8, (body, r8)
refused(409, "/v1/load_lora_adapter", {"lora_name": "again-r8", "lora_path": "models/demo/adapters/lora-1"},
        says="already registered")
refused(400, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "models/demo/adapters/lora-1", "load_inplace": True},
        says='"load_inplace"')
refused(400, "/v1/unload_lora_adapter", {"lora_name": 5}, says='"lora_name" must be a non-empty string')
refused(405, "/v1/unload_lora_adapter", method="GET")
status, _, body = call("/v1/unload_lora_adapter", {"lora_name": "again-r8"})
assert status == 200 and json.loads(body) == {"lora_name": "again-r8", "rank": 8, "status": "unloaded"}, (status, body)
assert refused(404, body=dict(req, model="again-r8"))["code"] == "model_not_found"
assert refused(404, "/v1/unload_lora_adapter", {"lora_name": "again-r8"})["code"] == "model_not_found"
status, _, body = call("/v1/load_lora_adapter", {"lora_name": "nowhere", "lora_path": "models/demo/adapters/none"})
assert status == 400 and "models/demo/adapters/none" in json.loads(body)["error"]["message"], (status, body)

# vLLM's /tokenize and /detokenize: the prompt's tokens are those a
# completion of it runs (its usage counts them; as a token prompt it answers
# the same), and they read back as its text.
status, _, body = call("/tokenize", {"model": "demo", "prompt": "The river runs"})
tok = json.loads(body)
assert status == 200 and tok["count"] == len(tok["tokens"]) == whole["usage"]["prompt_tokens"], (body, whole)
assert tok["max_model_len"] > tok["count"], tok
assert all(m["max_model_len"] == tok["max_model_len"] for m in json.loads(call("/v1/models")[2])["data"]), tok
status, _, body = call("/v1/completions", dict(req, prompt=tok["tokens"]))
assert status == 200 and json.loads(body)["choices"][0]["text"] == ref["text"], (body, ref)
status, _, body = call("/detokenize", {"tokens": tok["tokens"]})
assert status == 200 and json.loads(body)["prompt"].strip() == "The river runs", body
refused(400, "/tokenize", {"prompt": "x", "add_special_tokens": False}, says="add_special_tokens")
# vLLM's chat form: the tokens of the prompt a chat completion of the
# messages runs.
chat_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
status, _, body = call("/tokenize", {"messages": chat_msgs})
assert status == 200, body
chat_tok = json.loads(body)
status, _, body = call("/v1/chat/completions", {"model": "demo", "messages": chat_msgs, "max_tokens": 1})
assert status == 200 and chat_tok["count"] == json.loads(body)["usage"]["prompt_tokens"], (chat_tok, body)
refused(400, "/tokenize", {"messages": chat_msgs, "add_special_tokens": True}, says="add_special_tokens")
refused(400, "/detokenize", {"tokens": [-1]}, says='"tokens"')
refused(405, "/tokenize", method="GET")

# The text ends before a stop string (the wire's keeps it), whole and
# streamed.
text = ref["text"]
cut = text[len(text) // 2:len(text) // 2 + 3]
assert len(cut) == 3 and len(text) >= 8, text
status, _, body = call("/v1/completions", dict(req, stop=[cut]))
stopped = json.loads(body)["choices"][0]
assert status == 200 and stopped["finish_reason"] == "stop", body
assert stopped["text"] == text[:text.find(cut)], (stopped["text"], text, cut)
status, _, body = call("/v1/completions", dict(req, stop=[cut], stream=True))
assert "".join(e["choices"][0]["text"] for e in events(body)[:-1]) == stopped["text"], body

# Log-probabilities: the wire's, the greedy token the most likely, the same
# streamed; a chat's are content entries with their bytes.
assert ref_lp["text"] == ref["text"] and len(ref_lp["logprobs"]) == len(ref_lp["tokens"]), ref_lp
for t in ref_lp["logprobs"]:
    assert len(t["top"]) == 2 and t["top"][0]["token"] == t["token"] and t["top"][0]["logprob"] == t["logprob"], t
status, _, body = call("/v1/completions", dict(req, logprobs=2))
lp = json.loads(body)["choices"][0]["logprobs"]
assert status == 200 and lp["token_logprobs"] == [t["logprob"] for t in ref_lp["logprobs"]], (body, ref_lp)
assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"]), lp
for own, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
    assert own <= 0 and 1 <= len(top) <= 3 and max(top.values()) == own, (own, top)
status, _, body = call("/v1/completions", dict(req, logprobs=2, stream=True))
streamed_lp = [x for e in events(body)[:-1] if e["choices"][0]["logprobs"]
               for x in e["choices"][0]["logprobs"]["token_logprobs"]]
assert streamed_lp == lp["token_logprobs"], (streamed_lp, lp)
status, _, body = call("/v1/chat/completions", {"model": "demo", "messages": [{"role": "user", "content": "Hi"}],
                                                "max_tokens": 6, "temperature": 0, "logprobs": True,
                                                "top_logprobs": 2})
answer = json.loads(body)
content = answer["choices"][0]["logprobs"]["content"]
assert status == 200 and 0 < len(content) <= answer["usage"]["completion_tokens"], body
for c in content:
    assert isinstance(c["bytes"], list) and len(c["top_logprobs"]) == 2, c
    assert c["top_logprobs"][0]["logprob"] == c["logprob"], c
refused(400, path="/v1/chat/completions", body={"model": "demo", "messages": [{"role": "user", "content": "Hi"}],
                                                "top_logprobs": 2}, says="top_logprobs")
refused(400, body=dict(req, logprobs=21), says="logprobs")

# echo: the prompt first. A text prompt without log-probabilities as sent;
# with them (as lm-evaluation-harness scores a text: token ids, logprobs 1,
# max_tokens 1), each prompt token's log-probability given those before it:
# the output tokens of the greedy reference, fed back as prompt, get the
# log-probabilities they were generated with (a prefill's arithmetic, not a
# decode's: near, not equal), each the most likely.
status, _, body = call("/v1/completions", dict(req, echo=True))
assert status == 200 and json.loads(body)["choices"][0]["text"] == "The river runs" + ref["text"], body
prompt_ids = [t["token"] for t in ref_plp["prompt_logprobs"]]
assert ref_plp["tokens"] == ref["tokens"], (ref_plp, ref)
assert len(prompt_ids) == ref["usage"]["prompt_tokens"] and "logprob" not in ref_plp["prompt_logprobs"][0], ref_plp
assert all(t["logprob"] <= 0 and len(t["top"]) == 1 for t in ref_plp["prompt_logprobs"][1:]), ref_plp
scored = prompt_ids + ref["tokens"]
score = {"model": "demo", "prompt": scored, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
status, _, body = call("/v1/completions", score)
choice = json.loads(body)["choices"][0]
lp = choice["logprobs"]
assert status == 200 and len(lp["tokens"]) == len(scored) + 1, body
assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
assert "".join(lp["tokens"]) == choice["text"] and ref["text"] in choice["text"], (choice, ref)
for x, y in zip(ref_plp["prompt_logprobs"][1:], lp["token_logprobs"][1:len(prompt_ids)], strict=True):
    assert abs(x["logprob"] - y) < 1e-4, (ref_plp, lp)
for k, want in enumerate(ref_lp["logprobs"]):
    own, top = lp["token_logprobs"][len(prompt_ids) + k], lp["top_logprobs"][len(prompt_ids) + k]
    assert abs(own - want["logprob"]) < 1e-3 and max(top.values()) == own, (k, own, top, want)
assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"]), lp
status, _, body = call("/v1/completions", dict(score, stream=True))
streamed = events(body)[:-1]
assert "".join(e["choices"][0]["text"] for e in streamed) == choice["text"], (body, choice)
assert [x for e in streamed if e["choices"][0]["logprobs"]
        for x in e["choices"][0]["logprobs"]["token_logprobs"]] == lp["token_logprobs"], (body, lp)
status, _, body = call("/v1/completions", dict(score, max_tokens=0))
alone = json.loads(body)
assert status == 200 and alone["usage"]["completion_tokens"] == 0, body
assert alone["choices"][0]["logprobs"]["token_logprobs"] == lp["token_logprobs"][:-1], (alone, lp)
assert alone["choices"][0]["finish_reason"] == "length" and choice["text"].startswith(alone["choices"][0]["text"]), body
refused(400, path="/v1/chat/completions", body={"model": "demo", "messages": [{"role": "user", "content": "Hi"}],
                                                "echo": True}, says="echo")

# logit_bias and penalties (OpenAI's) steer sampling: +100 on one token
# makes a greedy output all that token; a frequency penalty makes the greedy
# reference, which repeats tokens, another text; out of range, refused.
forced = ref["tokens"][0] + 1
status, _, body = call("/v1/completions", dict(req, max_tokens=4, logprobs=0, logit_bias={str(forced): 100}))
biased = json.loads(body)["choices"][0]
assert status == 200 and len(biased["logprobs"]["tokens"]) == 4, body
assert len(set(biased["logprobs"]["tokens"])) == 1 and all(x <= 0 for x in biased["logprobs"]["token_logprobs"]), body
assert len(set(ref["tokens"])) < len(ref["tokens"]), ref
status, _, body = call("/v1/completions", dict(req, frequency_penalty=2, presence_penalty=2))
assert status == 200 and json.loads(body)["choices"][0]["text"] != ref["text"], (body, ref)
refused(400, body=dict(req, presence_penalty=3), says="presence_penalty")
refused(400, body=dict(req, logit_bias={"-4": 1}), says="logit_bias")
# vLLM's repetition_penalty: a strong one keeps the greedy output from
# repeating its tokens (a random model always has an unseen token of higher
# logit than a seen one brought near 0; bytes of a split character all
# show as U+FFFD, so those are left out); min_p 1 at temperature 1 draws the
# greedy output, every token the most likely; out of range, refused.
status, _, body = call("/v1/completions", dict(req, logprobs=0, repetition_penalty=100))
spread = [t for t in json.loads(body)["choices"][0]["logprobs"]["tokens"] if t != "\ufffd"]
assert status == 200 and len(spread) >= 6 and len(set(spread)) == len(spread), body
status, _, body = call("/v1/completions", dict(req, temperature=1, seed=5, min_p=1))
assert status == 200 and json.loads(body)["choices"][0]["text"] == ref["text"], (body, ref)
status, _, body = call("/v1/completions", dict(req, temperature=1, seed=5))
assert status == 200 and json.loads(body)["choices"][0]["text"] != ref["text"], (body, ref)
refused(400, body=dict(req, repetition_penalty=0), says="repetition_penalty")
refused(400, body=dict(req, min_p=1.5), says="min_p")

# vLLM's stop_token_ids, ignore_eos and min_tokens: a greedy output ends at
# the first of its tokens named a stop token; the end-of-sequence token
# forced by its bias ends the output at once, ends nothing with ignore_eos,
# and is held off by min_tokens.
stop_at = ref["tokens"][2]
status, _, body = call("/v1/completions", dict(req, stop_token_ids=[stop_at]))
cut = json.loads(body)
assert status == 200 and cut["choices"][0]["finish_reason"] == "stop", body
assert cut["usage"]["completion_tokens"] == ref["tokens"].index(stop_at) + 1, (body, ref)
eos = {"2": 100}
for extra, tokens, finish in (({}, 1, "stop"), ({"ignore_eos": True}, 5, "length"), ({"min_tokens": 3}, 4, "stop")):
    status, _, body = call("/v1/completions", dict(req, max_tokens=5, logit_bias=eos, **extra))
    one = json.loads(body)
    assert status == 200 and one["usage"]["completion_tokens"] == tokens, (extra, body)
    assert one["choices"][0]["finish_reason"] == finish, (extra, body)
refused(400, body=dict(req, max_tokens=2, min_tokens=3), says="min_tokens")
refused(400, body=dict(req, stop_token_ids=[-1]), says="stop_token_ids")
# vLLM's allowed_token_ids, bad_words and truncate_prompt_tokens: a greedy
# output drawn from two tokens holds only those (and so is not the
# reference); a word the reference writes is kept out of it; a prompt cut
# to its last token reads as that token alone.
pair = sorted({ref["tokens"][1], ref["tokens"][1] + 1})
status, _, body = call("/v1/completions", dict(req, allowed_token_ids=pair, logprobs=0))
drawn = json.loads(body)
assert status == 200 and drawn["usage"]["completion_tokens"] == 12, body
shown = set()
for t in pair:
    status, _, one = call("/detokenize", {"model": "demo", "tokens": [t]})
    shown.add(json.loads(one)["prompt"])
assert all(t in shown or t == "\ufffd" for t in drawn["choices"][0]["logprobs"]["tokens"]), (body, shown)
status, _, body = call("/detokenize", {"model": "demo", "tokens": [ref["tokens"][3]]})
word = json.loads(body)["prompt"]
status, _, body = call("/v1/completions", dict(req, bad_words=[word], logprobs=0))
kept = json.loads(body)["choices"][0]
assert status == 200 and kept["text"] != ref["text"], (body, ref, word)
assert word.strip() not in kept["logprobs"]["tokens"], (body, word)
status, _, body = call("/v1/completions", dict(req, max_tokens=1, truncate_prompt_tokens=1))
assert status == 200 and json.loads(body)["usage"]["prompt_tokens"] == 1, body
refused(400, body=dict(req, allowed_token_ids=[]), says="allowed_token_ids")
refused(400, body=dict(req, bad_words=[""]), says="bad_words")
refused(400, body=dict(req, truncate_prompt_tokens=0), says="truncate_prompt_tokens")
# vLLM's skip_special_tokens false: the special tokens show as their text
# (the demo's SentencePiece </s>), whole and streamed, but for one that ends
# the output; a stop string matches it.
forced = dict(req, max_tokens=3, logit_bias=eos)
for extra, text, finish in (({"ignore_eos": True}, "", "length"),
                            ({"ignore_eos": True, "skip_special_tokens": False}, "</s></s></s>", "length"),
                            ({"skip_special_tokens": False}, "", "stop"),
                            ({"ignore_eos": True, "skip_special_tokens": False, "stop": ["</s></s>"]}, "", "stop")):
    status, _, body = call("/v1/completions", dict(forced, **extra))
    whole = json.loads(body)["choices"][0]
    assert status == 200 and (whole["text"], whole["finish_reason"]) == (text, finish), (extra, body)
    status, _, body = call("/v1/completions", dict(forced, stream=True, **extra))
    streamed = "".join(e["choices"][0]["text"] for e in events(body)[:-1] if e["choices"])
    assert status == 200 and streamed == text, (extra, body)
refused(400, body=dict(req, skip_special_tokens="no"), says="skip_special_tokens")

# A chat completion (chatml) is a completion of its rendered prompt.
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The river runs"}]
rendered = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nThe river runs<|im_end|>\n"
            "<|im_start|>assistant\n")
status, _, body = call("/v1/completions", dict(req, prompt=rendered, stop=["<|im_end|>"]))
assert status == 200, body
plain = json.loads(body)
chat = {"model": "demo-r8", "messages": messages, "max_completion_tokens": 12, "temperature": 0}
status, _, body = call("/v1/completions", dict(req, model="demo-r8", prompt=rendered, stop=["<|im_end|>"]))
plain_r8 = json.loads(body)
status, ctype, body = call("/v1/chat/completions", chat)
assert status == 200 and ctype == "application/json", (status, body)
answer = json.loads(body)
assert answer["object"] == "chat.completion" and answer["model"] == "demo-r8", answer
msg = answer["choices"][0]["message"]
assert msg["role"] == "assistant" and msg["content"] == plain_r8["choices"][0]["text"], (msg, plain_r8)
assert answer["usage"] == plain_r8["usage"], (answer["usage"], plain_r8["usage"])
status, ctype, body = call("/v1/chat/completions", dict(chat, model="demo", stream=True))
assert status == 200 and ctype == "text/event-stream", (status, ctype)
ev = events(body)
assert ev[0]["object"] == "chat.completion.chunk" and ev[0]["choices"][0]["delta"] == {"role": "assistant",
                                                                                     "content": ""}, ev[0]
assert ev[-1] == "[DONE]" and ev[-2]["choices"][0]["delta"] == {}, ev[-2:]
streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[1:-2])
assert streamed == plain["choices"][0]["text"], (streamed, plain)
# A chat that sets no max_tokens may run to the end of the context (not the
# wire's 16): with ignore_eos it fills it, finishing for length.
status, _, body = call("/v1/models")
context = json.loads(body)["data"][0]["max_model_len"]
status, _, body = call("/v1/chat/completions", {"model": "demo", "messages": messages, "ignore_eos": True})
whole = json.loads(body)
assert status == 200 and whole["choices"][0]["finish_reason"] == "length", body[:400]
assert whole["usage"]["prompt_tokens"] + whole["usage"]["completion_tokens"] == context, (whole["usage"], context)
# A conversation over chat with a session: the second turn reuses the first
# turn's KV (the history, as the chat template renders it, begins the same),
# and answers as without it.
def metric(name):
    status, ctype, text = call("/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None
# Latencies as Prometheus histograms: every finished request counted in
# +Inf, its buckets cumulative.
status, _, text = call("/metrics")  # one snapshot: requests may still be finishing
assert "# TYPE troupe_ttft_seconds histogram\n" in text, text
# Totals are counters (named _total), levels gauges.
for typed in ("troupe_intake_accepted_total counter", "troupe_output_tokens_total counter",
              "troupe_requests_running gauge", "troupe_ttft_ms_p99 gauge"):
    assert "# TYPE " + typed + "\n" in text, (typed, text)
snapshot = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if not l.startswith("#")}
finished = sum(snapshot["troupe_finished_" + r + "_total"]
               for r in ("length", "eos", "stop", "cancelled", "error", "adapter_error", "aborted"))
assert snapshot["troupe_e2e_seconds_count"] == snapshot['troupe_e2e_seconds_bucket{le="+Inf"}'] == finished > 0, text
buckets = [v for k, v in snapshot.items() if k.startswith("troupe_ttft_seconds_bucket{")]
assert len(buckets) > 2 and buckets == sorted(buckets) and buckets[-1] == snapshot["troupe_ttft_seconds_count"], text
hits = metric("troupe_session_hits_total")
turn = dict(chat, model="demo", messages=[{"role": "user", "content": "Tell me about the river."}], session="conv-1")
status, _, body = call("/v1/chat/completions", turn)
assert status == 200, body
assert "prompt_tokens_details" not in json.loads(body)["usage"], body
reply = json.loads(body)["choices"][0]["message"]["content"]
turn["messages"] = turn["messages"] + [{"role": "assistant", "content": reply}, {"role": "user", "content": "More."}]
status, _, body = call("/v1/chat/completions", turn)
assert status == 200, body
assert metric("troupe_session_hits_total") == hits + 1, "the second turn did not reuse the first's cache"
# Its usage says how much of the prompt came from the cache (OpenAI's field).
usage = json.loads(body)["usage"]
cached = usage["prompt_tokens_details"]["cached_tokens"]
assert 0 < cached < usage["prompt_tokens"], usage
# response_format json_object: every answer that ends (finish "stop") is one
# JSON object; one cut at max_tokens is the beginning of one. The demo
# model's weights are random, so sampling wanders: a dozen seeds.
closed = 0
for seed in range(12):
    jstatus, _, jbody = call("/v1/completions", {"model": "demo", "prompt": "Answer in JSON:", "max_tokens": 120,
                                                 "seed": seed, "response_format": {"type": "json_object"}})
    assert jstatus == 200, jbody
    jchoice = json.loads(jbody)["choices"][0]
    if jchoice["finish_reason"] == "stop":
        assert isinstance(json.loads(jchoice["text"]), dict), jchoice
        closed += 1
    else:
        assert jchoice["finish_reason"] == "length" and jchoice["text"].lstrip().startswith("{"), jchoice
assert closed >= 2, "too few JSON answers ended to check them: %d of 12" % closed
jstatus, _, jbody = call("/v1/chat/completions", dict(chat, max_completion_tokens=60, response_format={"type": "json_object"}))
assert jstatus == 200, jbody
jchoice = json.loads(jbody)["choices"][0]
assert jchoice["finish_reason"] != "stop" or isinstance(json.loads(jchoice["message"]["content"]), dict), jchoice
refused(400, body={"model": "demo", "prompt": "x", "response_format": {"type": "json_schema"}}, says="json_schema")
# response_format json_schema: every answer that ends is a value of the
# schema; one cut short is the beginning of one.
city = {"type": "object", "additionalProperties": False, "required": ["city", "pop", "big"],
        "properties": {"city": {"type": "string"}, "pop": {"type": "integer"}, "big": {"type": "boolean"},
                       "kind": {"enum": ["town", "capital"]}}}
schema_format = {"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": city}}
from decimal import Decimal
def schema_answers(prompt, schema, max_tokens):
    """The texts of the answers of seeds 0-11 that ended (each cut short is
    the beginning of an object)."""
    texts = []
    for seed in range(12):
        jstatus, _, jbody = call("/v1/completions", {"model": "demo", "prompt": prompt, "max_tokens": max_tokens,
                                                     "seed": seed, "response_format": {"type": "json_schema",
                                                     "json_schema": {"name": "s", "strict": True, "schema": schema}}})
        assert jstatus == 200, jbody
        jchoice = json.loads(jbody)["choices"][0]
        if jchoice["finish_reason"] == "stop":
            texts.append(jchoice["text"])
        else:
            assert jchoice["finish_reason"] == "length" and jchoice["text"].lstrip().startswith("{"), jchoice
    return texts
cities = schema_answers("A city:", city, 120)
for text in cities:
    value = json.loads(text)
    assert set(value) <= {"city", "pop", "big", "kind"} and {"city", "pop", "big"} <= set(value), text
    assert isinstance(value["city"], str) and type(value["pop"]) is int and type(value["big"]) is bool, text
    assert value.get("kind", "town") in ("town", "capital"), text
assert cities, "no JSON Schema answer of 12 ended"
# A schema as Pydantic writes one: a discriminated union (oneOf of $refs
# beside discriminator), a tuple (prefixItems), bounded numbers and a price
# in cents (multipleOf). Every answer that ends is a value of it.
import re
pets = {"$defs": {
    "Cat": {"type": "object", "properties": {"kind": {"const": "cat", "title": "Kind"},
                                             "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["kind", "lives"], "additionalProperties": False},
    "Dog": {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
            "required": ["kind", "good"], "additionalProperties": False}},
    "type": "object", "additionalProperties": False, "required": ["pet", "where", "price"],
    "properties": {
        "pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                "discriminator": {"propertyName": "kind", "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}},
        "where": {"type": "array", "prefixItems": [{"type": "number", "minimum": -90, "maximum": 90},
                                                   {"type": "number", "minimum": -180, "exclusiveMaximum": 180}],
                  "items": False, "minItems": 2},
        "price": {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 1000}}}
pet_answers = schema_answers("A pet:", pets, 250)
for text in pet_answers:
    value = json.loads(text, parse_float=Decimal)
    pet, (lat, lon), price = value["pet"], value["where"], value["price"]
    assert set(value) == {"pet", "where", "price"} and len(value["where"]) == 2, text
    assert (pet["kind"] == "cat" and set(pet) == {"kind", "lives"} and type(pet["lives"]) is int
            and 1 <= pet["lives"] <= 9) or (pet["kind"] == "dog" and set(pet) == {"kind", "good"}
                                            and type(pet["good"]) is bool), text
    assert -90 <= lat <= 90 and -180 <= lon < 180 and 0 <= price <= 1000 and Decimal(price) % Decimal("0.01") == 0, text
    assert not re.search("[0-9.][eE]", text), text  # bounded numbers: no exponent
assert pet_answers, "no answer of 12 to the Pydantic-style schema ended"
print(f"http: {len(pet_answers)} of 12 answers to a Pydantic-style schema ended, each a value of it")
# vLLM's guided_json and structured_outputs hold the output to the same
# schema: the same seed gives the same answer.
for seed in range(3):
    asked = {"model": "demo", "prompt": "A city:", "max_tokens": 120, "seed": seed}
    answers = set()
    for held in ({"response_format": schema_format}, {"guided_json": city}, {"guided_json": json.dumps(city)},
                 {"structured_outputs": {"json": city}}):
        jstatus, _, jbody = call("/v1/completions", dict(asked, **held))
        assert jstatus == 200, (held, jbody)
        answers.add(json.loads(jbody)["choices"][0]["text"])
    assert len(answers) == 1, answers
assert refused(400, body={"model": "demo", "prompt": "x", "guided_json": {
    "type": "object", "properties": {"mail": {"type": "string", "format": "idn-email"}}}}, says="format")["param"] == "guided_json"
# vLLM's guided_choice and structured_outputs' choice: the text is one of
# the choices, whole and streamed ("no" may end where "not sure" goes on).
picks = ["yes", "no", "not sure", "maybe so"]
for seed in range(4):
    for held in ({"guided_choice": picks}, {"structured_outputs": {"choice": picks}}):
        asked = dict({"model": "demo", "prompt": "Is it?", "max_tokens": 20, "seed": seed}, **held)
        jstatus, _, jbody = call("/v1/completions", asked)
        jchoice = json.loads(jbody)["choices"][0]
        assert jstatus == 200 and jchoice["text"] in picks and jchoice["finish_reason"] == "stop", (held, jbody)
        jstatus, _, jbody = call("/v1/completions", dict(asked, stream=True))
        streamed = "".join(e["choices"][0]["text"] for e in events(jbody)[:-1] if e["choices"])
        assert jstatus == 200 and streamed == jchoice["text"], (held, jbody)
jstatus, _, jbody = call("/v1/chat/completions", {"model": "demo", "messages": [{"role": "user", "content": "Is it?"}],
                                                  "guided_choice": picks, "max_tokens": 20})
assert jstatus == 200 and json.loads(jbody)["choices"][0]["message"]["content"] in picks, jbody
assert refused(400, body={"model": "demo", "prompt": "x", "guided_choice": ["a", "a"]},
               says="given twice")["param"] == "guided_choice"
# vLLM's guided_regex and structured_outputs' regex: the whole text matches.
import re
phone = "[0-9]{3}-[0-9]{4}( x[0-9]{1,3})?"
for seed in range(4):
    for held in ({"guided_regex": phone}, {"structured_outputs": {"regex": phone}}):
        asked = dict({"model": "demo", "prompt": "Call", "max_tokens": 30, "seed": seed}, **held)
        jstatus, _, jbody = call("/v1/completions", asked)
        jchoice = json.loads(jbody)["choices"][0]
        assert jstatus == 200 and re.fullmatch(phone, jchoice["text"]) and jchoice["finish_reason"] == "stop", jbody
        jstatus, _, jbody = call("/v1/completions", dict(asked, stream=True))
        streamed = "".join(e["choices"][0]["text"] for e in events(jbody)[:-1] if e["choices"])
        assert jstatus == 200 and streamed == jchoice["text"], (held, jbody)
assert refused(400, body={"model": "demo", "prompt": "x", "guided_regex": "a(?=b)"},
               says="guided_regex")["param"] == "guided_regex"
# vLLM's guided_grammar and structured_outputs' grammar (GBNF): the whole
# text is a sentence of the grammar's root.
sql = 'root ::= "SELECT " cols " FROM " table (" WHERE " col " = " [0-9]{1,3})?\n' \
      'cols ::= col ("," col){0,2}\ncol ::= "id" | "name" | "age"\ntable ::= "users" | "orders"  # done'
sentence = r"SELECT (id|name|age)(,(id|name|age)){0,2} FROM (users|orders)( WHERE (id|name|age) = [0-9]{1,3})?"
for seed in range(4):
    for held in ({"guided_grammar": sql}, {"structured_outputs": {"grammar": sql}}):
        asked = dict({"model": "demo", "prompt": "Query:", "max_tokens": 100, "seed": seed}, **held)
        jstatus, _, jbody = call("/v1/completions", asked)
        jchoice = json.loads(jbody)["choices"][0]
        assert jstatus == 200 and re.fullmatch(sentence, jchoice["text"]), jbody
        assert jchoice["finish_reason"] == "stop", jbody
        jstatus, _, jbody = call("/v1/completions", dict(asked, stream=True))
        streamed = "".join(e["choices"][0]["text"] for e in events(jbody)[:-1] if e["choices"])
        assert jstatus == 200 and streamed == jchoice["text"], (held, jbody)
assert "left recursion" in refused(400, body={"model": "demo", "prompt": "x",
                                              "guided_grammar": 'root ::= root "a" | "a"'},
                                   says="guided_grammar")["message"]
# The same grammar in Lark (Outlines' form, which vLLM takes too).
lark = 'start: "SELECT " cols " FROM " TABLE [" WHERE " col " = " /[0-9]{1,3}/]\n' \
       'cols: col ("," col)~0..2  // up to three\n?col: "id" | "name"\n    | "age"\nTABLE: "users" | "orders"\n' \
       '%import common.WS\n%ignore WS\n'
for seed in range(3):
    lstatus, _, lbody = call("/v1/completions", {"model": "demo", "prompt": "Query:", "max_tokens": 100, "seed": seed,
                                                 "guided_grammar": lark})
    assert lstatus == 200, lbody
    lchoice = json.loads(lbody)["choices"][0]
    assert re.fullmatch(sentence, lchoice["text"]) and lchoice["finish_reason"] == "stop", lbody
err = refused(400, body={"model": "demo", "prompt": "x", "guided_grammar": "start: x\n%declare x"}, says="line 2")
assert err["param"] == "guided_grammar", err
refused(400, body={"model": "demo", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
    "name": "s", "schema": {"type": "object", "properties": {"mail": {"type": "string", "format": "idn-email"}}}}}},
        says="format")
# Symphony's advisory over HTTP: the session's next turn is coming.
status, _, advice = call("/v1/advise", {"session": "conv-1", "in_s": 0})
assert status == 200 and json.loads(advice)["session"] == "conv-1", advice
assert json.loads(advice)["status"] in ("on_gpu", "fetching", "in_host", "scheduled"), advice
status, _, advice = call("/v1/advise", {"session": "nobody"})
assert status == 200 and json.loads(advice)["status"] == "none", advice
refused(400, path="/v1/advise", body={"in_s": 1}, says="session")
refused(405, path="/v1/advise", method="GET")
del turn["session"]
status, _, again = call("/v1/chat/completions", turn)
assert json.loads(again)["choices"][0]["message"] == json.loads(body)["choices"][0]["message"], (again, body)

# Tools. A forced answer (tool_choice "required" or a function) is calls of
# the tools given (one for a function), their arguments held to the
# function's parameters; streamed, the same call comes in tool_calls deltas,
# its id and name first, then its arguments as they are written.
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                   "properties": {"city": {"type": "string", "maxLength": 12},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
clock = {"type": "function", "function": {"name": "get_time"}}
ask = {"model": "demo", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [weather, clock],
       "max_completion_tokens": 120}
called = set()
for seed in range(12):
    status, _, body = call("/v1/chat/completions", dict(ask, seed=seed, tool_choice="required"))
    assert status == 200, body
    choice = json.loads(body)["choices"][0]
    if choice["finish_reason"] != "tool_calls":
        # Cut short by max_completion_tokens: no call began, or the last
        # one's arguments are those written before the cut.
        assert choice["finish_reason"] == "length", choice
        continue
    assert choice["message"]["content"] is None and choice["message"]["tool_calls"], choice
    for tc in choice["message"]["tool_calls"]:
        assert tc["type"] == "function" and tc["id"].startswith("call_"), choice
        args = json.loads(tc["function"]["arguments"])
        called.add(tc["function"]["name"])
        if tc["function"]["name"] == "get_weather":
            assert set(args) == {"city", "days"} and isinstance(args["city"], str) and len(args["city"]) <= 12, tc
            assert type(args["days"]) is int and 1 <= args["days"] <= 7, tc
        else:
            assert tc["function"]["name"] == "get_time" and args == {}, tc
assert called, "no forced call of 12 ended"
named = dict(ask, seed=3, tool_choice={"type": "function", "function": {"name": "get_time"}})
status, _, body = call("/v1/chat/completions", named)
whole = json.loads(body)["choices"][0]
assert whole["finish_reason"] == "tool_calls", whole
assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole["message"]["tool_calls"]] == [("get_time", "{}")], whole
status, ctype, body = call("/v1/chat/completions", dict(named, stream=True))
assert status == 200 and ctype == "text/event-stream", (status, body)
ev = events(body)
deltas = [e["choices"][0]["delta"] for e in ev[1:-1]]
calls = [c for d in deltas for c in d.get("tool_calls", [])]
assert calls and all(c["index"] == 0 for c in calls), ev
assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function", ev
assert calls[0]["function"]["name"] == "get_time", ev
assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls[1:]), ev
assert "".join(c["function"]["arguments"] for c in calls) == "{}", ev
assert ev[-2]["choices"][0]["finish_reason"] == "tool_calls" and ev[-1] == "[DONE]", ev[-2:]
# OpenAI's legacy function calling: the same call, as message.function_call.
legacy = {"model": "demo", "messages": ask["messages"], "functions": [clock["function"]],
          "function_call": {"name": "get_time"}, "max_completion_tokens": 120, "seed": 3}
status, _, body = call("/v1/chat/completions", legacy)
old = json.loads(body)["choices"][0]
assert status == 200 and old["finish_reason"] == "function_call", body
assert old["message"]["function_call"] == {"name": "get_time", "arguments": "{}"} and "tool_calls" not in old["message"], old
# "auto": the model's text, or its calls where they read as calls; a turn
# after calls and their results goes on.
status, _, body = call("/v1/chat/completions", dict(ask, seed=1))
assert status == 200 and json.loads(body)["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), body
history = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": json.dumps({"city": "Paris", "days": 1})}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}]
status, _, body = call("/v1/chat/completions", dict(ask, messages=history, tool_choice="none"))
assert status == 200 and isinstance(json.loads(body)["choices"][0]["message"]["content"], str), body
# "auto" beside response_format: the answer is calls, or content that is a
# value of the format's schema (the output ends when that value closes).
verdict = {"type": "object", "additionalProperties": False, "required": ["ok"],
           "properties": {"ok": {"type": "boolean"}}}
formatted = dict(ask, max_completion_tokens=60,
                 response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": verdict}})
ends = set()
for seed in range(10):
    status, _, body = call("/v1/chat/completions", dict(formatted, seed=seed))
    assert status == 200, body
    choice = json.loads(body)["choices"][0]
    ends.add(choice["finish_reason"])
    if choice["finish_reason"] == "stop":
        assert "tool_calls" not in choice["message"], choice
        value = json.loads(choice["message"]["content"])
        assert set(value) == {"ok"} and type(value["ok"]) is bool, choice
    elif choice["finish_reason"] == "tool_calls":
        for tc in choice["message"]["tool_calls"]:
            assert tc["function"]["name"] in ("get_weather", "get_time"), tc
            json.loads(tc["function"]["arguments"])
    else:
        assert choice["finish_reason"] == "length", choice
assert ends & {"stop", "tool_calls"}, ends
err = refused(400, path="/v1/chat/completions", body=dict(ask, response_format={"type": "json_schema", "json_schema": {
    "name": "n", "schema": {"type": "object", "properties": {"x": {"type": "string", "format": "idn-email"}}}}}),
    says="format")
assert err["param"] == "response_format", err
# POST /v1/responses: the chat it stands for, answered as the Responses API
# answers: output items whole, or typed events ending in the whole response.
resp_ask = {"model": "demo", "instructions": "Be brief.", "input": "Weather in Paris?", "max_output_tokens": 8,
            "temperature": 0}
status, _, body = call("/v1/responses", resp_ask)
assert status == 200, body
r = r_whole = json.loads(body)
assert r["object"] == "response" and r["id"].startswith("resp_") and r["status"] in ("completed", "incomplete"), r
said = "".join(p["text"] for it in r["output"] if it["type"] == "message" for p in it["content"])
status, _, body = call("/v1/chat/completions", {"model": "demo", "max_completion_tokens": 8, "temperature": 0, "messages": [
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]})
same = json.loads(body)
assert said == (same["choices"][0]["message"]["content"] or ""), (r, same)
assert r["usage"]["input_tokens"] == same["usage"]["prompt_tokens"], (r, same)
assert r["usage"]["output_tokens"] == same["usage"]["completion_tokens"], (r, same)
status, ctype, body = call("/v1/responses", dict(resp_ask, stream=True))
assert status == 200 and ctype == "text/event-stream", (status, body)
typed = []
for block in body.strip().split("\n\n"):
    head, data = block.split("\n", 1)
    typed.append(json.loads(data[len("data: "):]))
    assert head == "event: " + typed[-1]["type"] and typed[-1]["sequence_number"] == len(typed) - 1, block
assert typed[0]["type"] == "response.created" and typed[-1]["type"] == "response." + r["status"], typed[-1]
assert "".join(e["delta"] for e in typed if e["type"] == "response.output_text.delta") == said, typed
assert [it["type"] for it in typed[-1]["response"]["output"]] == [it["type"] for it in r["output"]], typed[-1]
# A forced call, then its output sent back with it for the next turn.
clock_tool = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {},
                                                                      "additionalProperties": False}}
for seed in range(12): # (the demo model may write blanks until the cut)
    status, _, body = call("/v1/responses", {"model": "demo", "input": "Time?", "tools": [clock_tool], "seed": seed,
                                             "tool_choice": {"type": "function", "name": "get_time"},
                                             "max_output_tokens": 60})
    assert status == 200, body
    r = json.loads(body)
    calls = [it for it in r["output"] if it["type"] == "function_call"]
    if r["status"] == "completed":
        break
    assert r["incomplete_details"] == {"reason": "max_output_tokens"}, r
assert r["status"] == "completed", "no forced call of 12 ended"
assert len(calls) == 1 and calls[0]["name"] == "get_time" and json.loads(calls[0]["arguments"]) == {}, r
status, _, body = call("/v1/responses", {"model": "demo", "tools": [clock_tool], "max_output_tokens": 4, "input": [
    {"role": "user", "content": "Time?"}, *r["output"],
    {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "noon"}]})
assert status == 200 and json.loads(body)["object"] == "response", body
# Kept (OpenAI's store default): previous_response_id goes on from a
# response, its input and output before this turn's input (its
# instructions not carried over); GET reads one back, DELETE drops it.
status, _, body = call("/v1/responses", {"model": "demo", "input": "Hi", "max_output_tokens": 4, "temperature": 0})
first = json.loads(body)
assert status == 200 and first["store"] is True and first["id"].startswith("resp_") and len(first["id"]) > 20, body
first_text = "".join(p["text"] for it in first["output"] if it["type"] == "message" for p in it["content"])
status, _, body = call("/v1/responses", {"model": "demo", "input": "More?", "previous_response_id": first["id"],
                                         "max_output_tokens": 4, "temperature": 0})
second = json.loads(body)
assert status == 200 and second["previous_response_id"] == first["id"], body
status, _, body = call("/tokenize", {"messages": [{"role": "user", "content": "Hi"},
                                                  {"role": "assistant", "content": first_text},
                                                  {"role": "user", "content": "More?"}]})
assert second["usage"]["input_tokens"] == json.loads(body)["count"], (second, body)
# The conversation runs in a Troupe session (its first response's id): the
# second turn reuses the first's K and V, prompt and reply.
assert second["usage"]["input_tokens_details"]["cached_tokens"] > 0, second
# OpenAI's count of a response request's input: the same prompt.
status, _, body = call("/v1/responses/input_tokens", {"model": "demo", "input": "More?",
                                                      "previous_response_id": first["id"]})
assert status == 200 and json.loads(body) == {"object": "response.input_tokens",
                                              "input_tokens": second["usage"]["input_tokens"]}, (body, second)
status, _, body = call("/v1/responses/" + second["id"], method="GET")
assert status == 200 and json.loads(body) == second, body
status, _, body = call("/v1/responses/" + first["id"], method="DELETE")
assert status == 200 and json.loads(body) == {"id": first["id"], "object": "response", "deleted": True}, body
err = refused(404, path="/v1/responses", body={"model": "demo", "input": "q", "previous_response_id": second["id"]},
              says="an earlier turn of " + second["id"])
assert err["param"] == "previous_response_id" and first["id"] in err["message"], err
status, _, body = call("/v1/responses", dict(resp_ask, store=False))
unkept = json.loads(body)
assert status == 200 and unkept["store"] is False, body
refused(404, path="/v1/responses/" + unkept["id"], method="GET", says="not kept")
err = refused(400, path="/v1/responses", body=dict(resp_ask, input=[{"role": "user", "content": "q"},
    {"type": "function_call_output", "call_id": "nope", "output": "x"}]), says="input[1].tool_call_id")
assert err["param"] == "input", err
refused(405, path="/v1/responses/" + second["id"], method="POST", raw=b"{}")
# A kept response's input items, a page at a time (OpenAI's list).
status, _, body = call("/v1/responses", dict(resp_ask, input=[{"role": "user", "content": "Weather?"},
                                                          {"role": "assistant", "content": "Where?"},
                                                          {"role": "user", "content": "Paris"}]))
listed = json.loads(body)["id"]
status, _, body = call("/v1/responses/" + listed + "/input_items", method="GET")
page = json.loads(body)
assert status == 200 and page["object"] == "list" and page["has_more"] is False, body
assert [i["content"][0]["text"] for i in page["data"]] == ["Paris", "Where?", "Weather?"], page
assert [i["content"][0]["type"] for i in page["data"]] == ["input_text", "output_text", "input_text"], page
status, _, body = call("/v1/responses/" + listed + "/input_items?order=asc&limit=1&after=" + page["data"][2]["id"],
                       method="GET")
assert status == 200 and [i["id"] for i in json.loads(body)["data"]] == [page["data"][1]["id"]], body
assert json.loads(body)["has_more"] is True, body
refused(400, path="/v1/responses/" + listed + "/input_items?limit=0", method="GET", says='"limit"')
refused(405, path="/v1/responses/" + listed + "/input_items", method="DELETE")
refused(404, path="/v1/responses/resp_none/input_items", method="GET", says="no stored response")
# A conversation (OpenAI's Conversations API): a response that names it
# goes on from its items, in its session (the turn reuses the K and V of
# the turns before it), and its input and output join them.
status, _, body = call("/v1/conversations", {"metadata": {"topic": "e2e"},
                                             "items": [{"role": "user", "content": "Hi"}]})
conv = json.loads(body)
assert status == 200 and conv["object"] == "conversation" and conv["id"].startswith("conv_"), body
assert conv["metadata"] == {"topic": "e2e"}, body
conv_at = "/v1/conversations/" + conv["id"]
metrics_text = call("/metrics", method="GET")[2]
kept_now = float(re.search(r"^troupe_http_conversations_kept (\S+)$", metrics_text, re.M).group(1))
assert kept_now >= 1 and re.search(r"^troupe_http_conversation_store_bytes [1-9]", metrics_text, re.M), metrics_text
assert re.search(r"^# TYPE troupe_http_responses_kept gauge$", metrics_text, re.M), metrics_text
status, _, body = call(conv_at, method="GET")
assert status == 200 and json.loads(body) == conv, body
status, _, body = call("/v1/responses", {"model": "demo", "input": "More?", "conversation": conv["id"],
                                         "max_output_tokens": 4, "temperature": 0})
turn1 = json.loads(body)
assert status == 200 and turn1["conversation"] == {"id": conv["id"]}, body
status, _, body = call("/tokenize", {"messages": [{"role": "user", "content": "Hi"},
                                                  {"role": "user", "content": "More?"}]})
assert turn1["usage"]["input_tokens"] == json.loads(body)["count"], (turn1, body)
status, _, body = call(conv_at + "/items?order=asc", method="GET")
items = json.loads(body)["data"]
assert status == 200 and [i["type"] for i in items] == ["message"] * 3, body
assert [i["content"][0]["text"] for i in items[:2]] == ["Hi", "More?"], items
assert items[2] == turn1["output"][0], (items, turn1)
status, _, body = call("/v1/responses", {"model": "demo", "input": "And?", "conversation": {"id": conv["id"]},
                                         "max_output_tokens": 4, "temperature": 0, "stream": True})
assert status == 200 and typed_events(body)[-1]["type"] in ("response.completed", "response.incomplete"), body
assert typed_events(body)[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] > 0, body
# Its session is named by its id: Symphony's advisory names it so.
status, _, advice = call("/v1/advise", {"session": conv["id"], "in_s": 0})
assert status == 200 and json.loads(advice)["status"] in ("on_gpu", "fetching", "in_host", "scheduled"), advice
status, _, body = call(conv_at + "/items?limit=2", method="GET")
page = json.loads(body)
assert [i["role"] for i in page["data"]] == ["assistant", "user"] and page["has_more"] is True, body
assert page["data"][1]["content"][0]["text"] == "And?", body
status, _, body = call(conv_at + "/items", {"items": [{"role": "user", "content": "Noted"}]})
added = json.loads(body)["data"][0]
assert status == 200 and added["content"] == [{"type": "input_text", "text": "Noted"}], body
status, _, body = call(conv_at + "/items/" + added["id"], method="GET")
assert status == 200 and json.loads(body) == added, body
status, _, body = call(conv_at + "/items/" + added["id"], method="DELETE")
assert status == 200 and json.loads(body)["id"] == conv["id"], body
refused(404, path=conv_at + "/items/" + added["id"], method="GET", says="no item")
status, _, body = call(conv_at, {"metadata": {"topic": "done"}})
assert status == 200 and json.loads(body)["metadata"] == {"topic": "done"}, body
refused(400, path="/v1/conversations", body={"items": [{"type": "web_search_call"}]}, says="items[0].type")
refused(400, path="/v1/responses", body={"model": "demo", "input": "q", "conversation": conv["id"],
                                         "previous_response_id": turn1["id"]}, says="cannot both be given")
refused(405, path="/v1/conversations", method="GET")
refused(405, path=conv_at + "/items", method="DELETE")
refused(404, path=conv_at + "/other", method="GET", says="no such path")
# truncation "auto": a conversation past the context drops its earliest
# items (whole turns) until the prompt and max_output_tokens fit; without
# it the same request is refused.
status, _, body = call("/v1/conversations", {"items": [
    {"role": "user" if k % 2 == 0 else "assistant", "content": "The river runs past the old mill. " * 60}
    for k in range(12)]})
long_conv = json.loads(body)["id"]
past_ask = {"model": "demo", "input": "Now?", "conversation": long_conv, "max_output_tokens": 8, "store": False}
err = refused(400, path="/v1/responses", body=past_ask, says="exceeds the context")
status, _, body = call("/v1/responses/input_tokens", dict(past_ask, truncation="auto"))
assert status == 200, body
counted_cut = json.loads(body)["input_tokens"]
status, _, body = call("/v1/responses/input_tokens", past_ask)
assert status == 200, body
counted_whole = json.loads(body)["input_tokens"]
status, _, body = call("/v1/responses", dict(past_ask, truncation="auto"))
cut = json.loads(body)
assert status == 200 and cut["truncation"] == "auto", body
status, _, body = call("/tokenize", {"prompt": "x"})
assert cut["usage"]["input_tokens"] + 8 <= json.loads(body)["max_model_len"], (cut["usage"], body)
assert cut["usage"]["input_tokens"] > json.loads(body)["max_model_len"] // 2, cut["usage"] # (only what must go)
# Counted as it would run: cut the same way (before the turn joined the
# conversation), and uncut without truncation.
assert counted_cut == cut["usage"]["input_tokens"], (counted_cut, cut["usage"])
assert counted_whole > cut["usage"]["input_tokens"] + 8, counted_whole
refused(400, path="/v1/responses", body=dict(past_ask, truncation="middle"), says='"truncation"')
status, _, body = call(conv_at, method="DELETE")
assert status == 200 and json.loads(body) == {"id": conv["id"], "object": "conversation.deleted", "deleted": True}
err = refused(404, path="/v1/responses", body={"model": "demo", "input": "q", "conversation": conv["id"]},
              says="no conversation")
assert err["param"] == "conversation", err
# Background: answered at once, queued, then read with GET until it ends;
# its output is the whole answer's. A cancel stops one that runs (again:
# the same), and is refused for a response answered whole.
def poll(rid):
    for _ in range(600):
        status, _, body = call("/v1/responses/" + rid, method="GET")
        assert status == 200, body
        r = json.loads(body)
        if r["status"] not in ("queued", "in_progress"):
            return r
        time.sleep(0.05)
    raise AssertionError("background response " + rid + " still running after 30 s")
status, _, body = call("/v1/responses", dict(resp_ask, background=True))
queued = json.loads(body)
assert status == 200 and queued["status"] == "queued" and queued["background"] is True and queued["output"] == [], body
ended = poll(queued["id"])
assert ended["status"] == r_whole["status"] and ended["background"] is True, ended
assert "".join(p["text"] for it in ended["output"] if it["type"] == "message" for p in it["content"]) == said, ended
assert ended["usage"] == r_whole["usage"], (ended, r_whole)
def cancelled_total():
    text = call("/metrics", method="GET")[2]
    return float(re.search(r"^troupe_finished_cancelled_total (\S+)$", text, re.M).group(1))
before = cancelled_total()
long_ask = dict(resp_ask, max_output_tokens=1900, logit_bias={"2": -100}, background=True) # (no end token: it runs)
status, _, body = call("/v1/responses", long_ask)
running = json.loads(body)
assert status == 200 and running["status"] == "queued", body
err = refused(400, path="/v1/responses", body={"model": "demo", "input": "q", "previous_response_id": running["id"]},
              says="still running in the background")
assert err["param"] == "previous_response_id", err
status, _, body = call("/v1/responses/" + running["id"] + "/cancel", method="POST")
assert status == 200 and json.loads(body)["status"] == "cancelled" and json.loads(body)["output"] == [], body
status, _, again = call("/v1/responses/" + running["id"] + "/cancel", method="POST")
assert status == 200 and json.loads(again) == json.loads(body), again
for _ in range(200): # the request's end, counted once
    if cancelled_total() == before + 1:
        break
    time.sleep(0.05)
assert cancelled_total() == before + 1, (before, cancelled_total())
assert poll(running["id"])["status"] == "cancelled"
refused(400, path="/v1/responses/" + second["id"] + "/cancel", method="POST", says="did not run in the background")
refused(405, path="/v1/responses/" + second["id"] + "/cancel", method="GET")
refused(404, path="/v1/responses/resp_none/cancel", method="POST", says="no stored response")
# Deleted while it runs: cancelled, and nothing is kept when it ends.
status, _, body = call("/v1/responses", long_ask)
gone = json.loads(body)
status, _, body = call("/v1/responses/" + gone["id"], method="DELETE")
assert status == 200 and json.loads(body)["deleted"] is True, body
for _ in range(200):
    if cancelled_total() == before + 2:
        break
    time.sleep(0.05)
assert cancelled_total() == before + 2, (before, cancelled_total())
refused(404, path="/v1/responses/" + gone["id"], method="GET", says="no stored response")
# Streamed in the background: the events a foreground stream sends; read
# again, whole or from after a sequence number; a client that goes away
# leaves it running, and one that follows it sees a cancel end it.
import http.client
def output_text(response):
    return "".join(p["text"] for it in response["output"] if it["type"] == "message" for p in it["content"])
status, ctype, body = call("/v1/responses", dict(resp_ask, background=True, stream=True))
assert status == 200 and ctype == "text/event-stream", (status, body)
bg = typed_events(body)
assert [e["sequence_number"] for e in bg] == list(range(len(bg))), bg
assert bg[0]["type"] == "response.created" and bg[0]["response"]["background"] is True, bg[0]
assert bg[-1]["type"] == "response." + r_whole["status"], bg[-1]
assert "".join(e["delta"] for e in bg if e["type"] == "response.output_text.delta") == said, bg
rid = bg[0]["response"]["id"]
status, _, body = call("/v1/responses/" + rid, method="GET")
kept = json.loads(body)
assert status == 200 and kept["status"] == r_whole["status"] and output_text(kept) == said, body
assert kept == bg[-1]["response"], (kept, bg[-1])
status, ctype, body = call("/v1/responses/" + rid + "?stream=true", method="GET")
assert status == 200 and ctype == "text/event-stream" and typed_events(body) == bg, body
status, _, body = call("/v1/responses/" + rid + "?stream=true&starting_after=2", method="GET")
assert status == 200 and typed_events(body) == bg[3:], body
status, _, body = call("/v1/responses/" + rid + "?stream=true&starting_after=" + str(len(bg) - 1), method="GET")
assert status == 200 and body == "", body
refused(400, path="/v1/responses/" + rid + "?starting_after=2", method="GET", says="needs stream=true")
refused(400, path="/v1/responses/" + rid + "?stream=true&starting_after=x", method="GET", says="sequence number")
refused(400, path="/v1/responses/" + rid + "?stream=true&limit=2", method="GET", says="not served")
refused(400, path="/v1/responses/" + queued["id"] + "?stream=true", method="GET", says="was not created with")
host, port = base[len("http://"):].rsplit(":", 1)
def open_stream(body):
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/responses", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    assert res.status == 200 and res.getheader("Content-Type") == "text/event-stream", res.status
    return conn, res
def read_events(res, n):
    got = b""
    while got.count(b"\n\n") < n:
        piece = res.read1(4096)
        assert piece, "the stream ended after " + repr(got[-300:])
        got += piece
    return got
# Gone after its first events: it runs to its end, and its events are read
# from after the last one seen.
conn, res = open_stream(dict(long_ask, max_output_tokens=200, stream=True))
first = read_events(res, 4)
conn.close()
first = typed_events(first[:first.rfind(b"\n\n") + 2].decode())
rid = first[0]["response"]["id"]
ended = poll(rid)
assert ended["status"] == "incomplete" and ended["usage"]["output_tokens"] == 200, ended
status, _, body = call("/v1/responses/" + rid + "?stream=true&starting_after=" + str(first[-1]["sequence_number"]),
                       method="GET")
rest = typed_events(body)
whole_events = first + rest
assert [e["sequence_number"] for e in whole_events] == list(range(len(whole_events))), whole_events[:6]
assert rest[-1]["type"] == "response.incomplete" and rest[-1]["response"] == ended, rest[-1]
assert "".join(e["delta"] for e in whole_events if e["type"] == "response.output_text.delta") == output_text(ended)
# Followed while it is cancelled: its stream ends with the cancel's error,
# and it is kept "cancelled", its events with it.
conn, res = open_stream(dict(long_ask, stream=True))
first = read_events(res, 2).decode()
rid = typed_events(first[:first.rfind("\n\n") + 2])[0]["response"]["id"]
status, ctype, follower = None, None, None
fconn = http.client.HTTPConnection(host, int(port), timeout=30)
fconn.request("GET", "/v1/responses/" + rid + "?stream=true&starting_after=0")
fres = fconn.getresponse()
assert fres.status == 200 and fres.getheader("Content-Type") == "text/event-stream", fres.status
status, _, body = call("/v1/responses/" + rid + "/cancel", method="POST")
assert status == 200 and json.loads(body)["status"] == "cancelled", body
mine = typed_events(first + res.read().decode())
conn.close()
theirs = typed_events(fres.read().decode())
fconn.close()
assert mine[-1]["type"] == "error" and mine[-1]["code"] == "response_cancelled", mine[-1]
assert theirs == mine[1:], (theirs[:3], mine[:3])
assert poll(rid)["status"] == "cancelled"
status, _, body = call("/v1/responses/" + rid + "?stream=true", method="GET")
assert status == 200 and typed_events(body) == mine, body[-400:]
refused(400, path="/v1/responses", body=dict(resp_ask, background=True, store=False), says='"store": true')
# Parameters the server cannot hold a call to are refused when the call is
# forced, naming the function; offered ("auto"), they are shown as given.
patterned = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=[A-Z])[A-Z]{3}$"}}}}}
err = refused(400, path="/v1/chat/completions", body=dict(ask, tools=[patterned], tool_choice="required"),
              says='tool "lookup"')
assert err["param"] == "tools" and "pattern" in err["message"], err
status, _, body = call("/v1/chat/completions", dict(ask, tools=[patterned]))
assert status == 200, body
refused(400, path="/v1/chat/completions", body=dict(chat, messages=[{"role": "tool", "content": "x"}]),
        says="tool_call_id")
refused(400, path="/v1/chat/completions", body=dict(ask, tool_choice={"type": "function", "function": {"name": "f"}}),
        says='"f"')
refused(404, path="/nope", says="/nope")

# A client that asks before sending its body (curl does, over 1 KiB) is told
# to go on at once.
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.settimeout(5)
payload = json.dumps(dict(req, prompt="The river runs" + " " * 1200)).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
          b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue"), "no 100 Continue within 5 s (the server waits for the body)"
s.settimeout(30)
s.sendall(payload)
got = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
s.close()
assert got.startswith(b"HTTP/1.1 200"), got[:200]

# Clients that go away before their answer, streamed or whole, one choice
# or several: every choice is cancelled (greedy: each would run to its length).
def drop(stream, n):
    s = socket.create_connection((host, int(port)))
    payload = json.dumps(dict(req, max_tokens=1500, n=n, stream=stream)).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    if stream:
        got = b""
        while b"data: " not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    else:
        time.sleep(0.3)
    s.close()

cancelled = 0
for stream, n, what in ((True, 1, "the dropped stream's request"), (False, 1, "the dropped whole completion"),
                        (True, 3, "a dropped stream of 3 choices"), (False, 2, "a dropped whole of 2 choices")):
    drop(stream, n)
    cancelled += n
    for _ in range(200):
        if (metric("troupe_finished_cancelled_total") or 0) >= cancelled:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(what + " was not cancelled, every choice: " + call("/metrics")[2])
status, _, body = call("/v1/completions", req)
assert status == 200 and json.loads(body)["choices"][0]["text"] == ref["text"], body
print("http: completions whole and streamed match the ZeroMQ front and end before stop strings; chat completions "
      "match their rendered prompts; forced tool calls are calls of the tools given; errors, models, metrics, health, 100-continue and dropped requests as expected")
PY
stop

# With API keys, the /v1/ paths need one. The default chat_template
# ("auto") serves chats with the demo model's own template (Llama 2's
# format, troupe-mkmodel's).
start "$work/plain.toml"
python3 - "$http" <<'PY'
import json, sys, time, urllib.request, urllib.error
base = "http://" + sys.argv[1]
def call(path, key=None, body=None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(base + path, headers=headers, data=json.dumps(body).encode() if body else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()
for key in (None, "k-3"):
    status, headers, text = call("/v1/models", key)
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer", (key, status, text)
    assert json.loads(text)["error"]["code"] == "invalid_api_key", text
    status, _, text = call("/v1/completions", key, {"model": "demo", "prompt": "x", "max_tokens": 2})
    assert status == 401, (key, status, text)
for key in ("k-1", "k-2"):
    status, _, text = call("/v1/models", key)
    assert status == 200 and json.loads(text)["data"][0]["id"] == "demo", (key, status, text)
status, _, text = call("/v1/completions", "k-2", {"model": "demo", "prompt": "x", "max_tokens": 2})
assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 2, text
assert call("/health")[0] == 200 and call("/metrics")[0] == 200, "health and metrics need no key"
# An upload as large as the file store is taken from a client with a key
# only: without one, the usual body limit (nothing large is read first).
big = urllib.request.Request(base + "/v1/files", data=b"x" * (2 << 20), method="POST",
                             headers={"Content-Type": "multipart/form-data; boundary=b"})
try:
    urllib.request.urlopen(big, timeout=30)
    assert False, "a large upload without a key was read"
except urllib.error.HTTPError as e:
    assert e.code == 413, e.code
except (ConnectionError, urllib.error.URLError):
    pass  # (the answer may come while the body is still being sent)
big.add_header("Authorization", "Bearer k-1")
try:
    urllib.request.urlopen(big, timeout=30)
    assert False, "not multipart: refused"
except urllib.error.HTTPError as e:
    assert e.code == 400 and "multipart" in json.loads(e.read())["error"]["message"], e.code
status, _, text = call("/v1/chat/completions", "k-1", {"model": "demo", "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "x"}]})
status_t, _, rendered = call("/tokenize", "k-1", {"prompt": "[INST] x [/INST]"})
assert status == 200 and status_t == 200, (text, rendered)
assert json.loads(text)["usage"]["prompt_tokens"] == json.loads(rendered)["count"], (text, rendered)
assert call("/tokenize", None, {"prompt": "x"})[0] == 401, "the tokenizer paths want a key too"
assert call("/tokenize", "k-1", {"prompt": "x"})[0] == 200
# Adapter updates over HTTP are off unless the deployment turns them on.
status, _, text = call("/v1/load_lora_adapter", "k-1", {"lora_name": "x", "lora_path": "models/demo/adapters/lora-1"})
assert status == 404 and "adapter_updates" in json.loads(text)["error"]["message"], (status, text)
# Three choices against room for two requests: the third is refused, the
# two taken on are cancelled, and the answer is the refusal (429).
status, _, text = call("/v1/completions", "k-1", {"model": "demo", "prompt": "x", "max_tokens": 200, "n": 3})
assert status == 429 and json.loads(text)["error"]["code"] == "overloaded", (status, text)
def cancelled():
    for line in call("/metrics")[2].splitlines():
        if line.startswith("troupe_finished_cancelled_total "):
            return float(line.split()[1])
    return 0.0
for _ in range(200):
    if cancelled() >= 2:
        break
    time.sleep(0.05)
else:
    raise AssertionError("the two choices taken on were not cancelled")
for _ in range(100):  # the cancelled two leave the intake
    status, _, text = call("/v1/completions", "k-1", {"model": "demo", "prompt": "x", "max_tokens": 2, "n": 2})
    if status != 429:
        break
    time.sleep(0.05)
assert status == 200 and len(json.loads(text)["choices"]) == 2, (status, text)
PY
stop

# tool_choice "auto" with a custom template whose call marker is "@": the
# output is free text, and each call the model opens after "@" is held to
# the tools' names and parameters (a bias on "@" makes the demo model open
# them). Read afresh here: after each "@", one JSON value of a call, whole
# unless the output was cut short there.
formats='chat_template = "custom"\nchat_system = "S: {content}\\n"\nchat_user = "U: {content}\\n"\nchat_assistant = "A: {content}\\n"\nchat_generation = "A:"\nchat_tools = "Tools:\\n{tools}\\n"\nchat_tool_call = "@{call}"\nchat_tool_result = "R: {content}"'
sed "s/^listen = \"\"\$/listen = \"127.0.0.1:0\"\n$formats/" config/default.toml > "$work/tools.toml"
grep -q '^chat_tool_call = "@{call}"$' "$work/tools.toml"
start "$work/tools.toml"
python3 - "$http" <<'PY'
import json, sys, urllib.request
base = "http://" + sys.argv[1]
def call(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())
(at,) = call("/tokenize", {"prompt": "@"})["tokens"][-1:]
weather = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                                          "properties": {"city": {"type": "string", "maxLength": 12},
                                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
clock = {"type": "function", "function": {"name": "get_time"}}
def check_call(v):
    assert set(v) == {"name", "arguments"} and v["name"] in ("get_weather", "get_time"), v
    args = v["arguments"]
    if v["name"] == "get_time":
        assert args == {}, v
    else:
        assert set(args) == {"city", "days"} and len(args["city"]) <= 12 and type(args["days"]) is int, v
        assert 1 <= args["days"] <= 7, v
def stream(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        data = r.read().decode()
    return [json.loads(e[6:]) for e in data.split("\n\n") if e.startswith("data: {")]
decoder = json.JSONDecoder()
whole = 0
streamed_calls = 0
for seed in range(8):
    # With logprobs: every token's, the calls' too.
    ask = {"model": "demo", "messages": [{"role": "user", "content": "Weather?"}], "tools": [weather, clock],
           "max_completion_tokens": 100, "seed": seed, "logit_bias": {str(at): 8}, "logprobs": True}
    answer = call("/v1/chat/completions", ask)
    choice = answer["choices"][0]
    message = choice["message"]
    listed = [(t["token"], t["logprob"]) for t in choice["logprobs"]["content"]]
    assert len(listed) == answer["usage"]["completion_tokens"], (seed, len(listed), answer["usage"])
    assert all(lp is None or lp <= 0 for _, lp in listed), listed
    if "tool_calls" in message and streamed_calls < 2:
        # Streamed, the same tokens' once, in order, some with the calls' deltas.
        streamed_calls += 1
        chunks = [e["choices"][0] for e in stream("/v1/chat/completions", ask) if e["choices"]]
        got = [(t["token"], t["logprob"]) for c in chunks if c["logprobs"] for t in c["logprobs"]["content"]]
        assert got == listed, (seed, got, listed)
        assert any(c["logprobs"] and "tool_calls" in c["delta"] for c in chunks), chunks
    if "tool_calls" in message:
        # The calls that began: each whole, but where the output was cut
        # short, the last may hold only the arguments written before the cut.
        calls = message["tool_calls"]
        assert choice["finish_reason"] in ("tool_calls", "length"), choice
        for i, c in enumerate(calls):
            try:
                args = json.loads(c["function"]["arguments"])
            except json.JSONDecodeError:
                assert choice["finish_reason"] == "length" and i == len(calls) - 1, (seed, message)
                break
            check_call({"name": c["function"]["name"], "arguments": args})
            whole += 1
        continue
    assert choice["finish_reason"] != "tool_calls", choice
    text = message["content"]
    pos = 0
    while (start := text.find("@", pos)) >= 0:
        i = start + 1
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        try:
            value, pos = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            assert choice["finish_reason"] == "length", (seed, text)
            break
        check_call(value)
        whole += 1
assert whole >= 1, "no call of 8 closed"
assert streamed_calls >= 1, "no answer of 8 called a tool"
print("http: tool calls offered (auto) are held to the tools' schema after the marker: %d whole; "
      "their tokens' log-probabilities listed and streamed" % whole)
PY
stop

# [scheduler] policy "priority": batch lines run below interactive requests
# (batch_priority -1): with two running at most, an interactive request
# preempts a batch line rather than wait behind the batch, and the line
# preempted is recomputed, its answer whole.
sed -e 's/^listen = ""$/listen = "127.0.0.1:0"\nbatch_concurrency = 4/' -e '0,/^policy = "fcfs"/s//policy = "priority"/' \
  -e 's/^max_running = 32$/max_running = 2/' config/default.toml > "$work/priority.toml"
grep -q '^policy = "priority"$' "$work/priority.toml"
grep -q '^max_running = 2$' "$work/priority.toml"
start "$work/priority.toml"
python3 - "$http" <<'PY'
import json, re, sys, time, urllib.request
sys.path.insert(0, "tests/e2e")
from http_call import call
base = "http://" + sys.argv[1]
def get(path, raw=False):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        body = r.read()
        return body if raw else json.loads(body)
def squashed():
    text = get("/metrics", raw=True).decode()
    return float(re.search(r"^troupe_requests_squashed_total (\S+)$", text, re.M).group(1))
rows = "".join(json.dumps({"custom_id": "p%d" % i, "method": "POST", "url": "/v1/completions",
                           "body": {"model": "demo", "prompt": "Batch line %d runs" % i, "max_tokens": 96,
                                    "ignore_eos": True, "temperature": 0}}) + "\n" for i in range(8))
b = "prio"
upload = ('--%s\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--%s\r\nContent-Disposition: '
          'form-data; name="file"; filename="p.jsonl"\r\n\r\n%s\r\n--%s--\r\n' % (b, b, rows, b)).encode()
req = urllib.request.Request(base + "/v1/files", data=upload,
                             headers={"Content-Type": "multipart/form-data; boundary=" + b})
f = json.loads(urllib.request.urlopen(req, timeout=30).read())
before = squashed()
status, batch = call(base, "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/completions",
                                           "completion_window": "24h"})
assert status == 200, batch
deadline = time.time() + 30
while get("/metrics", raw=True).decode().find("troupe_requests_running 2") < 0:
    assert time.time() < deadline, "the batch's lines did not fill the running batch"
    time.sleep(0.01)
# (A line may end just as the request comes, leaving it room without a
# preemption: a few tries.)
for _ in range(4):
    status, alone = call(base, "/v1/completions", {"model": "demo", "prompt": "Now, please", "max_tokens": 4,
                                                   "temperature": 0})
    assert status == 200 and alone["usage"]["completion_tokens"] == 4, alone
    if squashed() > before:
        break
assert squashed() > before, "the interactive requests did not preempt a batch line"
while batch["status"] != "completed":
    assert time.time() < deadline, batch
    time.sleep(0.05)
    batch = get("/v1/batches/" + batch["id"])
out = [json.loads(l) for l in get("/v1/files/%s/content" % batch["output_file_id"], raw=True).decode().splitlines()]
assert sorted(o["custom_id"] for o in out) == ["p%d" % i for i in range(8)], out
for o in out:
    alone_line = call(base, "/v1/completions", dict(json.loads(rows.splitlines()[int(o["custom_id"][1:])])["body"]))[1]
    assert o["response"]["body"]["choices"][0]["text"] == alone_line["choices"][0]["text"], (o, alone_line)
print("http: policy priority: an interactive request preempted a batch line, which was recomputed whole")
PY
stop

# [http] store_dir: kept responses and conversations written through to
# files, and read back by the next start: a restart loses none. A background
# response a crash left running reads back as failed. With store_sync, as a
# deployment that must survive the machine's crash runs (each write fsynced;
# a batch's answers flushed together by a thread of their own).
sed "s|^listen = \"\"\$|listen = \"127.0.0.1:0\"\nchat_template = \"chatml\"\nstore_dir = \"$work/store\"\nstore_sync = true\nbatch_concurrency = 2|" \
  config/default.toml > "$work/kept.toml"
grep -q "^store_dir = \"$work/store\"\$" "$work/kept.toml"
grep -q "^store_sync = true\$" "$work/kept.toml"
start "$work/kept.toml"
python3 - "$http" "$work/before.json" <<'PY'
import json, sys
sys.path.insert(0, "tests/e2e")
from http_call import call
base = "http://" + sys.argv[1]
status, conv = call(base, "/v1/conversations", {"metadata": {"k": "v"}, "items": [{"role": "user", "content": "Hi"}]})
assert status == 200, conv
status, turn = call(base, "/v1/responses", {"model": "demo", "input": "More?", "conversation": conv["id"],
                                            "max_output_tokens": 4, "temperature": 0})
assert status == 200, turn
status, gone = call(base, "/v1/responses", {"model": "demo", "input": "x", "max_output_tokens": 2})
assert status == 200, gone
with open(sys.argv[2], "w") as f:
    json.dump({"conv": conv, "turn": turn, "gone": gone}, f)
PY
# (A conversation's file, and the log of the turn added since; one file a response.)
[ "$(ls "$work/store/conversations" | grep -c '\.json$')" = 1 ] && [ "$(ls "$work/store/conversations" | wc -l)" = 2 ] \
  && [ "$(ls "$work/store/responses" | wc -l)" = 2 ] \
  || { echo "http: store_dir holds otherwise:"; ls -R "$work/store"; exit 1; }

# OpenAI's Files and Batch APIs: a batch's lines answered as the same
# requests sent alone answer them, a line the server refuses in the error
# file, a bad input failing the batch at once, a cancel, and a batch
# running at a stop going on after the restart with each line answered once.
python3 - "$http" "$work/batch.json" <<'PY'
import json, sys, time, urllib.request, urllib.error
sys.path.insert(0, "tests/e2e")
from http_call import call
import http_call
base = "http://" + sys.argv[1]

def request(path, data=None, method=None, headers=None):
    return http_call.request(base, path, data, method, headers)

def upload(content, purpose="batch", filename="in.jsonl"):
    return http_call.upload(base, content, purpose, filename)

def get(path):
    status, _, text = request(path)
    assert status == 200, (path, status, text)
    return json.loads(text)

def lines(rows):
    return "".join(json.dumps(r) + "\n" for r in rows).encode()

def chat(custom_id, text, **kw):
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": dict({"model": "demo", "messages": [{"role": "user", "content": text}], "max_tokens": 6,
                          "temperature": 0}, **kw)}

def batch(file_id, endpoint="/v1/chat/completions"):
    status, b = call(base, "/v1/batches", {"input_file_id": file_id, "endpoint": endpoint,
                                           "completion_window": "24h", "metadata": {"job": "e2e"}})
    assert status == 200 and b["object"] == "batch" and b["id"].startswith("batch_"), b
    return b

def ended(b, within=60):
    deadline = time.time() + within
    while b["status"] not in ("completed", "failed", "cancelled", "expired"):
        assert time.time() < deadline, b
        time.sleep(0.05)
        b = get("/v1/batches/" + b["id"])
    return b

def outputs(file_id):
    if file_id is None:
        return []
    status, kind, text = request("/v1/files/" + file_id + "/content")
    assert status == 200 and kind == "application/octet-stream", (status, kind)
    return [json.loads(l) for l in text.decode().splitlines()]

# A batch answered as the requests alone are; the refused line in the error file.
rows = [chat("a", "Hello"), chat("b", "Tell me more"), chat("c", "x", max_tokens=-5),
        chat("d", "x" * 1100000)]  # (its frame past the intake's limit: 413, not a line waiting for ever)
status, f = upload(lines(rows))
assert status == 200 and f["object"] == "file" and f["purpose"] == "batch" and f["bytes"] == len(lines(rows)), f
assert get("/v1/files/" + f["id"]) == f
status, kind, raw = request("/v1/files/" + f["id"] + "/content")
assert raw == lines(rows), raw
b = ended(batch(f["id"]))
assert b["status"] == "completed" and b["request_counts"] == {"total": 4, "completed": 2, "failed": 2}, b
assert b["metadata"] == {"job": "e2e"} and b["input_file_id"] == f["id"], b
out = {o["custom_id"]: o for o in outputs(b["output_file_id"])}
for r in rows[:2]:
    status, alone = call(base, "/v1/chat/completions", r["body"])
    got = out[r["custom_id"]]["response"]
    assert got["status_code"] == 200 and got["body"]["choices"] == alone["choices"], (got, alone)
    assert out[r["custom_id"]]["id"].startswith("batch_req_") and out[r["custom_id"]]["error"] is None
errs = {e["custom_id"]: e for e in outputs(b["error_file_id"])}
err = errs["c"]
assert err["response"]["status_code"] == 400, err
assert "max_tokens" in err["response"]["body"]["error"]["message"], err
assert errs["d"]["response"]["status_code"] == 413, errs["d"]["response"]["status_code"]
assert errs["d"]["response"]["body"]["error"]["code"] == "frame_too_large", errs["d"]
assert get("/v1/files/" + b["output_file_id"])["purpose"] == "batch_output"

# The Responses API in a batch; a line for another endpoint fails the batch at once.
rrow = {"custom_id": "r", "method": "POST", "url": "/v1/responses",
        "body": {"model": "demo", "input": "Hi", "max_output_tokens": 4, "temperature": 0}}
status, f2 = upload(lines([rrow]))
b2 = ended(batch(f2["id"], "/v1/responses"))
[o] = outputs(b2["output_file_id"])
assert b2["status"] == "completed" and o["response"]["body"]["object"] == "response", (b2, o)
status, f3 = upload(lines([rrow, rows[0]]))
b3 = batch(f3["id"], "/v1/responses")
assert b3["status"] == "failed" and b3["errors"]["data"][0]["line"] == 2, b3
assert "/v1/chat/completions" in b3["errors"]["data"][0]["message"], b3
# Refusals, each saying what was wrong.
status, bad = upload(b"{}", purpose="fine-tune")
assert status == 400 and "purpose" in bad["error"]["message"], bad
status, bad = call(base, "/v1/batches", {"input_file_id": "file_none", "endpoint": "/v1/completions",
                                         "completion_window": "24h"})
assert status == 404 and bad["error"]["param"] == "input_file_id", bad
status, bad = call(base, "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/embeddings",
                                         "completion_window": "24h"})
assert status == 400 and bad["error"]["param"] == "endpoint", bad
status, bad = call(base, "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/completions",
                                         "completion_window": "1h"})
assert status == 400 and "completion_window" in bad["error"]["message"], bad
status, _, text = request("/v1/batches/batch_none")
assert status == 404, text
listed = get("/v1/batches?limit=2")
assert [x["id"] for x in listed["data"]] == [b3["id"], b2["id"]] and listed["has_more"] is True, listed

# A cancel: the lines it did not run go to the error file; each line once.
many = [chat("m%d" % i, "Count to %d" % i, max_tokens=48, ignore_eos=True) for i in range(24)]
status, f4 = upload(lines(many))
b4 = batch(f4["id"])
status, c4 = call(base, "/v1/batches/" + b4["id"] + "/cancel", None)
assert status == 200 and c4["status"] in ("cancelling", "cancelled"), c4
b4 = ended(c4)
assert b4["status"] == "cancelled" and b4["cancelled_at"] is not None, b4
done = outputs(b4["output_file_id"])
gone = outputs(b4["error_file_id"])
assert sorted(o["custom_id"] for o in done + gone) == sorted(r["custom_id"] for r in many), (done, gone)
assert gone and all(g["error"]["code"] == "batch_cancelled" for g in gone), gone
assert b4["request_counts"] == {"total": 24, "completed": len(done), "failed": len(gone)}, b4
metrics = request("/metrics")[2].decode()
assert "troupe_http_files_kept" in metrics and "troupe_http_batch_lines_running" in metrics, metrics

# A batch left running at a stop: the restart goes on with it.
status, f5 = upload(lines([chat("s%d" % i, "Say %d" % i, max_tokens=64, ignore_eos=True) for i in range(60)]))
b5 = batch(f5["id"])
deadline = time.time() + 30
while get("/v1/batches/" + b5["id"])["request_counts"]["completed"] < 2:
    assert time.time() < deadline
    time.sleep(0.02)
json.dump({"file": f, "batch": b, "running": b5["id"]}, open(sys.argv[2], "w"))
print("http: batches answered, refused, cancelled")
PY
stop
# A response a crash left in progress, written as the front writes one.
python3 - "$work/store/responses" <<'PY'
import json, os, sys
body = {"id": "resp_crashed", "object": "response", "status": "in_progress", "background": True, "output": []}
with open(os.path.join(sys.argv[1], "resp_crashed.json"), "w") as f:
    json.dump({"previous": "", "input_items": "[]", "body": json.dumps(body), "session": "", "events": ""}, f)
with open(os.path.join(sys.argv[1], "resp_torn.json"), "w") as f:
    f.write("{not json")
PY
start "$work/kept.toml"
grep -q "are no response or conversation" "$work/log"
python3 - "$http" "$work/before.json" <<'PY'
import json, sys, urllib.request
sys.path.insert(0, "tests/e2e")
from http_call import call
base = "http://" + sys.argv[1]
before = json.load(open(sys.argv[2]))
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())
conv_at = "/v1/conversations/" + before["conv"]["id"]
assert get(conv_at) == before["conv"], get(conv_at)
items = get(conv_at + "/items?order=asc")["data"]
assert [i["role"] for i in items] == ["user", "user", "assistant"], items
assert items[2] == before["turn"]["output"][0], items
assert get("/v1/responses/" + before["turn"]["id"]) == before["turn"]
assert get("/v1/responses/" + before["gone"]["id"]) == before["gone"]
crashed = get("/v1/responses/resp_crashed")
assert crashed["status"] == "failed" and crashed["error"]["code"] == "shutting_down", crashed
# The conversation goes on (its K and V recomputed: the sessions did not last).
status, turn = call(base, "/v1/responses", {"model": "demo", "input": "And?", "conversation": before["conv"]["id"],
                                            "max_output_tokens": 4, "temperature": 0, "previous_response_id": None})
assert status == 200 and len(get(conv_at + "/items")["data"]) == 5, turn
# A delete takes its file too.
req = urllib.request.Request(base + conv_at, method="DELETE")
urllib.request.urlopen(req, timeout=30).read()
print("http: kept responses and conversations read back after a restart")
PY
[ ! -e "$work/store/conversations/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["conv"]["id"])' "$work/before.json").json" ]
# The files and batches read back; the batch the stop cut short goes on,
# each of its lines answered once.
python3 - "$http" "$work/batch.json" <<'PY'
import json, sys, time, urllib.request
base = "http://" + sys.argv[1]
before = json.load(open(sys.argv[2]))
def get(path, raw=False):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        body = r.read()
        return body if raw else json.loads(body)
assert get("/v1/batches/" + before["batch"]["id"]) == before["batch"]
assert get("/v1/files/" + before["file"]["id"]) == before["file"]
b = get("/v1/batches/" + before["running"])
assert b["status"] == "in_progress" and b["request_counts"]["completed"] < 60, b # (it goes on from here)
print("http: the batch read back with %d of 60 lines answered" % b["request_counts"]["completed"])
deadline = time.time() + 60
while b["status"] != "completed":
    assert b["status"] == "in_progress" and time.time() < deadline, b
    time.sleep(0.05)
    b = get("/v1/batches/" + before["running"])
assert b["request_counts"] == {"total": 60, "completed": 60, "failed": 0}, b
out = [json.loads(l) for l in get("/v1/files/" + b["output_file_id"] + "/content", raw=True).decode().splitlines()]
assert sorted(o["custom_id"] for o in out) == sorted("s%d" % i for i in range(60)), [o["custom_id"] for o in out]
assert all(o["response"]["body"]["usage"]["completion_tokens"] == 64 for o in out), out
print("http: a batch cut short by a stop went on after the restart, each line answered once")
PY

# A crash (SIGKILL) while a batch of Responses turns in one conversation
# runs: the restart answers each line once, and each line's turn joins the
# conversation once, as the line's answer has it (a line whose response was
# kept before the crash is answered with it, not run again). (The turns
# together stay within the demo model's 2,048 tokens.)
python3 - "$http" "$work/crash.json" <<'PY'
import json, sys, time
sys.path.insert(0, "tests/e2e")
from http_call import call, request, upload
base = "http://" + sys.argv[1]
status, conv = call(base, "/v1/conversations", {})
assert status == 200, conv
rows = [{"custom_id": "t%d" % i, "method": "POST", "url": "/v1/responses",
         "body": {"model": "demo", "input": "Turn %d" % i, "conversation": conv["id"], "max_output_tokens": 8,
                  "temperature": 0}} for i in range(24)]
status, f = upload(base, "".join(json.dumps(r) + "\n" for r in rows).encode())
assert status == 200, f
status, b = call(base, "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/responses", "completion_window": "24h"})
assert status == 200, b
deadline = time.time() + 30
while True:
    items = json.loads(request(base, "/v1/conversations/" + conv["id"] + "/items?limit=100")[2])["data"]
    if len(items) >= 8: # (four turns joined: the crash comes mid-batch)
        break
    assert time.time() < deadline, items
    time.sleep(0.01)
json.dump({"conv": conv["id"], "batch": b["id"]}, open(sys.argv[2], "w"))
PY
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=""
start "$work/kept.toml"
python3 - "$http" "$work/crash.json" <<'PY'
import json, sys, time
sys.path.insert(0, "tests/e2e")
from http_call import request
base = "http://" + sys.argv[1]
before = json.load(open(sys.argv[2]))
def get(path):
    status, _, body = request(base, path)
    assert status == 200, (path, status, body)
    return body if path.endswith("/content") else json.loads(body)
b = get("/v1/batches/" + before["batch"])
deadline = time.time() + 60
while b["status"] != "completed":
    assert b["status"] == "in_progress" and time.time() < deadline, b
    time.sleep(0.05)
    b = get("/v1/batches/" + before["batch"])
errors = get("/v1/files/" + b["error_file_id"] + "/content").decode() if b["error_file_id"] else ""
assert b["request_counts"] == {"total": 24, "completed": 24, "failed": 0}, (b, errors[:2000])
out = [json.loads(l) for l in get("/v1/files/" + b["output_file_id"] + "/content").decode().splitlines()]
assert sorted(o["custom_id"] for o in out) == sorted("t%d" % i for i in range(24)), [o["custom_id"] for o in out]
items = get("/v1/conversations/" + before["conv"] + "/items?limit=100&order=asc")["data"]
assert len(items) == 48, "each turn joins once: %d items for 24 turns" % len(items)
ids = [i["id"] for i in items]
assert len(set(ids)) == 48, ids
by_id = {i["id"]: i for i in items}
for o in out:
    r = o["response"]["body"]
    assert r["status"] in ("completed", "incomplete") and r["id"].startswith("resp_"), r
    [message] = r["output"]
    assert by_id[message["id"]] == message, (message, by_id.get(message["id"]))
    assert get("/v1/responses/" + r["id"]) == r
print("http: a crash mid-batch: each of 24 Responses lines answered once, each turn in its conversation once")
PY
stop
echo "http: ok"
