"""`loom serve` under hostile and careless clients (issue 46, points 1-5 and 7-11):
slow, idle and stalled connections, oversized heads and bodies, lying
Content-Lengths, pipelining, HTTP/1.0, half-closed sockets, signals, and
hostile header values. Every case talks to a server on 127.0.0.1 with an
ephemeral port, every socket has a timeout, and each test states its pass rule."""
import json
import os
import signal
import socket
import threading
import time
import unittest

from serve_harness import Server, metric, parse_sse, wait_until

BODY = json.dumps({"prompt": "In the beginning", "max_tokens": 3, "temperature": 0}).encode()


def vm(pid, field):
    """A /proc/PID/status size in MiB (VmRSS now, VmHWM: the peak so far)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def post_bytes(path, body, headers=b"", version=b"HTTP/1.1"):
    return (b"POST " + path + b" " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def read_all(sock, timeout=10.0):
    """Everything the server sends until it closes (or the timeout)."""
    sock.settimeout(timeout)
    out = b""
    end = time.time() + timeout
    try:
        while time.time() < end:
            d = sock.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def exchange(port, data, half_close=False, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_all(s, timeout)
    finally:
        s.close()


def status_of(reply):
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else None


def head_of(reply):
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    return {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:])}


def send_until_refused(port, head, piece, total):
    """Sends head then `total` bytes of `piece`s, stopping when the server
    answers or closes; returns (bytes sent, the reply)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    sent = 0
    try:
        s.sendall(head)
        s.setblocking(False)
        deadline = time.time() + 30
        while sent < total and time.time() < deadline:
            try:
                if s.recv(1, socket.MSG_PEEK):
                    break  # the server answered
            except BlockingIOError:
                pass
            except OSError:
                break
            try:
                sent += s.send(piece)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break
        s.setblocking(True)
        return sent, read_all(s, 5)
    finally:
        s.close()


def canary(port, timeout=2.0):
    """Seconds a GET /health on a new connection takes, or None past `timeout`."""
    t = time.time()
    try:
        reply = exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=timeout)
    except OSError:
        return None
    return time.time() - t if status_of(reply) == 200 else None


class Hostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--request-timeout", "3", "--max-body-bytes", str(1 << 20), "--api-key", "sekret")
        cls.port = cls.server.port
        cls.pid = cls.server.proc.pid
        cls.auth = b"Authorization: Bearer sekret\r\n"

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    # 1. Slow and idle connections cost no worker: a canary on a new connection
    # answers within 2 s throughout 150 slowloris and 150 idle connections, and
    # a head that does not arrive within --request-timeout (3 s) is cut off.
    def test_slowloris_and_idle_connections_do_not_starve(self):
        idle = [socket.create_connection(("127.0.0.1", self.port), timeout=10) for _ in range(150)]
        slow = [socket.create_connection(("127.0.0.1", self.port), timeout=10) for _ in range(150)]
        try:
            for s in slow:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
            started = time.time()
            worst = 0.0
            while time.time() - started < 5:
                for s in slow:
                    try:
                        s.sendall(b"X")  # one header byte at a time
                    except OSError:
                        pass
                took = canary(self.port)
                self.assertIsNotNone(took, "the canary got no answer within 2 s")
                worst = max(worst, took)
                time.sleep(0.25)
            # Past --request-timeout the dripping connections got a 408 and were closed.
            replies = [read_all(s, 3) for s in slow[:10]]
            self.assertTrue(all(status_of(r) == 408 for r in replies), replies[:2])
            self.assertLess(worst, 2.0)
        finally:
            for s in idle + slow:
                s.close()

    # 2. Heads are bounded: a 64 MiB request line is refused (414) after at most
    # --max-header-bytes, as are 1 M header fields (431 past 100); the peak RSS
    # grows by less than 64 MiB.
    def test_oversized_request_line_and_headers(self):
        peak = vm(self.pid, "VmHWM")
        sent, reply = send_until_refused(self.port, b"GET /", b"a" * (1 << 20), 64 << 20)
        self.assertEqual(status_of(reply), 414, reply[:200])
        self.assertLess(sent, 64 << 20)
        sent, reply = send_until_refused(self.port, b"GET /health HTTP/1.1\r\n", b"X-A: b\r\n" * 4096, 8 << 20)
        self.assertEqual(status_of(reply), 431, reply[:200])
        self.assertIn(b"headers", reply)
        self.assertLess(vm(self.pid, "VmHWM") - peak, 64)

    # 3. --max-body-bytes holds for the decoded body of a chunked request (413
    # before 64 MiB are sent; peak RSS +< 64 MiB), and compressed bodies are refused (415).
    def test_chunked_body_over_the_limit_and_compressed_bodies(self):
        peak = vm(self.pid, "VmHWM")
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + self.auth + b"\r\n"
        chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
        sent, reply = send_until_refused(self.port, head, chunk, 64 << 20)
        self.assertEqual(status_of(reply), 413, reply[:200])
        self.assertIn(str(1 << 20).encode(), reply)
        self.assertLess(sent, 64 << 20)
        self.assertLess(vm(self.pid, "VmHWM") - peak, 64)
        for coding in (b"gzip", b"deflate", b"br"):
            reply = exchange(self.port, post_bytes(b"/v1/completions", b"\x1f\x8b\x08\x00", self.auth +
                                                   b"Content-Encoding: " + coding + b"\r\n"))
            self.assertEqual(status_of(reply), 415, reply[:200])
            self.assertIn(b"unsupported_content_encoding", reply)
        # A small chunked body within the limit is decoded and served.
        reply = exchange(self.port, head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY))
        self.assertEqual(status_of(reply), 200, reply[:300])

    # 4. Content-Length is checked before any body byte is read: 10^18 is 413
    # at once, negative and overflowing values are 400 at once (no hang).
    def test_content_length_is_validated_before_reading(self):
        for value, status in ((b"1000000000000000000", 413), (b"-1", 400), (b"99999999999999999999999", 400),
                              (b"12, 13", 400), (b"0x10", 400)):
            t = time.time()
            reply = exchange(self.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + self.auth +
                             b"Content-Length: " + value + b"\r\n\r\n", timeout=5)
            self.assertEqual(status_of(reply), status, (value, reply[:200]))
            self.assertLess(time.time() - t, 1.0, value)

    # 9. Pipelined requests are all answered, in order; HTTP/1.0 streams end by
    # closing, without chunks; a half-closed client still gets its reply.
    def test_pipelined_requests_are_answered_in_order(self):
        data = b"".join(post_bytes(b"/v1/completions", BODY, self.auth + b"X-Request-Id: req-%d\r\n" % i) for i in range(3))
        data += b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-3\r\nConnection: close\r\n\r\n"
        reply = exchange(self.port, data)
        ids = [line.split(b":", 1)[1].strip() for line in reply.split(b"\r\n") if line.lower().startswith(b"x-request-id:")]
        self.assertEqual(ids, [b"req-0", b"req-1", b"req-2", b"req-3"], reply[:500])
        self.assertEqual(reply.count(b"HTTP/1.1 200 OK"), 4)

    def test_http10_stream_is_not_chunked(self):
        body = json.dumps({"prompt": "In the beginning", "max_tokens": 4, "temperature": 0, "stream": True}).encode()
        reply = exchange(self.port, post_bytes(b"/v1/completions", body, self.auth, version=b"HTTP/1.0"))
        self.assertTrue(reply.startswith(b"HTTP/1.0 200"), reply[:200])
        headers = head_of(reply)
        self.assertNotIn("transfer-encoding", headers)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"))
        events = parse_sse(reply.split(b"\r\n\r\n", 1)[1].decode())
        self.assertEqual(events[-1], "[DONE]")
        whole = exchange(self.port, post_bytes(b"/v1/completions", json.dumps(
            {"prompt": "In the beginning", "max_tokens": 4, "temperature": 0}).encode(), self.auth, version=b"HTTP/1.0"))
        text = json.loads(whole.split(b"\r\n\r\n", 1)[1])["choices"][0]["text"]
        self.assertEqual("".join(e["choices"][0]["text"] for e in events[:-1]), text)
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
        # A non-streamed HTTP/1.0 reply has a length and closes.
        reply = exchange(self.port, post_bytes(b"/v1/completions", BODY, self.auth, version=b"HTTP/1.0"))
        self.assertEqual(int(head_of(reply)["content-length"]), len(reply.split(b"\r\n\r\n", 1)[1]))

    def test_half_closed_client_gets_its_reply(self):
        long_body = json.dumps({"prompt": "In the beginning", "max_tokens": 200, "temperature": 0.8, "seed": 1}).encode()
        for body in (BODY, long_body):
            reply = exchange(self.port, post_bytes(b"/v1/completions", body, self.auth), half_close=True)
            # An interim 100 may come first while the server checks the client is still there.
            final = reply[reply.index(b"HTTP/1.1 200"):] if b"HTTP/1.1 200" in reply else reply
            self.assertEqual(status_of(final), 200, reply[:300])
            self.assertIn(b'"finish_reason"', final)
        stream = json.dumps({"prompt": "In the beginning", "max_tokens": 50, "temperature": 0, "stream": True}).encode()
        reply = exchange(self.port, post_bytes(b"/v1/completions", stream, self.auth), half_close=True)
        self.assertIn(b"data: [DONE]", reply)

    # 11. Request ids are printable ASCII or replaced; logs escape control
    # bytes; API-key schemes are case-insensitive; auth comes before routing.
    def test_request_id_is_sanitised_and_logs_escaped(self):
        def rid(value):
            reply = exchange(self.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Request-Id: " + value + b"\r\n\r\n")
            return status_of(reply), head_of(reply).get("x-request-id", "")

        self.assertEqual(rid(b"abc-123 OK"), (200, "abc-123 OK"))
        for bad in (b"caf\xc3\xa9", b"\xc2\x9b31m", b"a\x7fb", b"x" * 200):
            status, got = rid(bad)
            if status == 200:  # the parser may refuse some bytes outright (400): also fine
                self.assertRegex(got, r"^[0-9a-f]{24}$", bad)
            else:
                self.assertEqual(status, 400)
        exchange(self.port, b"GET /v1/\xc2\x9b31mmodels HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + self.auth + b"\r\n")
        time.sleep(0.2)
        log = self.server.log()
        self.assertIn("\\xc2\\x9b31mmodels", log)
        self.assertNotIn("\x9b", log)

    def test_auth_scheme_and_order(self):
        def status(method, path, auth):
            data = b"%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n%s\r\n" % (method, path, auth)
            return status_of(exchange(self.port, data))

        for scheme in (b"Bearer", b"bearer", b"BEARER"):
            self.assertEqual(status(b"GET", b"/v1/models", b"Authorization: " + scheme + b" sekret\r\n"), 200, scheme)
        self.assertEqual(status(b"GET", b"/v1/models", b"Authorization: Bearer sekret2\r\n"), 401)
        self.assertEqual(status(b"GET", b"/v1/models", b"Authorization: Basic sekret\r\n"), 401)
        self.assertEqual(status(b"GET", b"/v1/models", b"Authorization: sekret\r\n"), 401)
        # Without the key nothing about routes shows: no 404, no 405.
        self.assertEqual(status(b"GET", b"/no/such/path", b""), 401)
        self.assertEqual(status(b"DELETE", b"/v1/models", b""), 401)
        self.assertEqual(status(b"GET", b"/no/such/path", self.auth), 404)
        self.assertEqual(status(b"DELETE", b"/v1/models", self.auth), 405)
        self.assertEqual(status(b"GET", b"/health", b""), 200)


class Prompts(unittest.TestCase):
    # 5. Prompt text over the byte budget (by default 64 bytes per token of the
    # 512-token context: 32768) is a 400 naming the limit, before tokenization:
    # an 8 MiB prompt (1.3 GB of RSS to tokenize) raises the peak RSS by < 64 MiB
    # (its body, parsed and copied a few times).
    def test_prompt_over_the_byte_budget_is_refused_before_tokenizing(self):
        with Server("--max-body-bytes", str(16 << 20)) as server:
            huge = "In the beginning " * ((8 << 20) // 17)
            for path, body, param in (("/v1/completions", {"prompt": huge, "max_tokens": 1}, "prompt"),
                                      ("/v1/completions", {"prompt": ["x", huge], "max_tokens": 1}, "prompt[1]"),
                                      ("/v1/chat/completions", {"messages": [{"role": "user", "content": huge}]}, "messages"),
                                      ("/tokenize", {"prompt": huge}, "prompt")):
                peak = vm(server.proc.pid, "VmHWM")
                status, _, reply = server.post(path, body)
                self.assertLess(vm(server.proc.pid, "VmHWM") - peak, 64, path)
                self.assertEqual(status, 400, reply)
                self.assertEqual(reply["error"]["code"], "prompt_too_large")
                self.assertEqual(reply["error"]["param"], param)
                self.assertIn("32768", reply["error"]["message"])
            # Under the budget, text is tokenized (and then held to the context).
            status, _, reply = server.post("/v1/completions", {"prompt": "In the beginning " * 1500, "max_tokens": 1})
            self.assertEqual(reply["error"]["code"], "context_length_exceeded", reply)


class Pressure(unittest.TestCase):
    # 1. At --max-connections, idle keep-alive connections make room for new
    # clients: with 40 allowed and 60 idle opened, a canary still answers within 2 s.
    def test_idle_connections_are_closed_first_at_the_limit(self):
        with Server("--max-connections", "40") as server:
            idle = []
            try:
                for _ in range(60):
                    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                    idle.append(s)
                    time.sleep(0.002)
                time.sleep(0.3)
                self.assertIsNotNone(canary(server.port))
                # The oldest idle connections were the ones closed.
                closed = [i for i, s in enumerate(idle) if read_all(s, 0.2).endswith(b"ok\"}") or not _alive(s)]
                self.assertTrue(closed and min(closed) == 0, closed)
            finally:
                for s in idle:
                    s.close()


    # Probes have workers of their own: with every one of --http-threads 4 held by
    # a stream its client does not read, a /tokenize waits for a worker, and
    # /health on a new connection still answers within 2 s.
    def test_health_answers_while_every_worker_is_busy(self):
        with Server("--http-threads", "4", "--write-timeout", "60") as server:
            streams = [stalled_stream(server.port) for _ in range(4)]
            try:
                self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") >= 4 * 16, 20))
                waiting = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                waiting.sendall(post_bytes(b"/tokenize", b'{"prompt": "In the beginning"}'))
                waiting.settimeout(1)
                with self.assertRaises(socket.timeout):  # no worker free for it
                    waiting.recv(1)
                self.assertIsNotNone(canary(server.port))
                waiting.close()
            finally:
                for s in streams:
                    s.close()


def _alive(sock):
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def words(n, seed=7):
    """n distinct lower-case words of 4-12 letters."""
    import random
    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 12))))
    return sorted(out)


def completion_seconds(port, timeout=2.0):
    """Seconds a small unconstrained completion on a new connection takes, or None past `timeout`."""
    t = time.time()
    try:
        reply = exchange(port, post_bytes(b"/v1/completions", BODY, b"Connection: close\r\n"), timeout=timeout)
    except OSError:
        return None
    return time.time() - t if status_of(reply) == 200 else None


class Constraints(unittest.TestCase):
    """7. Output constraints: compiled off the HTTP workers and the decoding step,
    within a time and size budget, abandoned when their client leaves, and kept
    within a byte budget."""

    def post_in_background(self, server, body, path="/v1/completions"):
        result = {}

        def run():
            result["reply"] = server.post(path, body, timeout=120)
        t = threading.Thread(target=run)
        t.start()
        return t, result

    # A 100k-way choice and a 20k-property schema (of which half optional; it compiled
    # for minutes) are answered, while a small completion on another connection
    # keeps answering within 2 s throughout.
    def test_wide_choice_and_huge_schema_do_not_stall_other_requests(self):
        choice = words(100000)
        props = {f"field_{i}": {"type": "integer"} for i in range(20000)}
        schema = {"type": "object", "properties": props, "required": [f"field_{i}" for i in range(0, 20000, 2)]}
        with Server("--max-body-bytes", str(16 << 20)) as server:
            self.assertIsNotNone(completion_seconds(server.port, 10))  # warm
            for body in ({"prompt": "In the beginning", "max_tokens": 32, "temperature": 0, "guided_choice": choice},
                         {"prompt": "In the beginning", "max_tokens": 8, "temperature": 0,
                          "response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}}):
                t, result = self.post_in_background(server, body)
                worst = 0.0
                while t.is_alive():
                    took = completion_seconds(server.port)
                    self.assertIsNotNone(took, "a small completion waited over 2 s: " + server.log()[-1500:])
                    worst = max(worst, took)
                t.join()
                status, _, reply = result["reply"]
                self.assertEqual(status, 200, reply)
                if "guided_choice" in body:
                    self.assertTrue(reply["choices"][0]["text"] in set(choice), reply)  # (not the 100k words)
                else:
                    self.assertTrue(reply["choices"][0]["text"].replace(" ", "").startswith('{"field_'), reply)

    # A constraint over the time budget is a 400 naming it, and over the size
    # budget a 400 naming that one; neither is kept.
    def test_budgets_are_400s_naming_the_limit(self):
        with Server("--constraint-timeout", "0.001", "--constraint-max-elements", "100000",
                    "--max-body-bytes", str(16 << 20)) as server:
            status, _, reply = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2,
                                                               "guided_choice": words(100000, seed=3)})
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["code"], "constraint_too_slow")
            self.assertIn("--constraint-timeout", reply["error"]["message"])
            self.assertEqual(reply["error"]["param"], "guided_choice")
            status, _, reply = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2,
                                                               "guided_regex": "".join(c + "{10000}" for c in "abcdefghijk")})
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["code"], "constraint_too_large")
            self.assertIn("--constraint-max-elements", reply["error"]["message"])
            self.assertIn("100000", reply["error"]["message"])
            self.assertEqual(metric(server.metrics(), "loom:constraint_cache_entries"), 0)
            self.assertIsNotNone(completion_seconds(server.port))

    # A client that leaves while its constraint compiles stops the compilation: with
    # one compile thread, the next constraint compiles at once, not after the first.
    def test_compilation_stops_when_its_client_leaves(self):
        with Server("--constraint-timeout", "60", "--max-body-bytes", str(16 << 20)) as server:
            slow = json.dumps({"prompt": "x", "max_tokens": 2, "guided_choice": words(100000, seed=5)}).encode()
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(post_bytes(b"/v1/completions", slow))
            time.sleep(0.5)  # it is compiling
            s.close()
            self.assertTrue(wait_until(lambda: "client_disconnected" in server.log(), 10), server.log()[-1500:])
            t = time.time()
            status, _, reply = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2, "guided_regex": "[ab]+"})
            self.assertEqual(status, 200, reply)
            self.assertLess(time.time() - t, 5, "the next constraint waited for the abandoned one")
            self.assertEqual(metric(server.metrics(), "loom:constraint_cache_entries"), 1)  # the abandoned one is not kept

    # 400 distinct regexes kept +950 MB forever: with --constraint-cache-mb 1, 200
    # distinct ones leave the cache within 1 MiB and evict the oldest.
    def test_compiled_constraints_stay_within_the_cache_budget(self):
        with Server("--constraint-cache-mb", "1") as server:
            for i in range(200):
                status, _, reply = server.post("/v1/completions", {"prompt": "x", "max_tokens": 1,
                                                                   "guided_regex": f"r{i}[a-z]{{1,8}}( [a-z]+)*"})
                self.assertEqual(status, 200, reply)
            m = server.metrics()
            self.assertLessEqual(metric(m, "loom:constraint_cache_bytes"), 1 << 20)
            self.assertGreater(metric(m, "loom:constraints_evicted_total"), 0)
            self.assertEqual(metric(m, "loom:constraints_compiled_total"), 200)
            self.assertLess(metric(m, "loom:constraint_cache_entries"), 200)


class Signals(unittest.TestCase):
    # 10. SIGTERM with an idle keep-alive connection, a client dripping a header
    # and a stream its client does not read: the process exits 0 within
    # --shutdown-timeout (1 s) + 2 s.
    def test_sigterm_exits_promptly_with_idle_and_dripping_clients(self):
        server = Server("--shutdown-timeout", "1")
        try:
            stalled = stalled_stream(server.port)
            self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") > 0, 10))
            idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(status_of(idle.recv(4096)), 200)
            drip = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            drip.sendall(b"GET /hea")
            t = time.time()
            server.proc.send_signal(signal.SIGTERM)
            self.assertEqual(server.proc.wait(10), 0, server.log())
            self.assertLess(time.time() - t, 1 + 2)
            self.assertEqual(read_all(idle, 1), b"")  # closed, not left hanging
            stalled.close()
        finally:
            server.stop()

    # 10. A second SIGTERM during the drain exits at once (128 + 15): the drain
    # waits for a stream its client does not read, for up to 60 s.
    def test_second_signal_exits_at_once(self):
        server = Server("--shutdown-timeout", "60", "--write-timeout", "60")
        try:
            s = stalled_stream(server.port)
            self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") > 0, 10))
            time.sleep(1)  # the socket buffers fill and the stream's writes block
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            self.assertIsNone(server.proc.poll(), "the drain ended early: the stream was not stalled")
            t = time.time()
            server.proc.send_signal(signal.SIGTERM)
            self.assertEqual(server.proc.wait(10), 128 + signal.SIGTERM, server.log())
            self.assertLess(time.time() - t, 2.0)
            s.close()
        finally:
            server.stop()


class SlowReaders(unittest.TestCase):
    # A client that stops reading a stream is cut off after --write-timeout (2 s)
    # once its socket buffers are full, and its sequences are aborted: 64 choices
    # fill the buffers in well under a second, and generating them all takes far
    # longer than the 10 s the test waits for the abort.
    def test_stream_not_read_is_cancelled_after_the_write_timeout(self):
        with Server("--write-timeout", "2") as server:
            s = stalled_stream(server.port, n=64)
            try:
                self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") > 0, 10))
                self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 0, 10),
                                server.log()[-2000:])
                self.assertEqual(metric(server.metrics(), "loom:request_success_total", finished_reason="abort"), 64)
                # The access log line is written once the handler has drained the
                # cancelled job, which can come after the metrics count the abort.
                self.assertTrue(wait_until(lambda: "status=client disconnected" in server.log(), 10),
                                server.log()[-2000:])
            finally:
                s.close()


    # 8. Output a client has not read yet is bounded: 16 choices × 500 tokens with
    # 20 logprobs each generate to the end while the stream is stalled, and the
    # RSS grows by less than 100 MiB (every step's cumulative copy queued: +370 MiB).
    def test_unread_stream_output_does_not_pile_up(self):
        with Server("--write-timeout", "60") as server:
            base = vm(server.proc.pid, "VmRSS")
            s = stalled_stream(server.port)
            try:
                self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") > 0, 10))
                self.assertTrue(wait_until(lambda: metric(server.metrics(), "loom:num_requests_running") == 0, 60))
                self.assertLess(vm(server.proc.pid, "VmRSS") - base, 100)
            finally:
                s.close()


def stalled_stream(port, n=16):
    """A stream of ~8 MB (16 choices, 20 logprobs a token) to a client with a 4 KiB
    receive buffer that never reads: the server's writes block once buffers fill."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    body = json.dumps({"prompt": "In the beginning", "max_tokens": 500, "n": n, "logprobs": 20, "temperature": 0.8,
                       "seed": 1, "stream": True}).encode()
    s.sendall(post_bytes(b"/v1/completions", body))
    return s


if __name__ == "__main__":
    unittest.main()
