#!/usr/bin/env bash
# A Llama 2-style model's chats end to end: troupe-mkmodel writes a
# SentencePiece model with a tokenizer_config.json whose chat template is in
# Llama 2 chat's format; troupe-serve serves it on the cpu backend, first
# with the built-in chat_template = "llama2", then with chat_template =
# "model" (the Jinja template). A multi-turn chat gets the same prompt
# tokens, with EOS and BOS between the turns (the tokenizer reads "</s><s>"
# as those tokens), and the same greedy answer under both; the template's
# own refusal is a 400 in its words. Usage: llama2_chat.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
pid=""
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
. "$(dirname "$0")/serve_lib.sh"
export E2E_DIR="$(cd "$(dirname "$0")" && pwd)"

"$bin/troupe-mkmodel" --out "$work/model" --hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 \
  --adapters 3 > /dev/null
grep -q '"chat_template"' "$work/model/tokenizer_config.json" \
  || { echo "llama2_chat: troupe-mkmodel wrote no chat template"; exit 1; }
sed -e "s#models/demo#$work/model#g" -e 's/^listen = ""$/listen = "127.0.0.1:0"\nchat_template = "llama2"/' \
  config/default.toml > "$work/serve.toml"
grep -q '^chat_template = "llama2"$' "$work/serve.toml"

check() {
  python3 - "$http" "$work/first.json" "$1" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["E2E_DIR"])
import http_call

base, first, phase = "http://" + sys.argv[1], sys.argv[2], sys.argv[3]

def call(path, body):
    return http_call.call(base, path, body)

BOS, EOS = 1, 2
messages = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": " Hello! "}, {"role": "user", "content": "What is bread?\n"}]
status, out = call("/v1/chat/completions", {"model": "model", "max_tokens": 6, "temperature": 0, "messages": messages})
assert status == 200, out
# Llama 2's format, BOS left to the tokenizer: "</s><s>" between the turns
# are EOS and BOS.
rendered = "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] What is bread? [/INST]"
status, tok = call("/tokenize", {"prompt": rendered})
assert status == 200, tok
ids = tok["tokens"]
assert ids[0] == BOS and ids.count(BOS) == 2 and ids.count(EOS) == 1 and ids[ids.index(EOS) + 1] == BOS, ids
assert out["usage"]["prompt_tokens"] == len(ids), (out, ids)
got = {"prompt_tokens": out["usage"]["prompt_tokens"], "content": out["choices"][0]["message"]["content"]}
if phase == "builtin":
    json.dump(got, open(first, "w"))
else:
    assert got == json.load(open(first)), (got, open(first).read())
    # The template's own check: roles out of order are refused in its words.
    status, err = call("/v1/chat/completions", {"model": "model", "messages": messages[:1] + messages[2:]})
    assert status == 400 and err["error"]["param"] == "messages", err
    assert "roles must alternate user, assistant, user" in err["error"]["message"], err
print("llama2_chat (" + phase + "): ok")
PY
}

serve 'chat_template = "llama2"'
check builtin
stop
sed -i 's/^chat_template = "llama2"$/chat_template = "model"/' "$work/serve.toml"
grep -q '^chat_template = "model"$' "$work/serve.toml"
serve 'chat_template = "model"'
check model
stop
