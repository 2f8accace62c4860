"""Starts `loom serve` on 127.0.0.1 with an ephemeral port and talks to it with
http.client: JSON requests, server-sent event streams, raw sockets. Every server
is stopped by the harness (SIGTERM, then SIGKILL) and every call has a timeout."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

LOOM = os.environ.get("LOOM_BIN", os.path.join(os.environ.get("LOOM_BINARY_DIR", "build"), "loom"))
SOURCE_DIR = os.environ.get("LOOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(SOURCE_DIR, "models", "loom-kjv-tiny")


class Server:
    def __init__(self, *args, model=DEFAULT_MODEL, env=None, ready=True, timeout=60):
        self.args = [LOOM, "serve", "--port", "0", "--model", model, *args]
        e = dict(os.environ)
        e.setdefault("LOOM_NUM_THREADS", "1")
        if env:
            e.update(env)
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e)
        self.lines = []
        self._port_seen = threading.Event()
        self._ready_seen = threading.Event()
        self.port = None
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._port_seen.wait(timeout):
            self.stop()
            raise RuntimeError("loom serve did not start: " + "".join(self.lines))
        if ready and not self._ready_seen.wait(timeout):
            self.stop()
            raise RuntimeError("loom serve did not become ready: " + "".join(self.lines))

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._port_seen.set()
            if "ready on http://" in line:
                self._ready_seen.set()

    def log(self):
        return "".join(self.lines)

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict with lower-case names, parsed JSON or raw text)."""
        c = self.conn(timeout)
        try:
            data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            return r.status, hdrs, parsed
        finally:
            c.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body, headers=None, timeout=60):
        """(status, list of decoded events; the last is the string '[DONE]')."""
        c = self.conn(timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            c.request("POST", path, body=json.dumps(body), headers=h)
            r = c.getresponse()
            if r.status != 200:
                return r.status, json.loads(r.read())
            assert r.getheader("Content-Type", "").startswith("text/event-stream"), r.getheaders()
            return 200, parse_sse(r.read().decode("utf-8"))
        finally:
            c.close()

    def metrics(self):
        status, _, text = self.request("GET", "/metrics")
        assert status == 200, text
        return parse_metrics(text)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def parse_sse(text):
    events = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block or block.startswith(":"):  # a comment (the server's check on a half-closed client)
            continue
        if block.startswith("event: "):  # a named event (Anthropic's, Responses'): the name repeats data's type
            name, block = block.split("\n", 1)
            assert json.loads(block[len("data: "):]).get("type") == name[len("event: "):], repr(block)
        assert block.startswith("data: "), repr(block)
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def parse_metrics(text):
    """{'name{labels}': value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def metric(metrics, name, **labels):
    """The value of one series; labels beyond model_name must match."""
    for key, value in metrics.items():
        if not key.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            return value
    raise KeyError(name + str(labels))


def loom_json(*args, timeout=120):
    out = subprocess.run([LOOM, *args], capture_output=True, timeout=timeout, check=True)
    return json.loads(out.stdout)


def wait_until(predicate, timeout=10.0, interval=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def raw_exchange(port, data, timeout=10.0, half_close=False, method=None):
    """Sends raw bytes, returns the parsed http.client response (status, headers, body) or None
    when the server closed the connection without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        r = http.client.HTTPResponse(s, method=method or data.split(b" ", 1)[0].decode("latin-1"))
        try:
            r.begin()
        except http.client.RemoteDisconnected:
            return None
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        s.close()
