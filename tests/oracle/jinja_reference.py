#!/usr/bin/env python3
"""Chat templates rendered by Jinja2 itself, set up as transformers sets it
up for apply_chat_template: the immutable sandbox, trim_blocks and
lstrip_blocks, the loop controls, tojson as json.dumps (non-ASCII kept),
raise_exception and strftime_now. The oracle messages/jinja is checked
against (tests/messages/jinja_test.cpp).

usage: jinja_reference.py CASES_JSON
CASES_JSON is a list of {"template", "vars", "now"}; prints a JSON list with,
for each case, {"text": the rendering} or {"error": the message}.
"""

import json
import sys
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: the body as it is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def render(case):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(case.get("now", 0), tz=timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return {"text": env.from_string(case["template"]).render(**case["vars"])}
    except Exception as e:  # any failure: the C++ must fail too
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
