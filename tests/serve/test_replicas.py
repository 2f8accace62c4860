"""Two `loom serve` replicas behind nginx (Debian's), as docs/scale_out.md sets them up:
requests spread over both (least_conn), streams pass through unbuffered, and when a
replica is killed mid-run its streams fail, new requests go to the other, and nothing
hangs. Everything listens on 127.0.0.1 ephemeral ports and is stopped by the test."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from serve_harness import Server, metric, parse_sse, wait_until

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NGINX_CONF = """
daemon off;
worker_processes 1;
{user}
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream loom {{
    least_conn;
    server 127.0.0.1:{a} max_fails=1 fail_timeout=30s;
    server 127.0.0.1:{b} max_fails=1 fail_timeout=30s;
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://loom;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 2;
    }}
  }}
}}
"""


class Replicas(unittest.TestCase):
    def setUp(self):
        self.a = Server("--served-model-name", "kjv")
        self.b = Server("--served-model-name", "kjv")
        self.dir = tempfile.mkdtemp(prefix="loom-nginx-")
        self.port = free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(d=self.dir, a=self.a.port, b=self.b.port, port=self.port,
                                      user="user root;" if os.geteuid() == 0 else ""))
        self.nginx = subprocess.Popen([NGINX, "-p", self.dir, "-c", conf], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        ok = wait_until(lambda: self._health() == 200, 10)
        if not ok:
            self.tearDown()
            self.fail("nginx did not come up: " + open(os.path.join(self.dir, "error.log")).read())

    def tearDown(self):
        if self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
        self.a.stop()
        self.b.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/health")
            status = c.getresponse().status
            c.close()
            return status
        except OSError:
            return None

    def post(self, body, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def served(self, server):
        m = server.metrics()
        return sum(metric(m, "loom:request_success_total", finished_reason=r) for r in ["stop", "length"])

    def test_requests_spread_and_streams_pass_unbuffered(self):
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            self.post({"prompt": "In the beginning", "max_tokens": 48, "temperature": 0.8, "seed": i})))
            for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual([s for s, _ in results], [200] * 16)
        self.assertGreater(self.served(self.a), 0)
        self.assertGreater(self.served(self.b), 0)
        self.assertEqual(self.served(self.a) + self.served(self.b), 16)

        # Events arrive as they are made, not when the stream ends.
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                  body=json.dumps({"prompt": "In the beginning", "max_tokens": 300, "temperature": 0.8, "seed": 1,
                                   "stream": True}))
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        start = time.time()
        first = r.readline()
        first_at = time.time() - start
        rest = r.read()
        total = time.time() - start
        c.close()
        self.assertTrue(first.startswith(b"data: "))
        self.assertLess(first_at, total / 2, (first_at, total))
        self.assertEqual(parse_sse((first + rest).decode())[-1], "[DONE]")

    def test_a_killed_replica_fails_its_streams_and_the_other_takes_over(self):
        outcomes = {}

        def stream(i):
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                          body=json.dumps({"prompt": "In the beginning", "max_tokens": 480, "temperature": 0.8,
                                           "seed": i, "stream": True}))
                r = c.getresponse()
                body = r.read()  # a cut stream raises IncompleteRead here
                events = parse_sse(body.decode())
                outcomes[i] = "done" if events[-1] == "[DONE]" else "cut"
            except (http.client.IncompleteRead, ConnectionError, OSError, ValueError, AssertionError) as e:
                outcomes[i] = "failed: " + type(e).__name__
            finally:
                c.close()

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        # least_conn puts one long stream on each replica.
        self.assertTrue(wait_until(lambda: metric(self.a.metrics(), "loom:num_requests_running") == 1 and
                                   metric(self.b.metrics(), "loom:num_requests_running") == 1, 10))
        self.a.proc.kill()
        start = time.time()
        for t in threads:
            t.join(60)
        self.assertLess(time.time() - start, 60, "a stream hung")
        self.assertEqual(sorted(outcomes.values())[0], "done", outcomes)  # the one on the live replica
        self.assertNotEqual(sorted(outcomes.values())[1], "done", outcomes)  # the one on the dead replica
        # New requests go to the survivor.
        before = self.served(self.b)
        for i in range(6):
            status, body = self.post({"prompt": "And God said", "max_tokens": 8, "temperature": 0})
            self.assertEqual(status, 200, body)
        self.assertEqual(self.served(self.b) - before, 6)

    def test_a_draining_replica_sends_new_requests_to_the_other(self):
        # SIGTERM: the replica answers 503 while it drains; nginx retries the other.
        long = threading.Thread(target=lambda: self.post({"prompt": "x", "max_tokens": 400, "temperature": 0.8, "seed": 5}))
        long.start()
        self.assertTrue(wait_until(lambda: metric(self.a.metrics(), "loom:num_requests_running") +
                                   metric(self.b.metrics(), "loom:num_requests_running") == 1, 10))
        busy = self.a if metric(self.a.metrics(), "loom:num_requests_running") == 1 else self.b
        other = self.b if busy is self.a else self.a
        busy.proc.send_signal(signal.SIGTERM)
        self.assertTrue(wait_until(lambda: busy.request("GET", "/health")[0] == 503, 5))
        before = self.served(other)
        for i in range(4):
            status, body = self.post({"prompt": "And God said", "max_tokens": 8, "temperature": 0})
            self.assertEqual(status, 200, body)
        self.assertEqual(self.served(other) - before, 4)
        long.join(120)
        self.assertEqual(busy.proc.wait(60), 0)


if __name__ == "__main__":
    unittest.main()
