#!/usr/bin/env bash
# A Llama 3-style model end to end: troupe-mkmodel --tokenizer bpe writes a
# byte-level BPE tokenizer.json with Llama 3's special tokens, and a
# generation_config.json that also ends on <|eot_id|>; troupe-serve serves it
# on the cpu backend with chat_template = "llama3". Special tokens in text are
# read as themselves; text of any script comes back whole through /tokenize
# and /detokenize; a chat's prompt is Llama 3's format, its text trimmed;
# config.json's end id and generation_config.json's both end the output
# (finish "stop"), not before min_tokens, and not with ignore_eos. Under the
# model's own template the same chat gives the same prompt and answer; with
# Llama 3.1's JSON calls (chat_tool_call "{call}", arguments under
# "parameters") a forced call comes back as a tool call, and with "auto"
# beside response_format the answer is a call or a value of the format.
# Usage: llama3.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT

"$bin/troupe-mkmodel" --out "$work/model" --tokenizer bpe --hidden 64 --intermediate 128 --layers 2 --heads 4 \
  --kv-heads 2 --vocab 1024 --adapters 3 > /dev/null
[ -f "$work/model/tokenizer.json" ] && [ ! -e "$work/model/tokenizer.model" ] \
  || { echo "llama3: troupe-mkmodel --tokenizer bpe wrote no tokenizer.json alone"; exit 1; }
sed -e "s#models/demo#$work/model#g" -e 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "llama3"/' \
  config/default.toml > "$work/serve.toml"
grep -q '^chat_template = "llama3"$' "$work/serve.toml"
grep -q "^path = \"$work/model\"$" "$work/serve.toml"

. "$(dirname "$0")/serve_lib.sh"
export E2E_DIR="$(cd "$(dirname "$0")" && pwd)"
serve 'chat_template = "llama3"'

python3 - "$http" "$work/builtin.json" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["E2E_DIR"])
import http_call

base = "http://" + sys.argv[1]
# troupe-mkmodel --vocab 1024 --tokenizer bpe: the five special tokens last.
BOS, END_OF_TEXT, START_HEADER, END_HEADER, EOT = range(1019, 1024)

def call(path, body):
    return http_call.call(base, path, body)

def tokens(text):
    status, out = call("/tokenize", {"prompt": text})
    assert status == 200, out
    return out["tokens"]

# Special tokens in the text are themselves; BOS comes first.
t = tokens("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>")
assert t[0] == BOS and t[1] == START_HEADER and t[-1] == EOT and END_HEADER in t, t
assert all(0 <= x < BOS for x in t[2:t.index(END_HEADER)]), t
# Bytes of any script come back whole.
for text in ["Ünïcödé 中文 テキスト 🙂 it's 12345", "  spaces\n\n\ttabs\r\n", "<|not_special|>"]:
    t = tokens(text)
    status, out = call("/detokenize", {"tokens": t})
    assert status == 200 and out["prompt"] == text, (text, t, out)

def chat(**extra):
    body = {"model": "model", "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "  Hi there\n"}]}
    body.update(extra)
    status, out = call("/v1/chat/completions", body)
    assert status == 200, out
    return out

# The prompt is Llama 3's format, each message's text trimmed.
rendered = ("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n")
plain = chat()
assert plain["usage"]["prompt_tokens"] == len(tokens(rendered)), (plain, tokens(rendered))
assert plain["choices"][0]["finish_reason"] in ("stop", "length"), plain

# Both end ids end the output: config.json's <|end_of_text|> and
# generation_config.json's <|eot_id|>.
for end in (END_OF_TEXT, EOT):
    out = chat(logit_bias={str(end): 100})
    assert out["choices"][0]["finish_reason"] == "stop", (end, out)
    assert out["usage"]["completion_tokens"] == 1 and out["choices"][0]["message"]["content"] == "", (end, out)
    # Not before min_tokens: held off three tokens, then the fourth ends it.
    out = chat(logit_bias={str(end): 100}, min_tokens=3)
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 4, (end, out)
    # Not at all with ignore_eos.
    out = chat(logit_bias={str(end): 100}, ignore_eos=True)
    assert out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 6, (end, out)
with open(sys.argv[2], "w") as f:
    json.dump({"prompt_tokens": plain["usage"]["prompt_tokens"], "content": plain["choices"][0]["message"]["content"],
               "rendered_tokens": len(tokens(rendered))}, f)
print("llama3: ok")
PY
stop

# The same chat under the model's own template (tokenizer_config.json,
# written by troupe-mkmodel in Llama 3 Instruct's format): chat_template =
# "model" renders it with the Jinja interpreter, BOS left to the tokenizer,
# so the prompt and the greedy answer are the built-in template's.
grep -q '"chat_template"' "$work/model/tokenizer_config.json" \
  || { echo "llama3: troupe-mkmodel --tokenizer bpe wrote no chat template"; exit 1; }
sed -i 's/^chat_template = "llama3"$/chat_template = "model"/' "$work/serve.toml"
grep -q '^chat_template = "model"$' "$work/serve.toml"
serve 'chat_template = "model"'
python3 - "$http" "$work/builtin.json" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["E2E_DIR"])
from http_call import call

base = "http://" + sys.argv[1]
builtin = json.load(open(sys.argv[2]))
body = {"model": "model", "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "  Hi there\n"}]}
status, out = call(base, "/v1/chat/completions", body)
assert status == 200, out
assert out["usage"]["prompt_tokens"] == builtin["prompt_tokens"] == builtin["rendered_tokens"], (out, builtin)
assert out["choices"][0]["message"]["content"] == builtin["content"], (out, builtin)
# Tools: the template shows no call format, so they are refused, naming
# the key that gives one; the server goes on serving.
body["tools"] = [{"type": "function", "function": {"name": "f"}}]
status, out = call(base, "/v1/chat/completions", body)
err = out["error"]
assert status == 400 and err["param"] == "tools" and "http.chat_tool_call" in err["message"], out
print("llama3 (model template): ok")
PY
stop

# Llama 3.1's JSON calls: no marker, the arguments under "parameters". A
# forced call is held to the tool's parameters under that key, and comes
# back as a tool call.
sed -i 's/^chat_template = "model"$/chat_template = "model"\nchat_tool_call = "{call}"\nchat_tool_arguments = "parameters"/' \
  "$work/serve.toml"
grep -q '^chat_tool_arguments = "parameters"$' "$work/serve.toml"
serve 'chat_tool_call = "{call}"'
python3 - "$http" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["E2E_DIR"])
from http_call import call

base = "http://" + sys.argv[1]
weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"],
    "additionalProperties": False}}}
body = {"model": "model", "max_tokens": 120, "tools": [weather],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "messages": [{"role": "user", "content": "Weather in Paris?"}]}
# A random model pads JSON with blanks without end: its blank tokens are
# held off (the constraint still takes the call's own blanks).
def text_of(token):
    status, out = call(base, "/detokenize", {"tokens": [token]})
    assert status == 200, out
    return out["prompt"]
blanks = [t for t in range(1019) if text_of(t) and not text_of(t).strip()]
assert blanks, "no blank tokens"
body["logit_bias"] = {str(t): -100 for t in blanks}
ended = 0
for seed in range(8):
    status, out = call(base, "/v1/chat/completions", dict(body, seed=seed))
    assert status == 200, out
    choice = out["choices"][0]
    if choice["finish_reason"] == "length":
        continue # cut short: no call began, or the call's arguments before the cut
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None, out
    calls = choice["message"]["tool_calls"]
    assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather", out
    assert json.loads(calls[0]["function"]["arguments"])["city"] in ("Paris", "Oslo"), out
    ended += 1
assert ended > 0, "no forced call of 8 ended"
# "auto" beside response_format: with no marker the output is one JSON
# value, a call or a value of the format's schema (content).
verdict = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
auto = {k: v for k, v in body.items() if k != "tool_choice"}
auto["response_format"] = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": verdict}}
ended = 0
for seed in range(8):
    status, out = call(base, "/v1/chat/completions", dict(auto, seed=seed))
    assert status == 200, out
    choice = out["choices"][0]
    if choice["finish_reason"] == "length":
        continue
    ended += 1
    if choice["finish_reason"] == "tool_calls":
        assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])["city"] in ("Paris", "Oslo"), out
    else:
        assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"], out
        value = json.loads(choice["message"]["content"])
        assert set(value) == {"ok"} and type(value["ok"]) is bool, out
assert ended > 0, "no answer of 8 ended"
print("llama3 (JSON calls under parameters): ok")
PY
stop
