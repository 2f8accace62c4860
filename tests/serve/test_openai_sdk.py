"""The official OpenAI SDK for Node (npm `openai`, installed by scripts/install-test-oracles)
drives `loom serve` unchanged."""
import os
import subprocess
import unittest

from serve_harness import SOURCE_DIR, Server

NODE_MODULES = os.path.join(SOURCE_DIR, ".cache", "npm", "node_modules")


class OpenAiSdk(unittest.TestCase):
    def test_sdk_against_the_server(self):
        self.assertTrue(os.path.isdir(os.path.join(NODE_MODULES, "openai")), "run scripts/install-test-oracles")
        with Server("--api-key", "sdk-key", "--served-model-name", "kjv") as server:
            env = dict(os.environ, NODE_PATH=NODE_MODULES)
            proc = subprocess.run(["node", os.path.join(os.path.dirname(__file__), "openai_sdk_client.js"), str(server.port), "kjv"],
                                  capture_output=True, text=True, timeout=120, env=env)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr + server.log())
            self.assertIn("all checks passed", proc.stdout)


if __name__ == "__main__":
    unittest.main()
