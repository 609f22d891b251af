#!/usr/bin/env python3
"""Python Jinja2 (as transformers sets it up) rendering the ChatML template of
troupe-chat-template-bench over the same chats: json.loads of the body and the
render, per request (docs/benchmarks.md, "Chat templates"). Needs python3-jinja2."""
import json, timeit, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
tpl = ("{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
  "{%- endif %}{{- '\\n\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
  "{{- '\\n</tools><|im_end|>\\n' }}{%- elif messages[0].role == 'system' %}"
  "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
  "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
t = env.from_string(tpl)
text = "x" * 400
tools = json.loads('''[{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}},
      {"type": "function", "function": {"name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]''')
for turns in (1, 8, 32):
    for with_tools in (False, True):
        msgs = [{"role": "system", "content": "You are a helpful assistant. " + text}]
        for i in range(turns):
            msgs += [{"role": "user", "content": f"Question {i}: " + text}, {"role": "assistant", "content": f"Answer {i}: " + text}]
        msgs.append({"role": "user", "content": "And then? " + text})
        body = json.dumps({"model": "m", "max_tokens": 16, "messages": msgs, **({"tools": tools} if with_tools else {})})
        def go():
            d = json.loads(body)
            return t.render(messages=d["messages"], tools=d.get("tools"), add_generation_prompt=True, bos_token="", eos_token="")
        n = 2000
        best = min(timeit.repeat(go, number=n, repeat=3)) / n
        print(f"turns={turns} tools={int(with_tools)} jinja2 {best*1e6:.1f} us")
