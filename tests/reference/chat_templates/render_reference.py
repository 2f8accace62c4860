#!/usr/bin/python3
"""Renders loom's chat-template test cases with Python jinja2, configured the way
Transformers' apply_chat_template configures it, and writes the expected outputs.

    /usr/bin/python3 tests/reference/chat_templates/render_reference.py --out FILE

Inputs (next to this script):
  templates.json      chat templates under test (file, bos/eos tokens, origin)
  conversations.json  conversations rendered with every template
  engine_cases.json   small templates exercising single Jinja features

Output: JSON {"chat": [...], "engine": [...]}; each entry carries the rendered
string ("output") or, when jinja2 raised, the exception ("error"). The gtests
in tests/tokenizer/ run this script and compare loom's rendering byte for byte.
Needs Debian's python3-jinja2 (scripts/install-deps --test).
"""

import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
# strftime_now() is pinned to this instant (local time) on both sides.
FIXED_NOW = 1762345678


class GenerationTag(jinja2.ext.Extension):
    """Transformers' AssistantTracker: `{% generation %}` renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    # Mirrors transformers.utils.chat_template_utils._compile_jinja_template.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(FIXED_NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


def render_or_error(fn):
    try:
        return {"output": fn(), "error": None}
    except Exception as e:  # noqa: BLE001 - any jinja2/Python failure is an expected "error" outcome
        return {"output": None, "error": f"{type(e).__name__}: {e}"}


def apply_chat_template(compiled, template, conversation, add_generation_prompt):
    # Transformers: render(messages=, tools=, documents=, add_generation_prompt=,
    # **special_tokens_map, **kwargs); unset special tokens are absent.
    kwargs = {}
    if template.get("bos_token"):
        kwargs["bos_token"] = template["bos_token"]
    if template.get("eos_token"):
        kwargs["eos_token"] = template["eos_token"]
    kwargs.update(conversation.get("extra", {}))
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    return compiled.render(
        messages=conversation["messages"],
        tools=tools,
        documents=documents,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where to write the expected outputs (JSON)")
    args = parser.parse_args()

    env = make_environment()
    templates = load("templates.json")
    conversations = load("conversations.json")
    engine_cases = load("engine_cases.json")

    chat = []
    for template in templates:
        with open(os.path.join(HERE, "templates", template["file"]), encoding="utf-8") as f:
            compiled = env.from_string(f.read())
        for conversation in conversations:
            for agp in (False, True):
                result = render_or_error(
                    lambda: apply_chat_template(compiled, template, conversation, agp)
                )
                result.update(
                    {"template": template["name"], "conversation": conversation["name"], "add_generation_prompt": agp}
                )
                chat.append(result)

    engine = []
    for case in engine_cases:
        result = render_or_error(lambda: env.from_string(case["template"]).render(**case.get("context", {})))
        result["name"] = case["name"]
        engine.append(result)

    out = {"jinja2_version": jinja2.__version__, "fixed_now": FIXED_NOW, "chat": chat, "engine": engine}
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    os.replace(tmp, args.out)
    print(f"render_reference.py: {len(chat)} chat renderings, {len(engine)} engine cases -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
