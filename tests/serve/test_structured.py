"""Structured outputs and tool calls through `loom serve` (bundled model): response_format,
vLLM's structured_outputs / guided_* fields, tools + tool_choice with the Llama 3.1 / 3.2
and Qwen2.5 / Qwen3 chat templates (the real ones, from tests/reference/chat_templates, put on the
bundled weights). Outputs are checked with Debian's python3-jsonschema, calls against the
tools' parameter schemas, streamed deltas against the non-streamed reply."""
import json
import os
import re
import shutil
import tempfile
import unittest

import jsonschema

from serve_harness import DEFAULT_MODEL, SOURCE_DIR, Server

TEMPLATES = os.path.join(SOURCE_DIR, "tests", "reference", "chat_templates", "templates")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two numbers",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                  "b": {"$ref": "#/$defs/small"}},
                   "required": ["a", "b"], "additionalProperties": False,
                   "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 9}}}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

SCHEMA_CASES = [
    {"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus"]}, "chapter": {"type": "integer", "minimum": 1,
     "maximum": 50}}, "required": ["book", "chapter"], "additionalProperties": False},
    {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string", "maxLength": 6},
     "minItems": 1, "maxItems": 3}, "ok": {"type": "boolean"}}, "required": ["names", "ok"]},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]},
     "maxItems": 4},
]


def family_model(root, template):
    """The bundled weights and tokenizer with a family's chat template."""
    d = os.path.join(root, template)
    os.makedirs(d)
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        os.symlink(os.path.abspath(os.path.join(DEFAULT_MODEL, f)), os.path.join(d, f))
    with open(os.path.join(DEFAULT_MODEL, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(TEMPLATES, template + ".jinja")) as f:
        cfg["chat_template"] = f.read()
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def chat(messages, **kw):
    return {"messages": messages, "temperature": 0, **kw}


USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def reassemble(events):
    """The message a chat stream adds up to: content, tool_calls, finish_reason."""
    content, calls, reason = "", {}, None
    for e in events[:-1]:
        for ch in e.get("choices", []):
            d = ch["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls", []):
                call = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.get("id", call["id"])
                f = tc.get("function", {})
                call["name"] += f.get("name") or ""
                call["arguments"] += f.get("arguments") or ""
            reason = ch["finish_reason"] or reason
    return content, [calls[i] for i in sorted(calls)], reason


class Structured(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="loom-structured-")
        # The families' tool prompts are longer than the bundled model's 512 positions.
        cls.plain = Server()
        cls.qwen = Server("--max-model-len", "2048", model=family_model(cls.tmp, "qwen2_5"))
        cls.llama = Server("--max-model-len", "2048", model=family_model(cls.tmp, "llama3_1"))
        cls.qwen3 = Server("--max-model-len", "2048", model=family_model(cls.tmp, "qwen3"))
        cls.llama32 = Server("--max-model-len", "2048", model=family_model(cls.tmp, "llama3_2"))

    @classmethod
    def tearDownClass(cls):
        for s in (cls.plain, cls.qwen, cls.llama, cls.qwen3, cls.llama32):
            s.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ok(self, server, path, body):
        status, _, out = server.post(path, body)
        self.assertEqual(status, 200, out)
        return out

    def bad(self, server, path, body, param):
        status, _, out = server.post(path, body)
        self.assertEqual(status, 400, out)
        self.assertEqual(out["error"]["param"], param, out)
        self.assertEqual(out["error"]["type"], "invalid_request_error")
        return out["error"]

    # --- response_format and vLLM's fields -------------------------------------------

    def test_json_schema_outputs_validate(self):
        for i, schema in enumerate(SCHEMA_CASES):
            rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
            for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 11 + i}):
                out = self.ok(self.plain, "/v1/completions",
                              {"prompt": "In the beginning", "max_tokens": 120, "response_format": rf, **sampling})
                choice = out["choices"][0]
                self.assertEqual(choice["finish_reason"], "stop", choice)
                jsonschema.validate(json.loads(choice["text"]), schema)
                out = self.ok(self.plain, "/v1/chat/completions",
                              {**chat(USER, max_tokens=120, response_format=rf), **sampling})
                msg = out["choices"][0]["message"]
                self.assertEqual(out["choices"][0]["finish_reason"], "stop", out)
                jsonschema.validate(json.loads(msg["content"]), schema)
                self.assertNotIn("tool_calls", msg)

    def test_vllm_fields(self):
        schema = SCHEMA_CASES[0]
        for body in ({"structured_outputs": {"json": schema}}, {"guided_json": schema},
                     {"structured_outputs": {"json": json.dumps(schema)}}):
            out = self.ok(self.plain, "/v1/completions", {"prompt": "And God said", "max_tokens": 80, "temperature": 0, **body})
            jsonschema.validate(json.loads(out["choices"][0]["text"]), schema)
        out = self.ok(self.plain, "/v1/completions", {"prompt": "And God said", "max_tokens": 80, "temperature": 0,
                                                     "response_format": {"type": "json_object"}})
        self.assertIsInstance(json.loads(out["choices"][0]["text"]), dict)
        choices = ["light", "darkness", "the waters"]
        for body in ({"structured_outputs": {"choice": choices}}, {"guided_choice": choices}):
            for seed in (1, 2, 3):
                out = self.ok(self.plain, "/v1/completions", {"prompt": "And God divided", "max_tokens": 20,
                                                             "temperature": 1.0, "seed": seed, **body})
                self.assertIn(out["choices"][0]["text"], choices)
        regex = r"[0-9]{1,3}:[0-9]{1,3} [A-Z][a-z]{2,8}"
        for body in ({"structured_outputs": {"regex": regex}}, {"guided_regex": regex}):
            out = self.ok(self.plain, "/v1/chat/completions", {**chat(USER, max_tokens=40), **body})
            self.assertRegex(out["choices"][0]["message"]["content"], "^" + regex + "$")
        grammar = 'root ::= ("yes" | "no") ", " [a-z]+ "."'
        for body in ({"structured_outputs": {"grammar": grammar}}, {"guided_grammar": grammar}):
            out = self.ok(self.plain, "/v1/completions", {"prompt": "Is it good?", "max_tokens": 30, "temperature": 0, **body})
            self.assertTrue(re.fullmatch(r"(yes|no), [a-z]+\.", out["choices"][0]["text"]), out)
        out = self.ok(self.plain, "/v1/completions", {"prompt": "x", "max_tokens": 3, "temperature": 0,
                                                     "response_format": {"type": "text"}})
        self.assertEqual(out["choices"][0]["finish_reason"], "length")

    def test_streamed_json_schema_equals_non_streamed(self):
        schema = SCHEMA_CASES[1]
        body = {"prompt": "In the beginning", "max_tokens": 120, "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
        whole = self.ok(self.plain, "/v1/completions", body)["choices"][0]["text"]
        status, events = self.plain.stream("/v1/completions", {**body, "stream": True})
        self.assertEqual(status, 200)
        self.assertEqual("".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]), whole)

    def test_max_tokens_inside_a_structure_is_length(self):
        schema = SCHEMA_CASES[1]
        out = self.ok(self.plain, "/v1/completions", {"prompt": "In the beginning", "max_tokens": 4, "temperature": 0,
                                                     "response_format": {"type": "json_schema",
                                                                         "json_schema": {"name": "s", "schema": schema}}})
        choice = out["choices"][0]
        self.assertEqual(choice["finish_reason"], "length")
        self.assertTrue(choice["text"].startswith("{"), choice)
        with self.assertRaises(ValueError):
            json.loads(choice["text"])  # cut off, never closed by invention

    def test_bad_constraints_are_400_naming_the_field(self):
        e = self.bad(self.plain, "/v1/completions",
                     {"prompt": "x", "response_format": {"type": "json_schema",
                                                         "json_schema": {"name": "s", "schema": {"type": "array", "uniqueItems": True}}}},
                     "response_format.json_schema.schema")
        self.assertIn("uniqueItems", e["message"])
        self.assertEqual(e["code"], "unsupported_schema")
        lax = self.ok(self.plain, "/v1/completions",
                      {"prompt": "x", "max_tokens": 30, "temperature": 0,
                       "response_format": {"type": "json_schema", "json_schema": {
                           "name": "s", "strict": False, "schema": {"type": "array", "uniqueItems": True, "maxItems": 2}}}})
        self.assertEqual(lax["object"], "text_completion")
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "response_format": {"type": "xml"}}, "response_format")
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "response_format": {"type": "json_schema"}}, "response_format")
        e = self.bad(self.plain, "/v1/chat/completions", chat(USER, structured_outputs={"grammar": "root ::= missing"}),
                     "structured_outputs.grammar")
        self.assertIn("missing", e["message"])
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "structured_outputs": {"regex": "a(b"}},
                 "structured_outputs.regex")
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "guided_choice": []}, "guided_choice")
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "guided_json": "{not json"}, "guided_json")
        self.bad(self.plain, "/v1/completions", {"prompt": "x", "guided_regex": "a", "structured_outputs": {"choice": ["b"]}},
                 "guided_regex")

    # --- tools ------------------------------------------------------------------------

    def test_forced_calls_validate_for_each_family(self):
        prompts = ["What is the weather in Paris?", "Add 2 and 3."]
        for server in (self.qwen, self.llama, self.qwen3, self.llama32):
            for tool_choice in ("required", {"type": "function", "function": {"name": "add"}},
                                {"type": "function", "function": {"name": "get_weather"}}):
                for p, prompt in enumerate(prompts):
                    # greedy with parallel_tool_calls false (one call), sampled with the default
                    # (OpenAI's true: "required" may then make several calls, a named choice one)
                    for sampling in ({"temperature": 0, "parallel_tool_calls": False},
                                     {"temperature": 1.0, "seed": 5 + p}):
                        out = self.ok(server, "/v1/chat/completions",
                                      {**chat([{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=tool_choice,
                                              max_tokens=300), **sampling})
                        choice = out["choices"][0]
                        msg = choice["message"]
                        self.assertIsNone(msg["content"])
                        calls = msg["tool_calls"]
                        if tool_choice == "required" and "parallel_tool_calls" not in sampling:
                            # the model decides how many calls; one that keeps calling until
                            # max_tokens has its last call cut, the ones before it whole
                            self.assertGreaterEqual(len(calls), 1)
                            if choice["finish_reason"] == "length":
                                self.assertGreater(len(calls), 1, choice)
                                calls = calls[:-1]
                            else:
                                self.assertEqual(choice["finish_reason"], "tool_calls", (server.args, choice))
                        else:
                            self.assertEqual(choice["finish_reason"], "tool_calls", (server.args, choice))
                            self.assertEqual(len(calls), 1)
                        for call in calls:
                            self.assertEqual(call["type"], "function")
                            self.assertRegex(call["id"], r"^call_[A-Za-z0-9]{24}$")
                            name = call["function"]["name"]
                            if isinstance(tool_choice, dict):
                                self.assertEqual(name, tool_choice["function"]["name"])
                            jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])

    def test_streamed_tool_calls_reassemble(self):
        cases = [{"tool_choice": "required"},
                 {"tool_choice": {"type": "function", "function": {"name": "add"}}},
                 # auto, with the family's call text forced by a grammar: parsed back out
                 {"tool_choice": "auto", "qwen_grammar": True},
                 {"tool_choice": "auto", "llama_grammar": True},
                 {"tool_choice": "auto"}]
        for server, family in ((self.qwen, "qwen"), (self.llama, "llama"), (self.qwen3, "qwen"), (self.llama32, "llama")):
            for case in cases:
                body = chat(USER, tools=TOOLS, tool_choice=case["tool_choice"], max_tokens=200)
                if case.get("qwen_grammar"):
                    if family != "qwen":
                        continue
                    body["structured_outputs"] = {"grammar": 'root ::= "Checking.\\n<tool_call>\\n{\\"name\\": '
                                                  '\\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\", '
                                                  '\\"unit\\": \\"c\\"}}\\n</tool_call>"'}
                if case.get("llama_grammar"):
                    if family != "llama":
                        continue
                    body["structured_outputs"] = {"grammar": 'root ::= "{\\"name\\": \\"add\\", \\"parameters\\": '
                                                  '{\\"a\\": 2, \\"b\\": 3}}"'}
                if case["tool_choice"] == "auto" and "structured_outputs" not in body:
                    body["max_tokens"] = 12
                whole = self.ok(server, "/v1/chat/completions", body)["choices"][0]
                status, events = server.stream("/v1/chat/completions", {**body, "stream": True})
                self.assertEqual(status, 200, events)
                self.assertEqual(events[-1], "[DONE]")
                content, calls, reason = reassemble(events)
                fragments = [tc for e in events[:-1] for ch in e.get("choices", [])
                             for tc in ch["delta"].get("tool_calls", []) if tc.get("function", {}).get("arguments")]
                if case["tool_choice"] != "auto":  # a forced call's arguments come as they are written
                    self.assertGreater(len(fragments), 3, (family, case))
                msg = whole["message"]
                self.assertEqual(reason, whole["finish_reason"], (family, case))
                self.assertEqual(content, msg["content"] or "", (family, case))
                self.assertEqual([(c["name"], c["arguments"]) for c in calls],
                                 [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])],
                                 (family, case))
                for c in calls:
                    self.assertRegex(c["id"], r"^call_")
                if case.get("qwen_grammar"):
                    self.assertEqual(msg["content"], "Checking.")
                    self.assertEqual(json.loads(msg["tool_calls"][0]["function"]["arguments"]), {"city": "Paris", "unit": "c"})
                    self.assertEqual(whole["finish_reason"], "tool_calls")
                if case.get("llama_grammar"):
                    self.assertIsNone(msg["content"])
                    self.assertEqual(msg["tool_calls"][0]["function"]["name"], "add")
                    self.assertEqual(json.loads(msg["tool_calls"][0]["function"]["arguments"]), {"a": 2, "b": 3})
                if case["tool_choice"] == "auto" and "structured_outputs" not in body:
                    self.assertNotIn("tool_calls", msg)  # the model wrote text: it stays text
                    self.assertEqual(whole["finish_reason"], "length")

    def test_forced_call_cut_by_max_tokens_is_length(self):
        for server in (self.qwen, self.llama):
            body = chat(USER, tools=[WEATHER], tool_choice="required", max_tokens=200, parallel_tool_calls=False)
            full = self.ok(server, "/v1/chat/completions", body)
            body["max_tokens"] = full["usage"]["completion_tokens"] - 16  # inside the arguments
            whole = self.ok(server, "/v1/chat/completions", body)["choices"][0]
            self.assertEqual(whole["finish_reason"], "length")
            call = whole["message"]["tool_calls"][0]["function"]
            self.assertEqual(call["name"], "get_weather")
            with self.assertRaises(ValueError):
                json.loads(call["arguments"])  # what was written, never closed by invention
            status, events = server.stream("/v1/chat/completions", {**body, "stream": True})
            content, calls, reason = reassemble(events)
            self.assertEqual((reason, [(c["name"], c["arguments"]) for c in calls]),
                             ("length", [(call["name"], call["arguments"])]))

    def test_tool_history_renders_through_the_template(self):
        history = USER + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"}]
        expected = {self.qwen: ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>',
                                "<tool_response>\n22 degrees\n</tool_response>"],
                    self.llama: ['{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}',
                                 "<|start_header_id|>ipython<|end_header_id|>"]}
        for server, parts in expected.items():
            tokens = self.ok(server, "/tokenize", {"messages": history})["tokens"]
            text = self.ok(server, "/detokenize", {"tokens": tokens})["prompt"]
            for part in parts:
                self.assertIn(part, text)
            out = self.ok(server, "/v1/chat/completions", chat(history, tools=TOOLS, max_tokens=5))
            self.assertEqual(out["choices"][0]["finish_reason"], "length")

    def test_tools_render_in_the_prompt(self):
        with_tools = self.ok(self.qwen, "/v1/chat/completions", chat(USER, tools=TOOLS, tool_choice="none", max_tokens=1))
        without = self.ok(self.qwen, "/v1/chat/completions", chat(USER, max_tokens=1))
        self.assertGreater(with_tools["usage"]["prompt_tokens"], without["usage"]["prompt_tokens"] + 50)

    def test_bad_tool_requests_are_400_naming_the_field(self):
        self.bad(self.qwen, "/v1/chat/completions", chat(USER, tool_choice="required"), "tool_choice")
        self.bad(self.qwen, "/v1/chat/completions", chat(USER, tools=TOOLS, tool_choice="sometimes"), "tool_choice")
        self.bad(self.qwen, "/v1/chat/completions",
                 chat(USER, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice")
        self.bad(self.qwen, "/v1/chat/completions", chat(USER, tools=[{"type": "code_interpreter"}]), "tools[0].type")
        self.bad(self.qwen, "/v1/chat/completions", chat(USER, tools=[WEATHER, WEATHER]), "tools[1].function.name")
        strict_bad = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
            "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}
        e = self.bad(self.qwen, "/v1/chat/completions", chat(USER, tools=[strict_bad], tool_choice="required"),
                     "tools[0].function.parameters")
        self.assertIn("'not'", e["message"])
        self.bad(self.qwen, "/v1/chat/completions",
                 chat(USER, tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), "response_format")
        # The bundled template has no tool-call format.
        self.bad(self.plain, "/v1/chat/completions", chat(USER, tools=TOOLS), "tools")
        self.ok(self.plain, "/v1/chat/completions", chat(USER, tools=TOOLS, tool_choice="none", max_tokens=2))


if __name__ == "__main__":
    unittest.main()
