"""`loom serve` under mpirun with --tensor-parallel 2: rank 0 serves what one process
serves, SIGTERM to it ends every rank cleanly, and a rank that stops answering or
dies fails the requests in flight, turns the server unavailable and ends the job in
bounded time naming the rank. Needs LOOM_BIN and Debian's OpenMPI."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import unittest

from test_tp_cli import ENV, LOOM, MODEL, mpirun, rank_pids, running

PROMPT = "And God said"


class TpServer:
    """mpirun -np 2 loom serve on 127.0.0.1, an ephemeral port; every process is ended by the test."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen(mpirun(2, "serve", "--port", "0", "-m", MODEL, "--tensor-parallel", "2",
                                            "--no-request-log", *extra),
                                     env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines, self.port = [], None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(60):
            self.kill()
            raise AssertionError("serve did not become ready: " + self.log())
        self.pids = rank_pids(self.proc.pid)
        assert sorted(self.pids) == [0, 1], (self.pids, self.log())

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            m = re.search(r"ready on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.ready.set()

    def log(self):
        return "".join(self.lines)

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(self, body, path="/v1/completions"):
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body),
                      headers={"Content-Type": "application/json", "Connection": "close"})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def health(self):
        """The status of /health, or None when nothing answers."""
        try:
            c = self.conn(5)
            c.request("GET", "/health")
            return c.getresponse().status
        except OSError:
            return None

    def wait(self, timeout):
        """Seconds until mpirun ended (it is killed, with every rank, past `timeout`)."""
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return time.monotonic() - t0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        for pid in getattr(self, "pids", {}).values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)

    def assert_all_ended(self):
        for rank, pid in self.pids.items():
            self.proc.wait(10)
            deadline = time.monotonic() + 10  # mpirun reaps its ranks as it ends
            while running(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not running(pid), f"rank {rank} (pid {pid}) still running"


def stream_first_event(server, body):
    """Opens a stream, returns (response, the first event's JSON) once generation is under way.
    The connection closes when the response is read to its end (Connection: close)."""
    c = server.conn()
    c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
              headers={"Content-Type": "application/json", "Connection": "close"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    return r, read_event(r)


def read_event(r):
    """The next event's payload ('[DONE]', a dict), or None when the stream was cut."""
    data = b""
    try:
        while not data.endswith(b"\n\n"):
            line = r.readline()
            if not line:
                return None
            data += line
    except (http.client.IncompleteRead, OSError):
        return None
    payload = data.decode().strip()[len("data: "):]
    return payload if payload == "[DONE]" else json.loads(payload)


def rest_of_stream(r):
    events = []
    while True:
        e = read_event(r)
        if e is None or e == "[DONE]":
            return events, e
        events.append(e)


class TensorParallelServe(unittest.TestCase):
    def test_rank_0_serves_what_one_process_generates_and_sigterm_ends_every_rank(self):
        one = json.loads(subprocess.run([LOOM, "generate", "-m", MODEL, "--prompt", PROMPT, "--max-new-tokens", "24",
                                         "--greedy", "--json"], check=True, env=ENV, capture_output=True,
                                        timeout=60).stdout)
        s = TpServer()
        try:
            status, body = s.post({"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["choices"][0]["text"], one["text"])
            self.assertEqual(body["usage"]["completion_tokens"], 24)
            # Streamed and concurrent requests take the same steps on both ranks.
            r, first = stream_first_event(s, {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
            status2, body2 = s.post({"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
            events, end = rest_of_stream(r)
            self.assertEqual(end, "[DONE]")
            self.assertEqual("".join(e["choices"][0]["text"] for e in [first] + events), one["text"])
            self.assertEqual((status2, body2["choices"][0]["text"]), (200, one["text"]))
            status3, body3 = s.post({"prompt": PROMPT, "max_tokens": 4, "temperature": 0.8, "n": 2})
            self.assertEqual(status3, 400, body3)
            self.assertIn("--tensor-parallel", body3["error"]["message"])
            self.assertEqual(s.health(), 200)
            os.kill(s.pids[0], signal.SIGTERM)  # the process listening: it drains, then ends the others
            elapsed = s.wait(30)
            self.assertLess(elapsed, 30, s.log())
            self.assertEqual(s.proc.returncode, 0, s.log())
            s.assert_all_ended()
        finally:
            s.kill()

    def _fault(self, sig, extra, expect):
        s = TpServer(*extra)
        try:
            # Eight sequences of 480 tokens: seconds of steps, so the fault lands mid-stream.
            r, first = stream_first_event(s, {"prompt": PROMPT, "max_tokens": 480, "temperature": 0, "n": 8})
            self.assertIn("choices", first)
            t0 = time.monotonic()
            os.kill(s.pids[1], sig)
            events, end = rest_of_stream(r)
            # A failed stream ends with an error event (then [DONE], as vLLM's), or is cut.
            error_event = events[-1] if events and "error" in events[-1] else None
            self.assertTrue(error_event is not None or end is None,
                            f"the stream completed although rank 1 was gone: {end} {events[-1:]}")
            # After the fault: 503 while the server still answers, then nothing.
            # (the server notices the broken group within 50 ms of the failed step)
            deadline = time.monotonic() + 5
            health = s.health()
            while health == 200 and time.monotonic() < deadline:
                time.sleep(0.02)
                health = s.health()
            self.assertIn(health, (503, None), s.log())
            elapsed = s.wait(30)
            text = s.log()
            self.assertLess(time.monotonic() - t0, 30, text)
            self.assertNotEqual(s.proc.returncode, 0, text)
            self.assertRegex(text, expect)
            s.assert_all_ended()
            print(f"\n{sig.name}: stream {'error event' if error_event else 'cut'}, /health {health}, job ended "
                  f"{time.monotonic() - t0:.1f} s after, exit {s.proc.returncode}", flush=True)
            return error_event, health, text
        finally:
            s.kill()

    def test_a_stopped_rank_fails_requests_in_flight_with_an_error_then_ends_the_job(self):
        error_event, health, text = self._fault(signal.SIGSTOP, ["--cpu-group-timeout", "3"],
                                                r"tensor-parallel rank 0: .* got no answer from rank 1 within 3 s")
        self.assertIsNotNone(error_event, "the stream ended without an error event: " + text)
        self.assertIn("rank 1", error_event["error"]["message"])
        self.assertEqual(health, 503, text)

    def test_a_killed_rank_ends_the_job_naming_it(self):
        # mpirun sees the death and ends rank 0 within its kill timeout: the
        # stream is cut (or gets an error event when rank 0's wait fails first).
        self._fault(signal.SIGKILL, [], r"rank 1 with PID \d+ .*(exited|signal)")


if __name__ == "__main__":
    unittest.main()
