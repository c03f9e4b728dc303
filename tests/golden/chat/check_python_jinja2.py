#!/usr/bin/env python3
"""Render the golden contexts of expected/*.json with Python's Jinja2 in transformers' settings
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson and
raise_exception) and list every case where Jinja2 and @huggingface/jinja (the golden text) disagree.
Not run by CI; needs Debian's python3-jinja2. Usage: DF_SHARED_DIR=../../../../shared ./check_python_jinja2.py"""
import glob
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("DF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "..", "shared"))


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise TemplateError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    spec = json.load(open(os.path.join(HERE, "conversations.json")))
    by_name = {t["name"]: t for t in spec["templates"]}
    differ = 0
    for path in sorted(glob.glob(os.path.join(HERE, "expected", "*.json"))):
        golden = json.load(open(path))
        t = by_name[golden["template"]]
        if "file" in t:
            src = open(os.path.join(HERE, "..", "..", "fixtures", "chat_templates", t["file"])).read()
        else:
            src = json.load(open(os.path.join(SHARED, t["shared"])))["chat_template"]
        template = env.from_string(src)
        for name, case in golden["cases"].items():
            try:
                got = template.render(**case["context"])
            except Exception as e:  # the message is what we compare
                got = "error: " + str(e)
            want = case["text"] if "text" in case else "error: " + case["error"]
            if got != want:
                differ += 1
                print(f"{golden['template']} / {name}:\n  @huggingface/jinja: {want[:160]!r}\n  jinja2:             {got[:160]!r}")
    print(f"{differ} case(s) differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
