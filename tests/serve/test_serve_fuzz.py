"""10,000+ mutated request bodies and headers against one running `loom serve`:
every reply is a valid HTTP response, every error reply carries OpenAI's error
object (Anthropic's on /v1/messages), the server never dies, and a well-formed request afterwards works.
Deterministic (seeded); bounded by --max-model-len so no mutation runs long."""
import json
import os
import random
import threading
import unittest

from serve_harness import Server, metric, raw_exchange, wait_until

RUNS = int(os.environ.get("LOOM_SERVE_FUZZ_RUNS", "10000"))
WORKERS = 4

SEEDS = [
    ("POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 4, "temperature": 0}),
    ("POST", "/v1/completions", {"prompt": ["a", "b"], "max_tokens": 3, "n": 2, "temperature": 0.7, "seed": 3,
                                 "logprobs": 2, "echo": True, "stop": ["\n"]}),
    ("POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3, "stream": True,
                                 "stream_options": {"include_usage": True}, "logit_bias": {"5": 3}}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                      "logprobs": True, "top_logprobs": 2}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]},
                                                   {"role": "user", "content": "y"}], "max_tokens": 3, "stream": True,
                                      "presence_penalty": 0.5, "frequency_penalty": 0.5, "top_p": 0.9, "top_k": 4}),
    ("POST", "/tokenize", {"prompt": "Blessed are the meek", "return_token_strs": True}),
    ("POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}),
    ("POST", "/detokenize", {"tokens": [10, 20, 30]}),
    ("POST", "/v1/messages", {"max_tokens": 3, "system": "x", "stop_sequences": ["\n"], "temperature": 0,
                              "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("POST", "/v1/messages", {"max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/responses", {"input": "hi", "instructions": "x", "max_output_tokens": 3, "temperature": 0}),
    ("POST", "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                               "max_output_tokens": 3, "stream": True, "store": True, "reasoning": {"effort": "low"}}),
    ("POST", "/v1/rerank", {"query": "who", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": False}),
    ("POST", "/score", {"text_1": "who", "text_2": ["a", "b"]}),
    ("GET", "/v1/models", None),
    ("GET", "/metrics", None),
    ("GET", "/health", None),
]

ODD_VALUES = [None, True, False, 0, -1, 1, 2 ** 31, -(2 ** 63), 2 ** 64, 1e308, -0.0, 0.5, float("nan"), "", "x" * 3000,
              "\u00e9\u4e2d\U0001F600", [], [1, [2]], {}, {"a": {"b": {}}}, [None] * 50, "\x00\x01", 511, 512, 4095, 4096]


def mutate_json(rng, value, depth=0):
    """A copy of value with one random change somewhere inside it."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        out = dict(value)
        r = rng.random()
        if r < 0.15:
            del out[key]
        elif r < 0.25:
            out[rng.choice(["n", "max_tokens", "suffix", "stream_options", "model", "messages", "prompt", "tokens",
                            "logit_bias", "seed", "echo"])] = rng.choice(ODD_VALUES)
        else:
            out[key] = mutate_json(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.8:
        out = list(value)
        i = rng.randrange(len(out))
        if rng.random() < 0.2:
            out.insert(i, rng.choice(ODD_VALUES))
        else:
            out[i] = mutate_json(rng, out[i], depth + 1)
        return out
    return rng.choice(ODD_VALUES)


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if not data:
            data += bytes([rng.randrange(256)])
        elif op < 0.3:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op < 0.5:
            del data[rng.randrange(len(data)):]
        elif op < 0.7:
            i = rng.randrange(len(data))
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op < 0.8:
            data = data + data
        else:
            depth = rng.choice([10, 100, 100000])
            data = bytearray(b"[" * depth) + data + bytearray(b"]" * depth)
    return bytes(data)


def make_request(rng):
    """(raw request bytes, half_close): half-close when the request cannot be complete."""
    method, path, body = rng.choice(SEEDS)
    r = rng.random()
    if body is not None and r < 0.5:
        payload = json.dumps(mutate_json(rng, body), allow_nan=True).encode()
    elif body is not None and r < 0.8:
        payload = mutate_bytes(rng, json.dumps(body).encode())
    else:
        payload = json.dumps(body).encode() if body is not None else b""
    headers = [("Host", "127.0.0.1"), ("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    half_close = False
    h = rng.random()
    if h < 0.05:
        headers[2] = ("Content-Length", str(len(payload) + rng.randint(1, 100)))
        half_close = True
    elif h < 0.10:
        headers[2] = ("Content-Length", rng.choice(["-1", "abc", "99999999999999999999", ""]))
        half_close = True
    elif h < 0.15:
        del headers[2]
        headers.append(("Transfer-Encoding", "chunked"))
        if rng.random() < 0.5:
            payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
        else:
            payload = rng.choice([b"zz\r\n", b"5\r\nab", b"ffffffffffffffff\r\n", b"0\r\n"]) + payload
            half_close = True
    elif h < 0.20:
        headers.append((rng.choice(["X-Request-Id", "Authorization", "Connection", "Expect", "X" * 200, "Ümlaut"]),
                        rng.choice(["", "close", "100-continue", "Bearer x", "y" * 10000, "\x01\x7f"])))
    elif h < 0.25:
        method = rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "BREW", "", "P O S T"])
        half_close = method in ("", "P O S T")
    elif h < 0.30:
        path = rng.choice(["/", "/v1", "/v1/completions/", "/v1/completions?x=1", "/%00", "//v1/models", "/" + "a" * 9000,
                           "/v1/chat/completions/../completions"])
    elif h < 0.33:
        headers = [(k, v) for k, v in headers if k != "Host"]
    version = "HTTP/1.1" if rng.random() > 0.03 else rng.choice(["HTTP/1.0", "HTTP/9.9", "FOO"])
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("utf-8", "surrogateescape") + payload, half_close


class Fuzz(unittest.TestCase):
    def test_mutated_requests(self):
        with Server("--max-model-len", "48", "--no-request-log", "--max-queue-size", "64") as server:
            failures = []
            counts = {}
            lock = threading.Lock()

            def worker(k):
                rng = random.Random(1000 + k)
                for i in range(RUNS // WORKERS):
                    data, half_close = make_request(rng)
                    try:
                        reply = raw_exchange(server.port, data, timeout=30, half_close=half_close)
                    except Exception as e:  # a reply the client cannot parse, or a reset
                        if not half_close:
                            with lock:
                                failures.append(("no valid reply", repr(e), data[:300]))
                        continue
                    if reply is None:
                        if not half_close:
                            with lock:
                                failures.append(("closed without reply", data[:300]))
                        continue
                    status, headers, body = reply
                    with lock:
                        counts[status] = counts.get(status, 0) + 1
                    if status >= 400 and body:
                        try:
                            parsed = json.loads(body)
                            err = parsed["error"]
                            if b" /v1/messages" in data[:200] and parsed.get("type") == "error":
                                assert {"message", "type"} <= set(err)  # Anthropic's shape on its routes
                            else:
                                assert {"message", "type", "param", "code"} <= set(err)
                        except Exception as e:
                            with lock:
                                failures.append(("error reply without an error object", status, body[:200], data[:300]))
                    if server.proc.poll() is not None:
                        with lock:
                            failures.append(("server died", data[:300]))
                        return

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(WORKERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertIsNone(server.proc.poll(), "the server died:\n" + server.log()[-3000:])
            self.assertEqual(failures[:5], [], f"{len(failures)} failures")
            print(f"fuzz: {RUNS} requests, replies by status: {dict(sorted(counts.items()))}")
            self.assertGreater(counts.get(200, 0), RUNS // 20)  # mutations leave many requests valid
            self.assertGreater(sum(v for s, v in counts.items() if s >= 400), RUNS // 4)
            status, _, body = server.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 4})
            self.assertEqual(status, 200, body)
            self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 0, 10))
            self.assertEqual(metric(server.metrics(), "loom:kv_cache_usage_perc"), 0)


if __name__ == "__main__":
    unittest.main()
