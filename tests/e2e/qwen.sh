#!/usr/bin/env bash
# A Qwen2- or Qwen3-style model end to end: troupe-mkmodel --arch ARCH
# --tokenizer bpe writes a model with biases on q, k and v (qwen2) or q and k
# normalised per head and heads wider than the hidden size (qwen3), a
# byte-level tokenizer.json with Qwen2's NFC normalizer, digit split and
# ChatML special tokens (no BOS), and a ChatML chat template; troupe-serve serves it on the cpu backend. Text
# comes back through /tokenize as NFC reads it (a decomposed letter is its
# composed one's tokens); chats under the built-in chatml template and under
# the model's own give the same prompt and greedy answer; <|im_end|> and
# <|endoftext|> both end an answer; an adapter serves. Qwen3's <think> and
# </think> are tokens whose text decodes, and with reasoning_parser =
# "qwen3" an answer that opens with <think> is reasoning_content, whole and
# streamed, and response_format holds only the content after the thinking.
# A chat's own template serves where request_chat_template is on, and
# chat_template = "auto" serves the model's template, or says why not.
# Usage: qwen.sh BIN_DIR qwen2|qwen3
set -euo pipefail
bin="$1"
arch="$2"
case "$arch" in
  qwen2) shape=(--hidden 64) ;;
  qwen3) shape=(--hidden 48 --head-dim 16) ;;
  *) echo "qwen.sh: no arch $arch"; exit 2 ;;
esac
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT

"$bin/troupe-mkmodel" --out "$work/model" --arch "$arch" --tokenizer bpe "${shape[@]}" --intermediate 128 --layers 2 \
  --heads 4 --kv-heads 2 --vocab 1024 --adapters 3 --targets q_proj,k_proj,v_proj > /dev/null
grep -q "\"model_type\": \"$arch\"" "$work/model/config.json" \
  || { echo "$arch: troupe-mkmodel --arch $arch wrote no such config"; exit 1; }
sed -e "s#models/demo#$work/model#g" -e 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "chatml"/' \
  config/default.toml > "$work/serve.toml"
grep -q '^chat_template = "chatml"$' "$work/serve.toml"
if [ "$arch" = qwen3 ]; then
  sed -i 's/^chat_template = "chatml"$/chat_template = "chatml"\nreasoning_parser = "qwen3"/' "$work/serve.toml"
  grep -q '^reasoning_parser = "qwen3"$' "$work/serve.toml"
fi

. "$(dirname "$0")/serve_lib.sh"
export E2E_DIR="$(cd "$(dirname "$0")" && pwd)"

check() { # check TEMPLATE: the same chat, its prompt and answer kept in $work/chat.json
  python3 - "$http" "$work/chat.json" "$1" "$arch" <<'PY'
import json, os, re, sys

sys.path.insert(0, os.environ["E2E_DIR"])
from http_call import call, post_text

base, keep, template, arch = "http://" + sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# troupe-mkmodel --vocab 1024 --arch qwen2|qwen3 --tokenizer bpe: the three special tokens last,
# then (qwen3) <think> and </think>.
END_OF_TEXT, IM_START, IM_END, THINK, END_THINK = range(1019, 1024) if arch == "qwen3" else (*range(1021, 1024), -1, -1)

def tokens(text):
    status, out = call(base, "/tokenize", {"prompt": text})
    assert status == 200, out
    return out["tokens"]

# No BOS; special tokens in the text are themselves.
t = tokens("<|im_start|>user\nHi<|im_end|>")
assert t[0] == IM_START and t[-1] == IM_END, t
# NFC: "e" + U+0301 is "é", U+212B (ANGSTROM SIGN) is U+00C5; Hangul jamo
# are their syllable; and each digit is a token of its own.
for decomposed, composed in (("caf" + "e\u0301", "caf\u00e9"), ("\u212b", "\u00c5"), ("\u1112\u1161\u11ab", "\ud55c")):
    assert tokens(decomposed) == tokens(composed), (decomposed, tokens(decomposed), tokens(composed))
    status, out = call(base, "/detokenize", {"tokens": tokens(decomposed)})
    assert status == 200 and out["prompt"] == composed, out
assert len(tokens("12345")) == 5, tokens("12345")

body = {"model": "model", "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]}
status, out = call(base, "/v1/chat/completions", body)
assert status == 200, out
rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
assert out["usage"]["prompt_tokens"] == len(tokens(rendered)), (out, tokens(rendered))
chat = {"prompt_tokens": out["usage"]["prompt_tokens"], "content": out["choices"][0]["message"]["content"]}
if template == "chatml":
    json.dump(chat, open(keep, "w"))
    # generation_config.json's temperature 0: without one, any seed is greedy.
    for seed in (1, 2):
        status, out = call(base, "/v1/chat/completions", dict({k: v for k, v in body.items() if k != "temperature"},
                                                              seed=seed))
        assert status == 200 and out["choices"][0]["message"]["content"] == chat["content"], (out, chat)
    # Both end ids end the answer: config.json's <|im_end|> and
    # generation_config.json's <|endoftext|>.
    for end in (IM_END, END_OF_TEXT):
        status, out = call(base, "/v1/chat/completions", dict(body, logit_bias={str(end): 100}))
        assert status == 200 and out["choices"][0]["finish_reason"] == "stop", (end, out)
        assert out["usage"]["completion_tokens"] == 1, (end, out)
    # An adapter on q, k and v (added after the biases) serves, and changes the logits.
    status, out = call(base, "/v1/completions", {"model": "demo-r8", "prompt": "The river", "max_tokens": 4,
                                                 "temperature": 0, "logprobs": 1})
    assert status == 200 and out["usage"]["completion_tokens"] == 4, out
    status, base_out = call(base, "/v1/completions", {"model": "model", "prompt": "The river", "max_tokens": 4,
                                                      "temperature": 0, "logprobs": 1})
    assert status == 200, base_out
    assert out["choices"][0]["logprobs"]["token_logprobs"] != base_out["choices"][0]["logprobs"]["token_logprobs"], \
        (out, base_out)
else:
    # The model's own ChatML template gives the built-in's prompt and answer.
    assert chat == json.load(open(keep)), (chat, json.load(open(keep)))
# A chat's own template: refused unless request_chat_template (on in the
# model run); there it renders the chat.
own = dict(body, chat_template="{{ messages[-1].content }}!")
status, out = call(base, "/v1/chat/completions", own)
if template == "chatml":
    assert status == 400 and "request_chat_template" in out["error"]["message"], out
else:
    assert status == 200 and out["usage"]["prompt_tokens"] == len(tokens("Hi there!")), (out, tokens("Hi there!"))
if arch == "qwen3":
    assert tokens("<think>x</think>") == [THINK] + tokens("x") + [END_THINK], tokens("<think>x</think>")
    # An answer that opens with <think> (the bias makes every token one):
    # all reasoning, cut short by max_tokens; no content.
    think = dict(body, max_tokens=3, logit_bias={str(THINK): 100})
    status, out = call(base, "/v1/chat/completions", think)
    m = out["choices"][0]["message"]
    assert status == 200 and m["reasoning_content"] == "<think><think>" and m["content"] is None, out
    # Every token of it is the thinking's.
    assert out["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3} == {
        "reasoning_tokens": out["usage"]["completion_tokens"]}, out
    status, raw = post_text(base, "/v1/chat/completions", dict(think, stream=True))
    assert status == 200, raw
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in raw.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "<think><think>", deltas
    assert not any(d.get("content") for d in deltas), deltas
    # That answer's message sent back whole, as an agent's history sends it
    # (its reasoning, no content): taken; a chat's own template is given
    # the reasoning.
    again = dict(body, max_tokens=2, messages=body["messages"] + [m, {"role": "user", "content": "More?"}])
    status, out = call(base, "/v1/chat/completions", again)
    assert status == 200, out
    if template != "chatml":
        status, out = call(base, "/v1/chat/completions",
                           dict(again, chat_template="{{ messages[-2].reasoning_content }}"))
        assert status == 200 and out["usage"]["prompt_tokens"] == 2, out
    # response_format holds the content after the thinking, which is free:
    # the bias opens and closes it now and then; the schema's value is
    # short. The output cannot end (EOS, <|im_end|>) before its value.
    flag = {"type": "json_schema", "json_schema": {"name": "flag", "schema": {
        "type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False}}}
    thought = 0
    for seed in range(12):
        status, out = call(base, "/v1/chat/completions", dict(body, max_tokens=80, temperature=1, seed=seed,
                                                              logit_bias={str(THINK): 5, str(END_THINK): 5},
                                                              response_format=flag))
        assert status == 200, out
        c = out["choices"][0]
        m = c["message"]
        if c["finish_reason"] == "stop":
            value = json.loads(m["content"])
            assert set(value) == {"a"} and isinstance(value["a"], bool), out
            thought += m["reasoning_content"] is not None
            # The thinking's tokens, <think> and </think> among them, and
            # never the value's.
            counted = out["usage"]["completion_tokens_details"]["reasoning_tokens"]
            if m["reasoning_content"] is None:
                assert counted == 0, out
            else:
                assert 2 <= counted < out["usage"]["completion_tokens"], out
        else:
            assert c["finish_reason"] == "length", out
            assert m["content"] is None or m["content"].lstrip().startswith("{"), out
    assert thought >= 3, f"too few answers thought and then gave the value: {thought} of 12"
    # vLLM's guided choice and regex hold the content after the thinking
    # too: whole answers are a thought, then one of the texts (or a match).
    thought = 0
    for seed in range(12):
        guided = {"guided_choice": ["yes", "no", "not sure"]} if seed % 2 else {"guided_regex": "[0-9]{1,3}"}
        status, out = call(base, "/v1/chat/completions", dict(body, max_tokens=80, temperature=1, seed=seed,
                                                              logit_bias={str(THINK): 5, str(END_THINK): 5},
                                                              **guided))
        assert status == 200, out
        c = out["choices"][0]
        m = c["message"]
        if c["finish_reason"] == "stop" or (c["finish_reason"] == "length" and m["content"] is not None):
            content = m["content"] or ""
            if seed % 2:
                ok = content in guided["guided_choice"] if c["finish_reason"] == "stop" else \
                    any(t.startswith(content) for t in guided["guided_choice"])
            else:
                ok = re.fullmatch("[0-9]{1,3}" if c["finish_reason"] == "stop" else "[0-9]{0,3}", content)
            assert ok, out
            thought += c["finish_reason"] == "stop" and m["reasoning_content"] is not None
        else:
            assert c["finish_reason"] == "length" and m["content"] is None, out
    assert thought >= 3, f"too few guided answers thought and then gave a choice or a match: {thought} of 12"
    # An output that does not open its thinking (the bias makes it begin
    # with "{") is all content, held from its start.
    brace = tokens("{")
    assert len(brace) == 1, brace
    status, out = call(base, "/v1/chat/completions", dict(body, max_tokens=40, logit_bias={str(brace[0]): 100},
                                                          response_format=flag))
    m = out["choices"][0]["message"]
    assert status == 200 and m["reasoning_content"] is None and m["content"].lstrip().startswith("{"), out
print(f"{arch} ({template}): ok")
PY
}

# The model's sampling defaults (generation_config.json, as vLLM reads it):
# temperature 0, so a chat that leaves it out is greedy.
python3 - "$work/model/generation_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["temperature"] = 0
json.dump(c, open(sys.argv[1], "w"))
PY
serve 'chat_template = "chatml"'
grep -q "generation_config.json's temperature 0" "$work/log" || { cat "$work/log"; echo "$arch: no sampling defaults logged"; exit 1; }
check chatml
stop

grep -q '"chat_template"' "$work/model/tokenizer_config.json" \
  || { echo "$arch: troupe-mkmodel --arch $arch --tokenizer bpe wrote no chat template"; exit 1; }
sed -i 's/^chat_template = "chatml"$/chat_template = "model"\nrequest_chat_template = true/' "$work/serve.toml"
grep -q '^request_chat_template = true$' "$work/serve.toml"
serve 'chat_template = "model"'
check model
stop

# chat_template = "auto" (the default) serves the model's template where it
# has one (the same prompt and answer as "model"); where the template is
# gone, chats are not served and the 404 says why.
sed -i 's/^chat_template = "model"$/chat_template = "auto"/' "$work/serve.toml"
grep -q '^chat_template = "auto"$' "$work/serve.toml"
serve 'chat_template = "auto"'
check model
stop
python3 - "$work/model/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
del c["chat_template"]
json.dump(c, open(sys.argv[1], "w"))
PY
serve 'chat_template = "auto", no template'
python3 - "$http" <<'PY'
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from http_call import call
base = "http://" + sys.argv[1]
status, out = call(base, "/v1/chat/completions", {"model": "model", "messages": [{"role": "user", "content": "x"}]})
assert status == 404 and 'chat_template = "auto" found no template' in out["error"]["message"], out
status, out = call(base, "/v1/completions", {"model": "model", "prompt": "x", "max_tokens": 2})
assert status == 200, out
print("auto without a template: chats not served, completions served")
PY
stop
