"""loom serve, driven over HTTP by Python's http.client: every route, field and
error code of docs/serve.md, streamed == non-streamed, greedy == `loom generate`,
seeds under load, client disconnects, the full queue, auth and SIGTERM."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from serve_harness import (DEFAULT_MODEL, LOOM, Server, loom_json, metric, raw_exchange, wait_until)

PROMPT = "In the beginning"


def completion(server, **body):
    body.setdefault("prompt", PROMPT)
    return server.post("/v1/completions", body)


class Routes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--served-model-name", "kjv", "--page-size", "16")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_health_models_and_request_id(self):
        status, headers, body = self.server.request("GET", "/health", headers={"X-Request-Id": "probe-1"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["x-request-id"], "probe-1")
        status, _, body = self.server.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual(body["data"][0]["id"], "kjv")
        self.assertEqual(body["data"][0]["object"], "model")
        self.assertEqual(body["data"][0]["max_model_len"], 512)

    def test_greedy_completion_equals_loom_generate(self):
        want = loom_json("generate", "--model", DEFAULT_MODEL, "--prompt", PROMPT, "--max-new-tokens", "24", "--greedy", "--json")
        status, headers, body = completion(self.server, model="kjv", max_tokens=24, temperature=0)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(body["id"].startswith("cmpl-"))
        self.assertEqual(body["model"], "kjv")
        self.assertIsInstance(body["created"], int)
        choice = body["choices"][0]
        self.assertEqual(choice["index"], 0)
        self.assertEqual(choice["text"], want["text"])
        self.assertEqual(choice["finish_reason"], "length" if want["finish_reason"] == "length" else "stop")
        self.assertIsNone(choice["logprobs"])
        self.assertEqual(body["usage"], {"prompt_tokens": len(want["prompt_ids"]), "completion_tokens": len(want["generated_ids"]),
                                         "total_tokens": len(want["prompt_ids"]) + len(want["generated_ids"])})
        # The same under load: other requests (sampled, chat, longer) share its steps.
        noise = [threading.Thread(target=completion, args=(self.server,),
                                  kwargs=dict(prompt="And the LORD said unto Moses", max_tokens=40, temperature=0.9, seed=i))
                 for i in range(6)]
        for t in noise:
            t.start()
        loaded = [completion(self.server, model="kjv", max_tokens=24, temperature=0)[2]["choices"][0]["text"] for _ in range(3)]
        for t in noise:
            t.join()
        self.assertEqual(loaded, [want["text"]] * 3)

    def test_prompt_forms(self):
        _, _, tok = self.server.post("/tokenize", {"prompt": PROMPT})
        ids = tok["tokens"]
        self.assertEqual(tok["count"], len(ids))
        _, _, by_text = completion(self.server, max_tokens=8, temperature=0)
        _, _, by_ids = completion(self.server, prompt=ids, max_tokens=8, temperature=0)
        self.assertEqual(by_ids["choices"][0]["text"], by_text["choices"][0]["text"])
        status, _, many = completion(self.server, prompt=[PROMPT, "Blessed are the"], max_tokens=8, temperature=0)
        self.assertEqual(status, 200, many)
        self.assertEqual([c["index"] for c in many["choices"]], [0, 1])
        self.assertEqual(many["choices"][0]["text"], by_text["choices"][0]["text"])
        status, _, lists = completion(self.server, prompt=[ids, ids[:2]], max_tokens=8, temperature=0)
        self.assertEqual(status, 200, lists)
        self.assertEqual(lists["choices"][0]["text"], by_text["choices"][0]["text"])
        self.assertEqual(lists["usage"]["prompt_tokens"], len(ids) + 2)

    def test_echo_and_prompt_logprobs_match_perplexity(self):
        text = "In the beginning God created the heaven"
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write(text)
            f.flush()
            ppl = loom_json("perplexity", "--model", DEFAULT_MODEL, "--file", f.name, "--json")
        status, _, body = completion(self.server, prompt=text, max_tokens=4, temperature=0, echo=True, logprobs=3)
        self.assertEqual(status, 200, body)
        choice = body["choices"][0]
        self.assertTrue(choice["text"].startswith(text))
        lp = choice["logprobs"]
        n_prompt = body["usage"]["prompt_tokens"]
        self.assertEqual(len(lp["tokens"]), n_prompt + 4)
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        prompt_lps = lp["token_logprobs"][1:n_prompt]
        self.assertEqual(len(prompt_lps), ppl["tokens"])
        self.assertAlmostEqual(-sum(prompt_lps) / len(prompt_lps), ppl["loss"], places=4)
        for top in lp["top_logprobs"][1:]:
            self.assertLessEqual(len(top), 4)  # 3 alternatives (+ the token itself)
        self.assertEqual(lp["text_offset"], sorted(lp["text_offset"]))
        # Generated logprobs equal loom generate's.
        gen = loom_json("generate", "--model", DEFAULT_MODEL, "--prompt", text, "--max-new-tokens", "4", "--greedy", "--json")
        for got, want in zip(lp["token_logprobs"][n_prompt:], gen["logprobs"]):
            self.assertAlmostEqual(got, want, places=4)
        # echo alone
        _, _, plain = completion(self.server, prompt=text, max_tokens=4, temperature=0, echo=True)
        self.assertEqual(plain["choices"][0]["text"], choice["text"])

    def test_stream_equals_non_stream(self):
        _, _, whole = completion(self.server, max_tokens=30, temperature=0)
        status, events = self.server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 30, "temperature": 0,
                                                                 "stream": True, "stream_options": {"include_usage": True}})
        self.assertEqual(status, 200, events)
        self.assertEqual(events[-1], "[DONE]")
        usage = events[-2]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"], whole["usage"])
        chunks = events[:-2]
        self.assertTrue(all(e["object"] == "text_completion" for e in chunks))
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks), whole["choices"][0]["text"])
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"])
        self.assertTrue(all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]))
        # Without include_usage there is no usage chunk.
        _, events = self.server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "stream": True})
        self.assertTrue(all("usage" not in e for e in events[:-1]))

    def test_chat(self):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heavens?"}]
        want = loom_json("chat", "--model", DEFAULT_MODEL, "--system", "Be brief.", "--message", "Who made the heavens?",
                         "--greedy", "--max-new-tokens", "20", "--json")
        status, _, body = self.server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "chat.completion")
        msg = body["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        self.assertEqual(msg["content"], want[0]["assistant"])
        self.assertEqual(body["usage"]["prompt_tokens"], want[0]["prompt_tokens"])
        # Content as a list of text parts, joined.
        parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                 {"role": "user", "content": [{"type": "text", "text": "Who made the heavens?"}]}]
        _, _, again = self.server.post("/v1/chat/completions", {"messages": parts, "max_tokens": 20, "temperature": 0})
        self.assertEqual(again["choices"][0]["message"]["content"], msg["content"])
        # Streamed: the role first, then the content deltas.
        status, events = self.server.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0,
                                                                      "stream": True})
        self.assertEqual(events[-1], "[DONE]")
        chunks = events[:-1]
        self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), msg["content"])
        self.assertIsNotNone(chunks[-1]["choices"][0]["finish_reason"])
        # logprobs + top_logprobs
        _, _, lp = self.server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 5, "temperature": 0,
                                                              "logprobs": True, "top_logprobs": 2})
        content = lp["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), lp["usage"]["completion_tokens"])
        for entry in content:
            self.assertEqual(len(entry["top_logprobs"]), 2)
            self.assertEqual(entry["top_logprobs"][0]["token"], entry["token"])  # greedy
            self.assertEqual(bytes(entry["bytes"]).decode("utf-8", "replace"), entry["token"])
        # add_generation_prompt=false renders no assistant header: a different prompt.
        _, _, tok_a = self.server.post("/tokenize", {"messages": messages})
        _, _, tok_b = self.server.post("/tokenize", {"messages": messages, "add_generation_prompt": False})
        self.assertEqual(tok_a["count"], body["usage"]["prompt_tokens"])
        self.assertLess(tok_b["count"], tok_a["count"])

    def test_stop_strings_are_cut(self):
        _, _, whole = completion(self.server, max_tokens=30, temperature=0)
        text = whole["choices"][0]["text"]
        stop = text[10:14]
        _, _, cut = completion(self.server, max_tokens=30, temperature=0, stop=[stop, "zzzz"])
        self.assertEqual(cut["choices"][0]["text"], text[:text.index(stop)])
        self.assertEqual(cut["choices"][0]["finish_reason"], "stop")
        _, events = self.server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 30, "temperature": 0,
                                                            "stop": stop, "stream": True})
        self.assertEqual("".join(e["choices"][0]["text"] for e in events[:-1]), cut["choices"][0]["text"])

    def test_sampling_fields_take_effect(self):
        _, _, greedy = completion(self.server, max_tokens=12, temperature=0)
        # logit_bias forces a token.
        _, _, tok = self.server.post("/tokenize", {"prompt": " LORD", "add_special_tokens": False})
        lord = tok["tokens"][0]
        _, _, forced = completion(self.server, max_tokens=3, temperature=0, logit_bias={str(lord): 100})
        self.assertEqual(forced["choices"][0]["text"], " LORD" * 3)
        # A strong frequency penalty changes a greedy continuation that repeats itself.
        _, _, pen = completion(self.server, max_tokens=40, temperature=0, frequency_penalty=2.0, presence_penalty=2.0)
        _, _, plain = completion(self.server, max_tokens=40, temperature=0)
        self.assertNotEqual(pen["choices"][0]["text"], plain["choices"][0]["text"])
        for field, value in [("top_k", 5), ("top_p", 0.9), ("min_p", 0.1), ("repetition_penalty", 1.3), ("user", "someone"),
                             ("an_unknown_field", {"x": 1})]:
            status, _, body = completion(self.server, max_tokens=4, temperature=0.7, seed=1, **{field: value})
            self.assertEqual(status, 200, (field, body))
        self.assertEqual(greedy["choices"][0]["finish_reason"], "length")

    def test_seed_reproducible_under_load(self):
        body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 1.0, "seed": 1234}
        _, _, alone = completion(self.server, **body)
        results = []

        def noise(i):
            completion(self.server, prompt="And the LORD said", max_tokens=30, temperature=1.0, seed=i)

        threads = [threading.Thread(target=noise, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for _ in range(3):
            results.append(completion(self.server, **body)[2]["choices"][0]["text"])
        for t in threads:
            t.join()
        self.assertEqual(results, [alone["choices"][0]["text"]] * 3)
        _, _, other = completion(self.server, **dict(body, seed=99))
        self.assertNotEqual(other["choices"][0]["text"], alone["choices"][0]["text"])

    def test_n_choices(self):
        status, _, body = completion(self.server, max_tokens=16, temperature=1.0, seed=5, n=3)
        self.assertEqual(status, 200, body)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2])
        texts = [c["text"] for c in body["choices"]]
        self.assertGreater(len(set(texts)), 1)
        _, _, again = completion(self.server, max_tokens=16, temperature=1.0, seed=5, n=3)
        self.assertEqual([c["text"] for c in again["choices"]], texts)
        self.assertEqual(body["usage"]["prompt_tokens"], 4)  # the prompt counts once
        _, events = self.server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 16, "temperature": 1.0,
                                                            "seed": 5, "n": 3, "stream": True})
        for i in range(3):
            self.assertEqual("".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"][0]["index"] == i), texts[i])
        # Greedy n > 1: identical choices, as OpenAI gives them.
        _, _, greedy = completion(self.server, max_tokens=8, temperature=0, n=2)
        self.assertEqual(greedy["choices"][0]["text"], greedy["choices"][1]["text"])
        _, _, chat = self.server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "n": 2,
                                                               "max_tokens": 6, "temperature": 0.9, "seed": 3})
        self.assertEqual(len(chat["choices"]), 2)

    def test_tokenize_detokenize(self):
        status, _, body = self.server.post("/tokenize", {"prompt": "Blessed are the meek", "return_token_strs": True})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["max_model_len"], 512)
        self.assertEqual(len(body["token_strs"]), body["count"])
        status, _, text = self.server.post("/detokenize", {"tokens": body["tokens"]})
        self.assertEqual(status, 200, text)
        self.assertTrue(text["prompt"].endswith("Blessed are the meek"))
        status, _, err = self.server.post("/detokenize", {"tokens": [1, 99999]})
        self.assertEqual(status, 400)
        self.assertEqual(err["error"]["param"], "tokens")

    def test_errors_name_the_field(self):
        def check(body, status, param=None, path="/v1/completions", contains=None, code=None):
            s, _, b = self.server.post(path, body)
            self.assertEqual(s, status, (body, b))
            err = b["error"]
            self.assertEqual(set(err), {"message", "type", "param", "code"})
            if param is not None:
                self.assertEqual(err["param"], param, b)
            if contains:
                for c in contains:
                    self.assertIn(c, err["message"])
            if code:
                self.assertEqual(err["code"], code)

        check("{not json", 400)
        check("[1, 2]", 400)
        check({"prompt": PROMPT, "temperature": "hot"}, 400, "temperature")
        check({"prompt": PROMPT, "top_p": 1.5}, 400, "top_p")
        check({"prompt": PROMPT, "max_tokens": -1}, 400, "max_tokens")
        check({"prompt": PROMPT, "n": 0}, 400, "n")
        check({"prompt": PROMPT, "logprobs": 21}, 400, "logprobs")
        check({"prompt": PROMPT, "stop": [1]}, 400, "stop")
        check({"prompt": PROMPT, "logit_bias": {"x": 1}}, 400, "logit_bias")
        check({"prompt": PROMPT, "logit_bias": {"9999999": 1}}, 400)
        check({"prompt": PROMPT, "stream_options": {"include_usage": True}}, 400, "stream_options")
        check({"prompt": PROMPT, "suffix": "and the end"}, 400, "suffix")
        check({"max_tokens": 3}, 400, "prompt")
        check({"prompt": [1, -5]}, 400, "prompt")
        check({"prompt": [1, 4096]}, 400, "prompt", contains=["4096", "vocabulary"])
        check({"prompt": PROMPT, "max_tokens": 600}, 400, "max_tokens", contains=["512", "604", "600"],
              code="context_length_exceeded")
        check({"prompt": PROMPT, "model": "gpt-4"}, 404, "model", code="model_not_found")
        check({"messages": "hi"}, 400, "messages", path="/v1/chat/completions")
        check({"messages": [{"content": "x"}]}, 400, "messages[0].role", path="/v1/chat/completions")
        check({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages[0].content[0]",
              path="/v1/chat/completions")
        check({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs",
              path="/v1/chat/completions")
        s, h, b = self.server.request("GET", "/v1/nothing")
        self.assertEqual(s, 404)
        self.assertIn("error", b)
        s, h, b = self.server.request("GET", "/v1/completions")
        self.assertEqual(s, 405)
        self.assertEqual(h["allow"], "POST")
        s, h, b = self.server.request("PUT", "/health")
        self.assertEqual(s, 405)
        # A bad request disturbs nobody: the next good one works.
        self.assertEqual(completion(self.server, max_tokens=2)[0], 200)

    def test_metrics(self):
        before = self.server.metrics()
        completion(self.server, max_tokens=5, temperature=0)
        after = self.server.metrics()
        for name in ["loom:num_requests_running", "loom:num_requests_waiting", "loom:kv_cache_usage_perc",
                     "loom:prefix_cache_queries_total", "loom:prefix_cache_hits_total", "loom:prompt_tokens_total",
                     "loom:generation_tokens_total", "loom:num_preemptions_total"]:
            self.assertIn(name + '{model_name="kjv"}', after)
        self.assertEqual(metric(after, "loom:generation_tokens_total") - metric(before, "loom:generation_tokens_total"), 5)
        self.assertEqual(metric(after, "loom:request_success_total", finished_reason="length") -
                         metric(before, "loom:request_success_total", finished_reason="length"), 1)
        for h in ["loom:time_to_first_token_seconds", "loom:inter_token_latency_seconds", "loom:e2e_request_latency_seconds",
                  "loom:request_queue_time_seconds"]:
            self.assertGreater(metric(after, h + "_count"), metric(before, h + "_count") - 1)
            self.assertIn(h + '_bucket{model_name="kjv",le="+Inf"}', after)
        self.assertEqual(metric(after, "loom:time_to_first_token_seconds_count") -
                         metric(before, "loom:time_to_first_token_seconds_count"), 1)
        self.assertEqual(metric(after, "loom:inter_token_latency_seconds_count") -
                         metric(before, "loom:inter_token_latency_seconds_count"), 4)
        # A shared prompt hits the prefix cache.
        long_prompt = "And God said, Let there be light: and there was light. " * 12
        completion(self.server, prompt=long_prompt, max_tokens=2, temperature=0)
        mid = self.server.metrics()
        completion(self.server, prompt=long_prompt, max_tokens=2, temperature=0)
        end = self.server.metrics()
        self.assertGreater(metric(end, "loom:prefix_cache_hits_total"), metric(mid, "loom:prefix_cache_hits_total"))

    def test_disconnect_frees_blocks(self):
        def idle():
            m = self.server.metrics()
            return metric(m, "loom:num_requests_running") == 0 and metric(m, "loom:num_requests_waiting") == 0

        self.assertTrue(wait_until(idle))
        base = self.server.metrics()
        aborted = metric(base, "loom:request_success_total", finished_reason="abort")
        # A stream read for a few events, then dropped.
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "temperature": 0.8, "stream": True, "seed": 1})
        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        got = b""
        while got.count(b"data: ") < 3:
            got += s.recv(4096)
        self.assertTrue(metric(self.server.metrics(), "loom:kv_cache_usage_perc") > 0)
        s.close()
        self.assertTrue(wait_until(idle, 5), self.server.metrics())
        self.assertEqual(metric(self.server.metrics(), "loom:kv_cache_usage_perc"), 0)
        # A non-streamed request whose client hangs up before the answer.
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "temperature": 0.8, "seed": 2})
        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        self.assertTrue(wait_until(lambda: metric(self.server.metrics(), "loom:num_requests_running") > 0, 5))
        s.close()
        self.assertTrue(wait_until(idle, 5), self.server.metrics())
        self.assertEqual(metric(self.server.metrics(), "loom:kv_cache_usage_perc"), 0)
        self.assertEqual(metric(self.server.metrics(), "loom:request_success_total", finished_reason="abort") - aborted, 2)


class Utf8Streaming(unittest.TestCase):
    """Text is cut only at UTF-8 boundaries: byte tokens forced by logit_bias
    spell two-byte characters, which no stream event may split."""

    def test_multibyte_characters_are_never_split(self):
        with open(os.path.join(DEFAULT_MODEL, "tokenizer.json")) as f:
            vocab = json.load(f)["model"]["vocab"]
        # Byte-level BPE spells byte 0xC3 as 'Ã' and 0xA9 as '©': together, 'é'. The
        # bias puts the lead byte first; the frequency penalty then alternates them.
        lead, cont = vocab["Ã"], vocab["©"]
        with Server() as server:
            body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "frequency_penalty": 2.0,
                    "logit_bias": {str(lead): 61, str(cont): 60}}
            _, _, whole = server.post("/v1/completions", body)
            text = whole["choices"][0]["text"]
            self.assertIn("é", text)
            _, events = server.stream("/v1/completions", dict(body, stream=True))
            deltas = [e["choices"][0]["text"] for e in events[:-1]]
            self.assertEqual("".join(deltas), text)
            self.assertGreater(len([d for d in deltas if "é" in d]), 0)
            if "\ufffd" not in text:  # a split character would show as U+FFFD in its delta
                self.assertFalse(any("\ufffd" in d for d in deltas), deltas)


class PromptLookup(unittest.TestCase):
    """Speculative decoding by prompt lookup through the server: per request
    (prompt_lookup_num_tokens) and by default (--prompt-lookup-num-tokens); greedy
    text equal to plain decoding, streamed and not, and the drafted and accepted
    tokens counted in /metrics."""

    # A prompt that repeats itself: its continuation quotes it, so drafts are accepted.
    REPEAT = ("And God said, Let there be light: and there was light. " * 6).strip()

    def drafted(self, server):
        """(drafted, accepted) once settled: a step counts its accepted drafts just after
        it has delivered the request's last token."""
        def read():
            m = server.metrics()
            return (metric(m, "loom:spec_decode_num_draft_tokens_total"),
                    metric(m, "loom:spec_decode_num_accepted_tokens_total"))
        last = read()
        for _ in range(50):
            time.sleep(0.05)
            now = read()
            if now == last:
                return now
            last = now
        return last

    def test_per_request_and_server_default(self):
        plain_body = {"prompt": self.REPEAT, "max_tokens": 40, "temperature": 0}
        # (--adaptive-speculation false: drafts whatever the step cost, so some are surely accepted)
        with Server("--adaptive-speculation", "false") as server:
            _, _, plain = server.post("/v1/completions", plain_body)
            self.assertEqual(self.drafted(server), (0, 0))
            status, _, spec = server.post("/v1/completions", dict(plain_body, prompt_lookup_num_tokens=6))
            self.assertEqual(status, 200, spec)
            self.assertEqual(spec["choices"][0]["text"], plain["choices"][0]["text"])
            drafted, accepted = self.drafted(server)
            self.assertGreater(accepted, 0)
            self.assertGreaterEqual(drafted, accepted)
            _, events = server.stream("/v1/completions", dict(plain_body, prompt_lookup_num_tokens=6, stream=True))
            self.assertEqual("".join(e["choices"][0]["text"] for e in events[:-1]), plain["choices"][0]["text"])
            status, _, err = server.post("/v1/completions", dict(plain_body, prompt_lookup_num_tokens=1000))
            self.assertEqual(status, 400, err)
            self.assertEqual(err["error"]["param"], "prompt_lookup_num_tokens")
            status, _, chat = server.post("/v1/chat/completions", {
                "messages": [{"role": "user", "content": self.REPEAT}], "max_tokens": 20, "temperature": 0,
                "prompt_lookup_num_tokens": 4})
            self.assertEqual(status, 200, chat)
        with Server("--prompt-lookup-num-tokens", "6", "--adaptive-speculation", "false") as server:
            _, _, spec = server.post("/v1/completions", plain_body)
            self.assertEqual(spec["choices"][0]["text"], plain["choices"][0]["text"])
            self.assertGreater(self.drafted(server)[1], 0)
            # A request may turn it off.
            before = self.drafted(server)
            server.post("/v1/completions", dict(plain_body, prompt_lookup_num_tokens=0))
            self.assertEqual(self.drafted(server), before)


class Lifecycle(unittest.TestCase):
    def test_api_key(self):
        with Server("--api-key", "sekret") as server:
            self.assertEqual(server.request("GET", "/health")[0], 200)
            status, headers, body = server.request("GET", "/v1/models")
            self.assertEqual(status, 401)
            self.assertEqual(body["error"]["code"], "invalid_api_key")
            status, _, body = server.post("/v1/completions", {"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
            self.assertEqual(status, 401)
            status, _, body = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2},
                                          headers={"Authorization": "Bearer sekret"})
            self.assertEqual(status, 200, body)
            self.assertEqual(server.request("GET", "/metrics")[0], 401)

    def test_request_larger_than_the_kv_pool_is_400(self):
        with Server("--page-size", "16", "--max-blocks-per-request", "2") as server:
            status, _, body = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 100})
            self.assertEqual(status, 400, body)
            self.assertEqual(body["error"]["code"], "kv_cache_too_small")
            self.assertIn("max_blocks_per_request", body["error"]["message"])
            self.assertEqual(server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8})[0], 200)

    def test_body_limit(self):
        with Server("--max-body-bytes", "2000") as server:
            status, _, body = server.post("/v1/completions", {"prompt": "x" * 5000})
            self.assertEqual(status, 413)
            self.assertIn("2000", body["error"]["message"])
            self.assertEqual(server.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0], 200)

    def test_full_queue_is_429(self):
        with Server("--max-requests-per-batch", "1", "--max-queue-size", "1") as server:
            long = {"prompt": PROMPT, "max_tokens": 400, "temperature": 0.8, "seed": 1}
            results = []
            first = threading.Thread(target=lambda: results.append(server.post("/v1/completions", long)))
            first.start()
            self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 1))
            second = threading.Thread(target=lambda: results.append(server.post("/v1/completions", long)))
            second.start()
            self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_waiting") >= 1 or len(results) > 0))
            status, headers, body = server.post("/v1/completions", long)
            self.assertEqual(status, 429, body)
            self.assertEqual(headers["retry-after"], "1")
            self.assertEqual(body["error"]["type"], "rate_limit_error")
            first.join(120)
            second.join(120)
            self.assertEqual(sorted(r[0] for r in results), [200, 200])

    def test_sigterm_drains_then_exits_zero(self):
        server = Server("--shutdown-timeout", "60")
        result = {}

        def long_stream():
            result["stream"] = server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 300, "temperature": 0.8,
                                                                  "seed": 3, "stream": True})

        t = threading.Thread(target=long_stream)
        t.start()
        self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 1))
        server.proc.send_signal(signal.SIGTERM)
        self.assertTrue(wait_until(lambda: server.request("GET", "/health")[0] == 503, 5))
        status, _, body = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        self.assertEqual(status, 503)
        t.join(120)
        self.assertEqual(server.proc.wait(60), 0, server.log())
        status, events = result["stream"]
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")

    def test_sigterm_timeout_fails_the_rest(self):
        # A timeout far shorter than the 480 tokens take: the bundled model decodes them
        # in about 0.3 s on a fast CPU, so a 0.3 s timeout sometimes let the request finish.
        server = Server("--shutdown-timeout", "0.02")
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("s", server.stream(
            "/v1/completions", {"prompt": PROMPT, "max_tokens": 480, "temperature": 0.8, "seed": 4, "stream": True})))
        t.start()
        self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 1))
        server.proc.send_signal(signal.SIGINT)
        t.join(60)
        self.assertEqual(server.proc.wait(60), 0, server.log())
        status, events = result["s"]
        self.assertEqual(events[-1], "[DONE]")
        self.assertIn("error", events[-2])

    def test_health_is_503_while_loading(self):
        # tokenizer.json is a FIFO: loading blocks on it until the test writes it.
        with tempfile.TemporaryDirectory() as d:
            for name in ["config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]:
                os.symlink(os.path.join(DEFAULT_MODEL, name), os.path.join(d, name))
            fifo = os.path.join(d, "tokenizer.json")
            os.mkfifo(fifo)
            server = Server(model=d, ready=False)
            try:
                self.assertEqual(server.request("GET", "/health", timeout=5)[0], 503)
                status, headers, body = server.post("/v1/completions", {"prompt": "x"}, timeout=5)
                self.assertEqual(status, 503)
                self.assertEqual(body["error"]["code"], "loading")
                with open(fifo, "wb") as w, open(os.path.join(DEFAULT_MODEL, "tokenizer.json"), "rb") as r:
                    w.write(r.read())
                self.assertTrue(wait_until(lambda: server.request("GET", "/health")[0] == 200, 30), server.log())
                self.assertEqual(server.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0], 200)
            finally:
                self.assertEqual(server.stop(), 0)

    def test_bad_model_dir_is_a_named_error(self):
        proc = subprocess.run([LOOM, "serve", "--port", "0", "--model", "/nonexistent-model-dir"], capture_output=True,
                              timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(b"nonexistent-model-dir", proc.stderr)


if __name__ == "__main__":
    unittest.main()
