"""Reasoning in Chat Completions, and the Anthropic Messages and OpenAI Responses APIs,
through `loom serve` on the bundled weights with real chat templates
(tests/reference/chat_templates): DeepSeek-R1's template opens a <think> section in
the prompt, so the tiny model's whole reply is reasoning until a thinking budget forces
the close tag; Qwen2.5's template carries tools. The official SDKs from npm (`openai`'s
responses.create, `@anthropic-ai/sdk`), unchanged, check each API against the Chat
Completions reply for the same conversation (tests/serve/*_sdk_client.js)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from serve_harness import SOURCE_DIR, Server
from test_structured import family_model

NODE_MODULES = os.path.join(SOURCE_DIR, ".cache", "npm", "node_modules")
HERE = os.path.dirname(os.path.abspath(__file__))
USER = [{"role": "user", "content": "Who made the heavens?"}]
KEY = {"Authorization": "Bearer sdk-key"}


def chat(messages, **kw):
    return {"messages": messages, "temperature": 0, **kw}


class ApiFormats(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="loom-api-formats-")
        common = ("--api-key", "sdk-key", "--served-model-name", "kjv")
        cls.plain = Server(*common)
        cls.think = Server(*common, model=family_model(cls.tmp, "deepseek_r1_distill_qwen"))
        cls.qwen3 = Server(*common, "--max-model-len", "2048", model=family_model(cls.tmp, "qwen3"))
        cls.tools = Server(*common, "--max-model-len", "2048", model=family_model(cls.tmp, "qwen2_5"))

    @classmethod
    def tearDownClass(cls):
        for s in (cls.plain, cls.think, cls.qwen3, cls.tools):
            s.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ok(self, server, path, body, headers=KEY):
        status, _, reply = server.post(path, body, headers=headers)
        self.assertEqual(status, 200, reply)
        return reply

    def node(self, script, server, mode):
        self.assertTrue(os.path.isdir(os.path.join(NODE_MODULES, "openai")), "run scripts/install-test-oracles")
        self.assertTrue(os.path.isdir(os.path.join(NODE_MODULES, "@anthropic-ai", "sdk")), "run scripts/install-test-oracles")
        env = dict(os.environ, NODE_PATH=NODE_MODULES)
        proc = subprocess.run(["node", os.path.join(HERE, script), str(server.port), "kjv", mode],
                              capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr + server.log()[-3000:])
        self.assertIn("all checks passed", proc.stdout)

    # Reasoning in Chat Completions.

    def test_reasoning_is_split_and_a_budget_closes_it(self):
        free = self.ok(self.think, "/v1/chat/completions", chat(USER, max_tokens=20))
        m = free["choices"][0]["message"]
        # The template leaves <think> open and the tiny model never closes it: all reasoning.
        self.assertGreater(len(m["reasoning_content"]), 0)
        self.assertEqual(m["content"], "")
        self.assertEqual(free["choices"][0]["finish_reason"], "length")

        first = self.ok(self.think, "/v1/chat/completions", chat(USER, max_tokens=5))["choices"][0]["message"]
        budget = self.ok(self.think, "/v1/chat/completions", chat(USER, max_tokens=20, max_thinking_tokens=5))
        b = budget["choices"][0]["message"]
        # The first 5 tokens are the free run's (greedy), then the close tag is forced and an answer follows.
        self.assertEqual(b["reasoning_content"], first["reasoning_content"])
        self.assertGreater(len(b["content"]), 0)
        self.assertNotIn("</think>", b["content"])
        self.assertEqual(budget["usage"]["completion_tokens"], 20)

        # reasoning_effort maps to a budget: "minimal" is 0, so the section closes at once.
        minimal = self.ok(self.think, "/v1/chat/completions", chat(USER, max_tokens=12, reasoning_effort="minimal"))
        self.assertEqual(minimal["choices"][0]["message"]["reasoning_content"], "")
        self.assertGreater(len(minimal["choices"][0]["message"]["content"]), 0)

    def test_streamed_reasoning_equals_non_streamed(self):
        for extra in ({}, {"max_thinking_tokens": 4}, {"max_thinking_tokens": 0}):
            body = chat(USER, max_tokens=16, **extra)
            whole = self.ok(self.think, "/v1/chat/completions", body)["choices"][0]["message"]
            status, events = self.think.stream("/v1/chat/completions", {**body, "stream": True}, headers=KEY)
            self.assertEqual(status, 200, events)
            self.assertEqual(events[-1], "[DONE]")
            reasoning = "".join(e["choices"][0]["delta"].get("reasoning_content") or "" for e in events[:-1] if e["choices"])
            content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
            self.assertEqual(reasoning, whole["reasoning_content"], extra)
            self.assertEqual(content, whole["content"], extra)

    def test_enable_thinking_reaches_the_template(self):
        # Qwen3's template writes an empty, closed section when thinking is off: nothing to split.
        off = self.ok(self.qwen3, "/v1/chat/completions",
                      chat(USER, max_tokens=8, chat_template_kwargs={"enable_thinking": False}))
        on = self.ok(self.qwen3, "/v1/chat/completions", chat(USER, max_tokens=8))
        self.assertGreater(off["usage"]["prompt_tokens"], on["usage"]["prompt_tokens"])
        for reply in (off, on):
            m = reply["choices"][0]["message"]
            self.assertIn("reasoning_content", m)  # the template thinks
            self.assertIsNone(m["reasoning_content"])  # the tiny model wrote no <think>
            self.assertGreater(len(m["content"]), 0)
        # reasoning_effort "none" is enable_thinking false.
        none = self.ok(self.qwen3, "/v1/chat/completions", chat(USER, max_tokens=8, reasoning_effort="none"))
        self.assertEqual(none["usage"]["prompt_tokens"], off["usage"]["prompt_tokens"])
        self.assertEqual(none["choices"][0]["message"]["content"], off["choices"][0]["message"]["content"])
        # A template that does not think has no reasoning_content at all.
        plain = self.ok(self.plain, "/v1/chat/completions", chat(USER, max_tokens=4, max_thinking_tokens=2))
        self.assertNotIn("reasoning_content", plain["choices"][0]["message"])

    def test_structured_output_on_a_thinking_template_is_plain_content(self):
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
        r = self.ok(self.think, "/v1/chat/completions", chat(USER, max_tokens=30, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
        m = r["choices"][0]["message"]
        self.assertIsInstance(json.loads(m["content"])["ok"], bool)
        self.assertIsNone(m["reasoning_content"])

    def test_bad_reasoning_fields_are_400(self):
        for body, param in ((chat(USER, max_thinking_tokens=-1), "max_thinking_tokens"),
                            (chat(USER, reasoning_effort="huge"), "reasoning_effort"),
                            (chat(USER, reasoning_effort=3), "reasoning_effort")):
            status, _, reply = self.think.post("/v1/chat/completions", body, headers=KEY)
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["param"], param)

    # Anthropic Messages: auth and error shape over raw HTTP.

    def test_messages_auth_and_error_shape(self):
        body = {"max_tokens": 4, "messages": USER}
        status, _, r = self.plain.post("/v1/messages", body, headers={"x-api-key": "sdk-key"})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["type"], "message")
        status, _, r = self.plain.post("/v1/messages", body, headers={"x-api-key": "wrong"})
        self.assertEqual(status, 401)
        self.assertEqual(r, {"type": "error", "error": {"type": "authentication_error", "message": "Incorrect API key provided"}})
        status, _, r = self.plain.post("/v1/messages", body)
        self.assertEqual(status, 401)
        self.assertEqual(r["error"]["type"], "authentication_error")
        status, _, r = self.plain.request("GET", "/v1/messages", headers={"x-api-key": "sdk-key"})
        self.assertEqual(status, 405)
        self.assertEqual(r["type"], "error")
        status, _, r = self.plain.post("/v1/messages", {"messages": USER}, headers={"x-api-key": "sdk-key"})
        self.assertEqual((status, r["error"]["type"]), (400, "invalid_request_error"))
        self.assertIn("max_tokens", r["error"]["message"])
        # x-api-key opens the OpenAI routes too; their errors keep OpenAI's shape.
        status, _, r = self.plain.post("/v1/chat/completions", chat(USER, max_tokens=2), headers={"x-api-key": "sdk-key"})
        self.assertEqual(status, 200, r)
        status, _, r = self.plain.post("/v1/responses", {"input": "x", "max_output_tokens": 0}, headers=KEY)
        self.assertEqual(status, 400)
        self.assertEqual(r["error"]["param"], "max_output_tokens")

    def test_messages_stream_events(self):
        status, events = self.plain.stream("/v1/messages", {"max_tokens": 6, "stream": True, "messages": USER},
                                           headers={"x-api-key": "sdk-key"})
        self.assertEqual(status, 200, events)
        types = [e["type"] for e in events]
        self.assertEqual(types[:2], ["message_start", "ping"])
        self.assertEqual(types[-2:], ["message_delta", "message_stop"])
        self.assertIn("content_block_delta", types)
        self.assertEqual(events[-2]["usage"]["output_tokens"], 6)
        self.assertEqual(events[-2]["delta"]["stop_reason"], "max_tokens")

    def test_client_limits_hold_on_the_new_routes(self):
        with Server("--api-key", "sdk-key", "--max-body-bytes", "4096", "--max-prompt-bytes", "300") as server:
            big = "x" * 5000
            for path, body in (("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": big}]}),
                               ("/v1/responses", {"input": big})):
                status, _, _ = server.post(path, body, headers={"x-api-key": "sdk-key"})
                self.assertEqual(status, 413, path)
            long = "word " * 100  # under the body limit, over the prompt's byte budget
            status, _, r = server.post("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": long}]},
                                       headers={"x-api-key": "sdk-key"})
            self.assertEqual((status, r["error"]["type"]), (400, "invalid_request_error"))
            self.assertIn("--max-prompt-bytes", r["error"]["message"])
            status, _, r = server.post("/v1/responses", {"input": long}, headers=KEY)
            self.assertEqual((status, r["error"]["code"]), (400, "prompt_too_large"))
            self.assertEqual(r["error"]["param"], "input")
            for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/responses"):
                status, _, _ = server.post(path, {"input": "x", "max_tokens": 2, "messages": USER})
                self.assertEqual(status, 401, path)

    def test_thinking_budget_holds_for_every_sampled_choice(self):
        r = self.ok(self.think, "/v1/chat/completions",
                    {"messages": USER, "max_tokens": 16, "max_thinking_tokens": 3, "n": 3, "temperature": 1.0, "seed": 7})
        self.assertEqual(len(r["choices"]), 3)
        for choice in r["choices"]:
            self.assertIsNotNone(choice["message"]["reasoning_content"])
            self.assertGreater(len(choice["message"]["content"]), 0, choice)

    # The official SDKs.

    def test_anthropic_sdk(self):
        self.node("anthropic_sdk_client.js", self.plain, "plain")

    def test_anthropic_sdk_tools(self):
        self.node("anthropic_sdk_client.js", self.tools, "tools")

    def test_anthropic_sdk_thinking(self):
        self.node("anthropic_sdk_client.js", self.think, "thinking")

    def test_responses_sdk(self):
        self.node("responses_sdk_client.js", self.plain, "plain")

    def test_responses_sdk_tools(self):
        self.node("responses_sdk_client.js", self.tools, "tools")

    def test_responses_sdk_thinking(self):
        self.node("responses_sdk_client.js", self.think, "thinking")


if __name__ == "__main__":
    unittest.main()
