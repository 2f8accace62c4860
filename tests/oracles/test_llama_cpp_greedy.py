"""GGUF files loom writes run in llama.cpp with loom's greedy tokens.

For each type `loom convert --to gguf` makes, the bundled model is converted and both
engines decode the same prompt ids greedily: llama.cpp through node-llama-cpp's
prebuilt CPU build (tests/oracles/llama_cpp_greedy.mjs), loom through `loom generate`.
The tokens must be equal: the oracle shares no code with loom's reader, kernels or
writer. The same holds for the parity fixtures of architectures the bundled model does
not cover (Qwen3-MoE: llama.cpp's qwen3moe; gpt-oss: llama.cpp's gpt-oss; Gemma 3: llama.cpp's gemma3). Environment: LOOM_BIN (the loom CLI),
LOOM_SOURCE_DIR, LOOM_FIXTURES_DIR (the parity fixtures, scripts/make-fixtures).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.environ["LOOM_SOURCE_DIR"]
LOOM = os.environ["LOOM_BIN"]
FIXTURES = os.environ.get("LOOM_FIXTURES_DIR", os.path.join(SOURCE, "build", "fixtures"))
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


def with_byte_level_vocabulary(fixture, out):
    """A copy of a parity fixture that llama.cpp can load: it takes its vocabulary size from the
    tokenizer, and node-llama-cpp needs one to decode. The bundled model's byte-level BPE cut to the
    fixture's vocab_size (256 bytes, the merges making the next ids, an end-of-text token last,
    made the EOS on both sides)."""
    shutil.copytree(fixture, out)
    with open(os.path.join(out, "config.json")) as f:
        n = json.load(f)["vocab_size"]
    with open(os.path.join(MODEL, "tokenizer.json")) as f:
        tok = json.load(f)
    eos = n - 1
    model = tok["model"]
    model["vocab"] = {piece: i for piece, i in model["vocab"].items() if i < eos}
    model["merges"] = model["merges"][:eos - 256]
    if len(model["vocab"]) != eos:
        raise AssertionError(f"the bundled vocabulary has no {eos} ids in a row")
    end = next(t for t in tok["added_tokens"] if t["content"] == "<|end_of_text|>")
    tok["added_tokens"] = [dict(end, id=eos)]
    tok["post_processor"] = None  # it would add the bundled model's BOS, an id past the vocabulary
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": end["content"], "bos_token": None}, f)
    for name in ("config.json", "generation_config.json"):
        with open(os.path.join(out, name)) as f:
            c = json.load(f)
        c["eos_token_id"], c["bos_token_id"] = eos, None
        with open(os.path.join(out, name), "w") as f:
            json.dump(c, f)


class FixtureGreedy:
    """A parity fixture with a byte-level vocabulary, converted by loom, decoded by both engines
    from the fixture's own prompt (FIXTURE, QUANTIZED_TOKENS set by the test class)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "model")
        with_byte_level_vocabulary(os.path.join(FIXTURES, cls.FIXTURE), cls.model)
        with open(os.path.join(FIXTURES, cls.FIXTURE, "reference.json")) as f:
            cls.prompt = ",".join(str(i) for i in json.load(f)["prompt_ids"])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, quantize):
        path = os.path.join(self.tmp.name, f"{self.FIXTURE}-{quantize or 'f32'}.gguf")
        cmd = [LOOM, "convert", "--model", self.model, "--to", "gguf", "--out", path]
        run(cmd + (["--quantize", quantize] if quantize else []))
        n = self.QUANTIZED_TOKENS if quantize else NEW_TOKENS
        theirs = json.loads(run(["node", RUNNER, path, self.prompt, str(n)]))
        out = run([LOOM, "generate", "--model", path, "--prompt-ids", self.prompt,
                   "--max-new-tokens", str(n), "--json", "--threads", "1"])
        ours = json.loads(out.strip().splitlines()[-1])["generated_ids"]
        self.assertEqual(len(theirs), n)
        self.assertEqual(ours, theirs, f"{self.FIXTURE} {quantize or 'unquantized'}")


class LlamaCppGreedyQwen3Moe(FixtureGreedy, unittest.TestCase):
    """qwen3moe: q/k norms, every layer sparse, top-k renormalised, experts quantized like the rest.
    The prompt is the fixture's own, picked by make_fixtures for clear f32 greedy margins. Random
    weights still leave near ties: each engine rounds activations its own way for quantized
    matmuls, which moves this fixture's logits by up to ~0.7 (loom's exact reference backend
    against its kernels, q4_k_m) where some greedy margins are below 0.1, so quantized files are
    compared over their first QUANTIZED_TOKENS tokens (q4_k_m first parts at token 22); a wrong
    expert, row or scale parts at the first."""
    FIXTURE = "qwen3_moe-f32"
    QUANTIZED_TOKENS = 16

    def test_unquantized(self):
        self.check(None)

    def test_q8_0(self):
        self.check("q8_0")

    def test_q4_k_m(self):
        self.check("q4_k_m")


def with_llama_cpp_yarn(model):
    """gpt-oss's config says YaRN with truncate false (Transformers keeps the correction range
    fractional); ggml's YaRN always rounds it outwards, and loom writes the checkpoint's choice into
    the GGUF under a key llama.cpp ignores. On the gpt_oss fixture the two rotations part the greedy
    tokens after ~9 tokens, so the engines are compared on the rotation llama.cpp has: truncate true."""
    path = os.path.join(model, "config.json")
    with open(path) as f:
        c = json.load(f)
    c["rope_scaling"] = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True,
                         "original_max_position_embeddings": 4096}
    with open(path, "w") as f:
        json.dump(c, f)


class LlamaCppGreedyGptOss(unittest.TestCase):
    """gpt-oss (llama.cpp's gpt-oss): attention sinks, even layers sliding (window 16 here, crossed
    by the prompt), biased router and experts, a softmax over the top-k logits, the clamped SwiGLU,
    YaRN (with_llama_cpp_yarn). The gpt_oss_mxfp4 file holds the experts as OpenAI ships them,
    written as loom loaded them (no --quantize): llama.cpp gets the same MXFP4 blocks. llama.cpp
    stops at the fixture's EOS without listing it; loom lists it, then stops. Both engines round
    the activations entering quantized matmuls to int8 blocks, each its own way, and the clamped
    SwiGLU's outputs (up to ~56, most near 0) lose much in that: logits move by 1-2 (loom's optimized
    backend against PyTorch on the gpt_oss_mxfp4 fixture, tests/models/gpt_oss_test.cc), more than the
    fixture's greedy margins, so the MXFP4 file is compared over QUANTIZED_TOKENS (they part at token 17),
    and files re-quantized by --quantize (q8_0 parts at token 5) are not compared here."""
    QUANTIZED_TOKENS = 16

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, fixture, quantize, n):
        model = os.path.join(self.tmp.name, f"{fixture}-{quantize}")
        with_byte_level_vocabulary(os.path.join(FIXTURES, fixture), model)
        with_llama_cpp_yarn(model)
        with open(os.path.join(FIXTURES, fixture, "reference.json")) as f:
            prompt = ",".join(str(i) for i in json.load(f)["prompt_ids"])
        with open(os.path.join(model, "config.json")) as f:
            eos = json.load(f)["eos_token_id"]
        path = model + ".gguf"
        run([LOOM, "convert", "--model", model, "--to", "gguf", "--out", path] + (["--quantize", quantize] if quantize else []))
        theirs = json.loads(run(["node", RUNNER, path, prompt, str(n)]))
        out = run([LOOM, "generate", "--model", path, "--prompt-ids", prompt,
                   "--max-new-tokens", str(n), "--json", "--threads", "1"])
        ours = json.loads(out.strip().splitlines()[-1])["generated_ids"]
        if ours and ours[-1] == eos and len(ours) <= n:
            ours = ours[:-1]
        else:
            self.assertEqual(len(theirs), n)
        self.assertGreaterEqual(len(theirs), 12)
        self.assertEqual(ours, theirs, f"{fixture} {quantize or 'as loaded'}")

    def test_unquantized(self):
        self.check("gpt_oss-f32", None, NEW_TOKENS)

    def test_mxfp4_experts_as_shipped(self):
        self.check("gpt_oss_mxfp4-f32", None, self.QUANTIZED_TOKENS)


class LlamaCppGreedyGemma3(FixtureGreedy, unittest.TestCase):
    """gemma3: (1 + w) norms stored plus one (the q/k norms too), five sliding layers over a 16-token
    window then a full one (llama.cpp's fixed pattern), the sliding layers rotating with base 10k
    and the full one with base 1e6 and linear scaling, GeGLU, sqrt(hidden) embeddings. The 64-token
    prompt is longer than the window, so the sliding layers' masks and RoPE base decide the tokens.
    The f32 reference's top-1/top-2 margin falls to 0.05 at token 8 and 0.03 at token 9: q8_0's
    rounding of weights and activations (each engine its own way) may pick either there, so the
    q8_0 file is compared over the 8 tokens before that near tie."""
    FIXTURE = "gemma3-f32"
    QUANTIZED_TOKENS = 8

    def test_unquantized(self):
        self.check(None)

    def test_q8_0(self):
        self.check("q8_0")


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
