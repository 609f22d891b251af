// Chat templates in the shapes model families ship (written for these
// tests, not copied): each uses the constructs its family's template uses,
// so the interpreter is checked on what it meets in tokenizer_config.json
// files. Shared by jinja_test (against Jinja2 itself) and openai_test.
#pragma once

#include <string_view>
#include <utility>

namespace troupe::test_templates {

/// [INST] turns, the system text folded into the first user turn, roles
/// checked to alternate, BOS and EOS as text around each exchange.
inline constexpr std::string_view inst_style =
  R"J({% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}{% set sys = messages[0]['content'] %})J"
  R"J({% else %}{% set rest = messages %}{% set sys = false %}{% endif %}{% for m in rest %})J"
  R"J({% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %})J"
  R"J({{ raise_exception('roles must go user, assistant, user, ...') }}{% endif %})J"
  R"J({% if loop.index0 == 0 and sys != false %}{% set text = '<<SYS>>\n' + sys + '\n<</SYS>>\n\n' + m['content'] %})J"
  R"J({% else %}{% set text = m['content'] %}{% endif %})J"
  R"J({% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + text.strip() + ' [/INST]' }})J"
  R"J({% elif m['role'] == 'assistant' %}{{ ' ' + text.strip() + ' ' + eos_token }}{% endif %}{% endfor %})J";

/// Header / end-of-turn markers, a system message with the date and the
/// tools (as indented JSON), calls as JSON with "parameters", tool results
/// under their own role; `{%- -%}` whitespace control throughout.
inline constexpr std::string_view header_style = R"J({{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "01 Jan 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and tools is defined %}
    {{- "You may call these functions. Answer with {\"name\": ..., \"parameters\": ...}.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("one call per message") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)J";

/// ChatML with tools in <tools> tags, calls in <tool_call> tags, results
/// in <tool_response> tags grouped into one user turn, a namespace found
/// by walking the messages backwards, string tests and loop.previtem.
inline constexpr std::string_view chatml_tools = R"J({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- else %}
        {{- 'You are a helpful assistant.\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nSignatures within <tools></tools>:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nCall as <tool_call>\n{\"name\": <name>, \"arguments\": <args>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content if message.content is string else '' %}
        {%- if loop.index0 > ns.last_query_index and loop.last %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function is defined %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (loop.previtem.role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (loop.nextitem.role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)J";

/// Turns named user and model, no system role (folded into the first
/// user turn), a filter binding tighter than +, role checks by parity.
inline constexpr std::string_view turn_style = R"J({{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '

' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = "" %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception("alternate user/assistant") }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = "model" %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}{{ message['content'] | trim }}{{ '<end_of_turn>
' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model
'}}{% endif %})J";

/// Mistral's later shape: tools listed before the last user message, call
/// ids checked, selectattr over the roles, a macro, loop.last, the
/// generation tag transformers knows.
inline constexpr std::string_view mistral_tools = R"J({%- macro turn(role, text, last=false) -%}
[{{ role | upper }}]{{ text }}{% if last %}[/{{ role | upper }}]{% endif %}
{%- endmacro -%}
{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or (message.tool_calls is defined and message.tool_calls)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- turn("inst", " " + system_message + "\n\n" + message["content"], true) }}
        {%- else %}
            {{- turn("inst", " " + message["content"], true) }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {% generation %}{{- " " + message["content"]|trim + eos_token}}{% endgeneration %}
    {%- elif message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
)J";

/// Role tags with an else branch at the end, dict-style access by
/// attribute, a for loop's else and the ~ operator.
inline constexpr std::string_view tag_style = R"J({% for message in messages %}
  {% if message.role == 'system' %}
<|system|>
{{ message.content }}<|end|>
  {% elif message.role == 'user' %}
<|user|>
{{ message.content }}<|end|>
  {% else %}
<|{{ message.role }}|>
{{ message.content ~ '' }}<|end|>
  {% endif %}
{% else %}
{{ raise_exception('no messages') }}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% else %}
{{ eos_token }}
{% endif %})J";

/// Tools rendered as Python signatures by a recursive macro (Hermes'
/// tool_use shape): a type map in a dict literal, items() of the
/// parameters, `is false` on loop.last, default arguments, a macro calling
/// itself for arrays and objects.
inline constexpr std::string_view signature_style = R"J({%- macro py_type(spec) -%}
{%- set simple = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} -%}
{%- if spec.type is defined and spec.type in simple -%}
{{- simple[spec.type] -}}
{%- elif spec.type is defined and spec.type == "array" -%}
{{- "list[" + (py_type(spec["items"]) if spec["items"] is defined else "Any") + "]" -}}
{%- elif spec.type is defined and spec.type == "object" -%}
{%- if spec.properties is defined -%}
{{- "dict[str, " + (spec.properties|length|string) + " fields]" -}}
{%- else -%}
{{- "dict" -}}
{%- endif -%}
{%- else -%}
{{- "Any" -}}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- if tools -%}
<|im_start|>system
You may call these functions:
{% for tool in tools %}
{%- set fn = tool.function if tool.function is defined else tool %}
def {{ fn.name }}(
{%- for name, spec in (fn.parameters.properties if fn.parameters is defined and fn.parameters.properties is defined else {}) | items -%}
{{ name }}: {{ py_type(spec) }}{% if loop.last is false %}, {% endif %}
{%- endfor -%}
):
    """{{ fn.description | default("No description.", true) | trim }}"""
{% endfor -%}
Answer with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == "tool" -%}
<|im_start|>tool
{{ m.content }}<|im_end|>
{% elif m.tool_calls is defined and m.tool_calls -%}
<|im_start|>assistant
{% for c in m.tool_calls -%}
<tool_call>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}</tool_call>
{% endfor -%}
<|im_end|>
{% else -%}
<|im_start|>{{ m.role }}
{{ m.content if m.content is not none else "" }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%})J";

/// TypeScript-like namespaces of the tools (the harmony shape): enums
/// through map("tojson") and join, nullable unions, the developer message
/// built in a set block, channels found with `in` on text, a namespace
/// tracking the last user turn.
inline constexpr std::string_view typescript_style = R"J({%- macro ts(spec) -%}
{%- if spec.enum is defined -%}
{{- spec.enum | map("tojson") | join(" | ") -}}
{%- elif spec.type == "array" -%}
{{- ts(spec["items"]) ~ "[]" if spec["items"] is defined else "any[]" -}}
{%- elif spec.type == "string" -%}string
{%- elif spec.type in ["integer", "number"] -%}number
{%- elif spec.type == "boolean" -%}boolean
{%- else -%}any
{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user=-1, system="") -%}
{%- for m in messages -%}
{%- if m.role == "user" %}{% set ns.last_user = loop.index0 %}{% endif -%}
{%- if m.role == "system" and loop.first %}{% set ns.system = m.content | trim %}{% endif -%}
{%- endfor -%}
<|start|>system<|message|>Knowledge cutoff: 2024-06
Current date: {{ strftime_now("%Y-%m-%d") }}<|end|>
{%- if ns.system or tools %}
{%- set developer %}
{%- if ns.system %}# Instructions

{{ ns.system }}
{% endif %}
{%- if tools %}# Tools

namespace functions {
{% for t in tools %}
// {{ t.function.description | default("") }}
type {{ t.function.name }} = (_: {
{%- for name, spec in t.function.parameters.properties.items() %}
{{ name }}{{ "" if name in t.function.parameters.required | default([]) else "?" }}: {{ ts(spec) }},
{%- endfor %}
}) => any;
{% endfor %}
} // namespace functions
{%- endif %}
{%- endset %}
<|start|>developer<|message|>{{ developer | trim }}<|end|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == "system" and loop.first %}{% continue %}{% endif %}
{%- if m.role == "assistant" and m.tool_calls is defined and m.tool_calls %}
{%- for c in m.tool_calls %}
<|start|>assistant to=functions.{{ c.function.name }}<|channel|>commentary json<|message|>{{ c.function.arguments | tojson }}<|call|>
{%- endfor %}
{%- elif m.role == "assistant" %}
{%- set text = m.content or "" %}
{%- if "<|channel|>" in text %}{{ raise_exception("assistant text must not hold channel markers") }}{% endif %}
<|start|>assistant<|channel|>{{ "final" if loop.index0 > ns.last_user else "analysis" }}<|message|>{{ text }}<|end|>
{%- elif m.role == "tool" %}
<|start|>functions.{{ (messages[loop.index0 - 1].tool_calls | default([{"function": {"name": "unknown"}}]) | first).function.name }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
{%- else %}
<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %})J";

/// Mistral's later tool format (Mistral Small 3.x's tokenizer): a system
/// prompt in its own tags, the tools as one JSON list, each call its
/// marker, its name, "[ARGS]" and its arguments, and each result in tags,
/// with no call ids.
inline constexpr std::string_view mistral_named_tools = R"J({{- bos_token }}
{%- if messages[0]["role"] == "system" %}
    {{- "[SYSTEM_PROMPT]" + messages[0]["content"] + "[/SYSTEM_PROMPT]" }}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set rest = messages %}
{%- endif %}
{%- if tools is defined and tools is not none and tools|length > 0 %}
    {{- "[AVAILABLE_TOOLS]" + tools|tojson + "[/AVAILABLE_TOOLS]" }}
{%- endif %}
{%- for message in rest %}
    {%- if message["role"] == "user" %}
        {{- "[INST]" + message["content"] + "[/INST]" }}
    {%- elif message["role"] == "assistant" %}
        {%- if message["content"] %}
            {{- message["content"] }}
        {%- endif %}
        {%- if message["tool_calls"] is defined and message["tool_calls"] %}
            {%- for call in message["tool_calls"] %}
                {%- set arguments = call["function"]["arguments"] %}
                {%- if arguments is not string %}
                    {%- set arguments = arguments|tojson %}
                {%- endif %}
                {{- "[TOOL_CALLS]" + call["function"]["name"] + "[ARGS]" + arguments }}
            {%- endfor %}
        {%- endif %}
        {{- eos_token }}
    {%- elif message["role"] == "tool" %}
        {{- "[TOOL_RESULTS]" + message["content"]|string + "[/TOOL_RESULTS]" }}
    {%- else %}
        {{- raise_exception("roles are system (first), user, assistant and tool") }}
    {%- endif %}
{%- endfor %})J";

/// Every template above, by name.
inline constexpr std::pair<std::string_view, std::string_view> all[]{
  {"inst_style", inst_style},   {"header_style", header_style}, {"chatml_tools", chatml_tools},
  {"turn_style", turn_style},   {"mistral_tools", mistral_tools}, {"tag_style", tag_style},
  {"signature_style", signature_style}, {"typescript_style", typescript_style},
  {"mistral_named_tools", mistral_named_tools},
};

} // namespace troupe::test_templates
