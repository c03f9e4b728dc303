#!/usr/bin/env python3
"""Render every {template, context, expected} case of tests/test_jinja.c and tests/test_jinja_blocks.c
with Python's Jinja2 in transformers' settings and list those whose expected text differs from Jinja2's output, so the unit
tests' expectations are Jinja2's and not the engine's own idea. Known and documented differences
(docs/chat_templates.md): transformers' `generation` tag, and tuples printed as lists.
Not run by CI; needs Debian's python3-jinja2. Usage: ./check_test_jinja_cases.py"""
import codecs
import json
import os
import re
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
LIT = r'"(?:[^"\\]|\\.)*"'
ITEM = rf"(?:{LIT}\s*)+|NULL"
CASE = re.compile(rf"\{{\s*({ITEM})\s*,\s*({ITEM})\s*,\s*({ITEM})\s*\}}", re.S)


def c_string(text):
    """The bytes of adjacent C string literals, as UTF-8 text (None for NULL)."""
    if text.strip() == "NULL":
        return None
    parts = re.findall(LIT, text)
    return b"".join(codecs.escape_decode(p[1:-1].encode("utf-8"))[0] for p in parts).decode("utf-8")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise TemplateError(message)


def main():
    body = ""
    for name in ("test_jinja.c", "test_jinja_blocks.c"):
        src = open(os.path.join(HERE, "..", "..", name)).read()
        body += src[src.index("static void test_"):src.index("typedef struct error_case")]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    n = differ = 0
    for m in CASE.finditer(body):
        tmpl, ctx, want = (c_string(g) for g in m.groups())
        n += 1
        try:
            got = env.from_string(tmpl).render(**(json.loads(ctx) if ctx else {}))
        except Exception as e:  # the message is what we show
            got = f"error: {e}"
        if got != want:
            differ += 1
            print(f"{tmpl!r}\n  test_jinja.c: {want!r}\n  jinja2:       {got!r}")
    print(f"{n} cases, {differ} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
