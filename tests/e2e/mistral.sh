#!/usr/bin/env bash
# A Mistral-style model's tool calls end to end: troupe-mkmodel --arch
# mistral writes a SentencePiece model whose [INST], [TOOL_CALLS] and the
# other marks are control tokens (standing for no text), and a chat template
# that shows tools and calls as Mistral 7B Instruct v0.3's does; troupe-serve
# serves it on the cpu backend with chat_template = "model". The template's
# [TOOL_CALLS] makes the calls one JSON array after that mark. Forced, the
# answer is calls of the tools given (the mark written by its control token,
# the array held to the tools' parameters), whole and streamed alike, each
# with an id of nine letters and digits; those calls and their results go
# back into the next turn, which the template (refusing ids of any other
# length) renders. With FORM "named" (--mistral-calls named), the later
# form: each call [TOOL_CALLS]name[ARGS]{...}, the name and its arguments
# held, [ARGS] a control token too; results go back without ids.
# Usage: mistral.sh BIN_DIR [array|named]
set -euo pipefail
bin="$1"
form="${2:-array}"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
. "$(dirname "$0")/serve_lib.sh"
export E2E_DIR="$(cd "$(dirname "$0")" && pwd)"

"$bin/troupe-mkmodel" --out "$work/model" --arch mistral --mistral-calls "$form" --hidden 64 --intermediate 128 \
  --layers 2 --heads 4 --kv-heads 2 --adapters 3 > /dev/null
grep -q '"model_type": "mistral"' "$work/model/config.json" \
  || { echo "mistral: troupe-mkmodel --arch mistral wrote no such config"; exit 1; }
sed -e "s#models/demo#$work/model#g" -e 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "model"/' \
  config/default.toml > "$work/serve.toml"
grep -q '^chat_template = "model"$' "$work/serve.toml"

serve 'chat_template = "model"'
python3 - "$http" "$form" <<'PY'
import json, os, re, sys

sys.path.insert(0, os.environ["E2E_DIR"])
from http_call import call, post_text

base = "http://" + sys.argv[1]
named = sys.argv[2] == "named"

# The marks are one token each, which stands for no text.
for mark in ("[TOOL_CALLS]", "[INST]", "[AVAILABLE_TOOLS]") + (("[ARGS]",) if named else ()):
    status, tok = call(base, "/tokenize", {"prompt": mark})
    assert status == 200 and len(tok["tokens"]) == 2, (mark, tok)  # BOS and the mark
    status, text = call(base, "/detokenize", {"tokens": tok["tokens"][1:]})
    assert status == 200 and text["prompt"] == "", (mark, text)

tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer",
             "minimum": 1, "maximum": 7}}, "required": ["unit", "days"], "additionalProperties": False}}},
         {"type": "function", "function": {"name": "get_time"}}]
ask = [{"role": "user", "content": "Weather in Paris?"}]
names = {"get_weather", "get_time"}

def check_call(c):
    assert re.fullmatch(r"[A-Za-z0-9]{9}", c["id"]), c
    assert c["type"] == "function" and c["function"]["name"] in names, c
    args = json.loads(c["function"]["arguments"])
    if c["function"]["name"] == "get_weather":
        assert args["unit"] in ("c", "f") and 1 <= args["days"] <= 7 and len(args) == 2, args
    else:
        assert args == {}, args

# Forced: the answer is the calls' array, held to the tools, the mark written
# by its token. Greedy, whole and streamed say the same.
body = {"model": "model", "messages": ask, "tools": tools, "tool_choice": "required", "max_tokens": 800,
        "temperature": 0}
status, out = call(base, "/v1/chat/completions", body)
assert status == 200, out
choice = out["choices"][0]
calls = choice["message"].get("tool_calls")
assert calls, choice
assert calls and choice["message"]["content"] is None, choice
for c in calls:
    check_call(c)
assert len({c["id"] for c in calls}) == len(calls), calls
if choice["finish_reason"] != "tool_calls":
    assert choice["finish_reason"] == "length", choice

status, raw = post_text(base, "/v1/chat/completions", dict(body, stream=True))
assert status == 200, raw
streamed = []
for line in raw.splitlines():
    if not line.startswith("data: ") or line == "data: [DONE]":
        continue
    for c in json.loads(line[6:])["choices"][0]["delta"].get("tool_calls", []):
        if c["index"] == len(streamed):
            streamed.append({k: v for k, v in c.items() if k != "index"})
        else:
            streamed[c["index"]]["function"]["arguments"] += c["function"]["arguments"]
assert [(c["function"]["name"], c["function"]["arguments"]) for c in streamed] == \
    [(c["function"]["name"], c["function"]["arguments"]) for c in calls], (streamed, calls)

# One call, named: the turn opens with the mark; the answer is that call.
status, out = call(base, "/v1/chat/completions", dict(body, tool_choice={"type": "function",
                    "function": {"name": "get_weather"}}))
assert status == 200, out
one = out["choices"][0]
assert one["finish_reason"] == "tool_calls" and len(one["message"]["tool_calls"]) == 1, one
check_call(one["message"]["tool_calls"][0])
assert one["message"]["tool_calls"][0]["function"]["name"] == "get_weather", one

# "auto": words or calls, as the model goes; calls read are the tools'.
# A call cut by max_tokens keeps what was read: its name is one of theirs.
status, out = call(base, "/v1/chat/completions", dict(body, tool_choice="auto", max_tokens=24))
assert status == 200, out
for c in out["choices"][0]["message"].get("tool_calls") or []:
    if out["choices"][0]["finish_reason"] == "tool_calls":
        check_call(c)
    else:
        assert out["choices"][0]["finish_reason"] == "length" and c["function"]["name"] in names, out

# "required" with one call at most: the first call the output makes.
status, out = call(base, "/v1/chat/completions", dict(body, parallel_tool_calls=False))
assert status == 200, out
one = out["choices"][0]
assert len(one["message"]["tool_calls"]) == 1, one
check_call(one["message"]["tool_calls"][0])

# The calls and their results go back: the template renders them, ids and all.
history = ask + [{"role": "assistant", "content": None, "tool_calls": calls[:1]},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"}]
status, out = call(base, "/v1/chat/completions", {"model": "model", "messages": history, "tools": tools,
                                                  "max_tokens": 4, "temperature": 0})
assert status == 200, out
first_prompt = call(base, "/v1/chat/completions", {"model": "model", "messages": ask, "tools": tools,
                                                   "max_tokens": 1})[1]["usage"]["prompt_tokens"]
assert out["usage"]["prompt_tokens"] > first_prompt, (out["usage"], first_prompt)
if not named:
    # An id the template refuses (not nine characters) is a 400 in its words.
    bad = [dict(h) for h in history]
    bad[1] = dict(bad[1], tool_calls=[dict(calls[0], id="call_1")])
    bad[2] = dict(bad[2], tool_call_id="call_1")
    status, err = call(base, "/v1/chat/completions", {"model": "model", "messages": bad, "tools": tools})
    assert status == 400 and "length 9" in err["error"]["message"], err
print("mistral (" + sys.argv[2] + "): ok")
PY
stop
