"""GGUF files loom writes run in llama.cpp with loom's greedy tokens.

For each type `loom convert --to gguf` makes, the bundled model is converted and both
engines decode the same prompt ids greedily: llama.cpp through node-llama-cpp's
prebuilt CPU build (tests/oracles/llama_cpp_greedy.mjs), loom through `loom generate`.
The tokens must be equal: the oracle shares no code with loom's reader, kernels or
writer. Environment: LOOM_BIN (the loom CLI), LOOM_SOURCE_DIR.
"""
import json
import os
import subprocess
import tempfile
import unittest

SOURCE = os.environ["LOOM_SOURCE_DIR"]
LOOM = os.environ["LOOM_BIN"]
MODEL = os.path.join(SOURCE, "models", "loom-kjv-tiny")
RUNNER = os.path.join(SOURCE, "tests", "oracles", "llama_cpp_greedy.mjs")
NEW_TOKENS = 24
PROMPTS = ["1,2,3,4", "258,465,268,258,341,17,99,402,7,51,77,300"]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r.stdout


class LlamaCppGreedy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, quantize):
        path = os.path.join(self.tmp.name, f"tiny-{quantize or 'bf16'}.gguf")
        cmd = [LOOM, "convert", "--model", MODEL, "--to", "gguf", "--out", path]
        if quantize:
            cmd += ["--quantize", quantize]
        run(cmd)
        for ids in PROMPTS:
            theirs = json.loads(run(["node", RUNNER, path, ids, str(NEW_TOKENS)]))
            out = run([LOOM, "generate", "--model", path, "--prompt-ids", ids,
                       "--max-new-tokens", str(NEW_TOKENS), "--json", "--threads", "1"])
            ours = json.loads(out.strip().splitlines()[-1])["generated_ids"]
            self.assertEqual(len(theirs), NEW_TOKENS)
            self.assertEqual(ours, theirs, f"{quantize or 'unquantized'} prompt {ids}")

    def test_unquantized(self):
        self.check(None)

    def test_q8_0(self):
        self.check("q8_0")

    def test_q4_0(self):
        self.check("q4_0")

    def test_q4_k_m(self):
        self.check("q4_k_m")

    def test_q5_k_m(self):
        self.check("q5_k_m")

    def test_q6_k(self):
        self.check("q6_k")


class LoomWrittenTypes(unittest.TestCase):
    """The types loom's reader got with llama.cpp's other weight types (issue 52) and loom
    now writes too: the same tokens as llama.cpp, or a parting only at a near tie of
    llama.cpp's with the same tokens on its own dequantization of the file (the rule and
    its check are test_llama_cpp_types.compare_files')."""

    def test_q4_1_q5_0_q5_1_iq4_nl_mxfp4(self):
        import test_llama_cpp_types as types
        with tempfile.TemporaryDirectory() as tmp:
            files = {}
            for quantize in ["q4_1", "q5_0", "q5_1", "iq4_nl", "mxfp4"]:
                files[quantize] = os.path.join(tmp, f"tiny-{quantize}.gguf")
                run([LOOM, "convert", "--model", MODEL, "--to", "gguf", "--out", files[quantize], "--quantize", quantize])
            types.compare_files(self, files)


if __name__ == "__main__":
    unittest.main()
