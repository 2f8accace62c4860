"""The chat page (GET /) in headless Chromium (Debian's `chromium`, installed by
scripts/install-deps --test), driven over the DevTools protocol by chat_page_client.js:
the page loads with --api-key on, sends a message, and its streamed reply (and the
folded reasoning of a thinking template) equals what the API streams for the same
request; every request the page made went to the server; a screenshot is saved."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from serve_harness import Server
from test_structured import family_model

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "Who made the heavens?"
SHOTS = os.environ.get("LOOM_BINARY_DIR", tempfile.gettempdir())


def streamed_reply(server, max_tokens):
    status, events = server.stream("/v1/chat/completions",
                                   {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
                                    "temperature": 0, "top_p": 1, "stream": True},
                                   headers={"Authorization": "Bearer page-key"})
    assert status == 200, events
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    return "".join(d.get("content") or "" for d in deltas), "".join(d.get("reasoning_content") or "" for d in deltas)


class ChatPage(unittest.TestCase):
    def page(self, server, max_tokens, name, stop_after=None):
        self.assertIsNotNone(shutil.which("chromium"), "install Debian's chromium (scripts/install-deps --test)")
        shot = os.path.join(SHOTS, f"chat_page_{name}.png")
        proc = subprocess.run(["node", "--experimental-websocket", "--no-warnings", os.path.join(HERE, "chat_page_client.js"),
                               str(server.port), "page-key", PROMPT, str(max_tokens), shot],
                              capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, **({"PAGE_CLIENT_STOP_AFTER": str(stop_after)} if stop_after else {})))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr + server.log()[-2000:])
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        print(f"chat page screenshot: {shot}")
        origin = f"http://127.0.0.1:{server.port}/"
        for url in result["urls"]:
            self.assertTrue(url.startswith(origin), url)  # nothing leaves the server
        self.assertIn(origin + "v1/chat/completions", result["urls"])
        self.assertEqual(result["state"], "done", result)
        self.assertEqual(result["model"], "kjv")
        return result

    def test_page_reply_equals_the_api(self):
        with Server("--api-key", "page-key", "--served-model-name", "kjv") as server:
            status, headers, body = server.request("GET", "/")  # no key needed for the page itself
            self.assertEqual(status, 200)
            self.assertTrue(headers["content-type"].startswith("text/html"))
            self.assertIn("default-src 'none'", headers["content-security-policy"])
            self.assertNotIn("https://", body)
            result = self.page(server, 16, "plain", stop_after=450)
            content, _ = streamed_reply(server, 16)
            self.assertGreater(len(content), 0)
            self.assertEqual(result["content"], content)
            self.assertEqual(result["reasoning"], "")
            # Stop ended the second turn's stream early, and the server cancelled its request.
            self.assertEqual(result["stopped"], {"state": "stopped", "sendEnabled": True})
            stopped = [l for l in server.log().splitlines() if "POST /v1/chat/completions" in l][1]
            self.assertIn("status=client disconnected", stopped)
            completion = int(stopped.split("completion_tokens=")[1].split()[0]) if "completion_tokens=" in stopped else 0
            self.assertLess(completion, 450)

    def test_page_folds_reasoning(self):
        tmp = tempfile.mkdtemp(prefix="loom-chat-page-")
        try:
            model = family_model(tmp, "deepseek_r1_distill_qwen")
            with Server("--api-key", "page-key", "--served-model-name", "kjv", model=model) as server:
                result = self.page(server, 12, "reasoning")
                content, reasoning = streamed_reply(server, 12)
                self.assertGreater(len(reasoning), 0)
                self.assertEqual(result["reasoning"], reasoning)
                self.assertEqual(result["content"], content)
                self.assertTrue(result["folded"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
