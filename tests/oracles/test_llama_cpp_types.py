"""Every weight type llama.cpp publishes, in files llama.cpp's own quantizer made, runs in
loom with llama.cpp's greedy tokens on the same file.

The bundled model is converted to an f32 GGUF by `loom convert --to gguf`, then quantized
by llama.cpp (tests/oracles/llama_cpp_quantize.py):
- LlamaCppTypes: llama_model_quantize with each ftype's own mix of types, the token
  embeddings (and so the tied output head) in the ftype's type too;
- LlamaCppImatrixTypes: the types llama_model_quantize makes only with an importance
  matrix (IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M; here all ones) and MXFP4 (which
  llama.cpp's ftypes put only on MoE experts): the token embeddings (so the tied output
  head) and the first two layers' matrices through llama.cpp's ggml_quantize_chunk, the
  rest left f32 (quantizing the whole model to IQ1_M takes llama.cpp ~40 s here).
Both engines decode the same prompt ids greedily (llama.cpp in one node process,
tests/oracles/llama_cpp_greedy_many.mjs). Environment: LOOM_BIN, LOOM_SOURCE_DIR.

The tokens must be equal. Where they part, they may only part at a near tie: the two
engines quantize activations differently (loom to int8 with f32 scales, llama.cpp with
f16 ones, per its own block sizes), so where llama.cpp's two most probable next tokens
are closer than that noise, either engine may take either. The weaker property then
asserted, and printed, is: (1) at the first differing step, loom's token is llama.cpp's
second choice with a probability at least NEAR_TIE of its first's (0.9: within
0.105 nats); and (2) on llama.cpp's
own dequantization of the same file to f32 (its to_float on every block), both engines
give the same tokens, so loom reads every block of the file as llama.cpp does.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_cpp_quantize as lq  # noqa: E402

SOURCE = os.environ["LOOM_SOURCE_DIR"]
LOOM = os.environ["LOOM_BIN"]
MODEL = os.path.join(SOURCE, "models", "loom-kjv-tiny")
RUNNER = os.path.join(SOURCE, "tests", "oracles", "llama_cpp_greedy_many.mjs")
NEW_TOKENS = 16
PROMPTS = ["1,2,3,4", "258,465,268,258,341,17,99,402,7,51,77,300"]
NEAR_TIE = 0.9  # p(second) / p(first): within 0.105 nats

# name: (llama_ftype, the ggml type id it must put in the file)
LLAMA_FTYPES = {
    "Q4_1": (3, 3), "Q5_0": (8, 6), "Q5_1": (9, 7), "Q2_K": (10, 10), "Q3_K_M": (12, 11),
    "IQ4_NL": (25, 20), "IQ4_XS": (30, 23), "IQ3_S": (26, 21), "TQ1_0": (36, 34), "TQ2_0": (37, 35),
}
# name: ggml type id
CHUNK_TYPES = {"MXFP4": 39, "IQ3_XXS": 18, "IQ2_XXS": 16, "IQ2_XS": 17, "IQ2_S": 22, "IQ1_S": 19, "IQ1_M": 29}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r.stdout


def llama_cpp(runs):
    """{(path, ids): {"tokens": [...], "top": [[[id, p] x3] per step]}} from one node process."""
    out = json.loads(run(["node", RUNNER, str(NEW_TOKENS)] + [f"{p}:{ids}" for p, ids in runs]).strip().splitlines()[-1])
    return {(p, ids): out[f"{p}:{ids}"] for p, ids in runs}


def loom(path, ids):
    out = run([LOOM, "generate", "--model", path, "--prompt-ids", ids, "--max-new-tokens", str(NEW_TOKENS),
               "--json", "--threads", "1"])
    return json.loads(out.strip().splitlines()[-1])["generated_ids"]


def compare_files(test, files):
    """Both engines' greedy tokens on each {name: path}: equal, or parted only at a near tie
    with equal tokens on llama.cpp's own f32 dequantization of the file (the module's doc)."""
    runs = [(p, ids) for p in files.values() for ids in PROMPTS]
    theirs = llama_cpp(runs)
    parted = []
    for name, path in files.items():
        for ids in PROMPTS:
            ours, ref = loom(path, ids), theirs[(path, ids)]
            test.assertEqual(len(ref["tokens"]), NEW_TOKENS)
            if ours == ref["tokens"]:
                print(f"{name} prompt {ids}: same {NEW_TOKENS} tokens", file=sys.stderr)
                continue
            step = next(i for i, (a, b) in enumerate(zip(ours, ref["tokens"])) if a != b)
            (first, p1), (second, p2) = ref["top"][step][0], ref["top"][step][1]
            with test.subTest(type=name, prompt=ids):
                test.assertEqual(ours[step], second, f"{name}: loom's token {ours[step]} at step {step} is not "
                                 f"llama.cpp's second choice ({ref['top'][step]})")
                test.assertGreaterEqual(p2, NEAR_TIE * p1, f"{name}: no near tie at step {step}: {ref['top'][step]}")
            print(f"{name} prompt {ids}: parted at step {step} on a near tie (llama.cpp p={p1:.4f} for {first}, "
                  f"{p2:.4f} for loom's {second})", file=sys.stderr)
            parted.append((name, path))
    # Where they parted: both engines on llama.cpp's own f32 dequantization of the file.
    dequantized = {}
    for name, path in set(parted):
        dequantized[name] = path[:-len(".gguf")] + "-dequantized.gguf"
        lq.dequantize_every_tensor(path, dequantized[name])
    if not dequantized:
        return
    theirs = llama_cpp([(p, ids) for p in dequantized.values() for ids in PROMPTS])
    for name, path in dequantized.items():
        for ids in PROMPTS:
            with test.subTest(type=name, prompt=ids, file="dequantized by llama.cpp"):
                test.assertEqual(loom(path, ids), theirs[(path, ids)]["tokens"])


class TypesOracle:
    """Makes one file per type, then compares the engines on all of them."""

    def make(self, name, path):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.f32 = os.path.join(cls.tmp.name, "tiny-f32.gguf")
        run([LOOM, "convert", "--model", MODEL, "--to", "gguf", "--out", cls.f32])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def compare(self, types):
        files = {}
        for name, ggml_type in types.items():
            path = os.path.join(self.tmp.name, f"tiny-{name}.gguf")
            self.make(name, path)
            present = lq.tensor_types(path)
            self.assertIn(ggml_type, present.values(), f"{name}: llama.cpp put no {name} tensor in the file")
            files[name] = path
        compare_files(self, files)


class LlamaCppTypes(TypesOracle, unittest.TestCase):
    def make(self, name, path):
        ftype, ggml_type = LLAMA_FTYPES[name]
        lq.quantize_with_llama(self.f32, path, ftype, ggml_type)

    def test_llama_model_quantize_types(self):
        self.compare({name: t for name, (_, t) in LLAMA_FTYPES.items()})


class LlamaCppImatrixTypes(TypesOracle, unittest.TestCase):
    def make(self, name, path):
        # The token embeddings (the tied output head) and the first two layers' matrices: llama.cpp
        # takes up to 40 s to quantize the whole model to IQ1_M on this machine.
        lq.requantize_every_matrix(self.f32, path, CHUNK_TYPES[name],
                                   only=lambda t: t.startswith(("token_embd.", "blk.0.", "blk.1.")))

    def test_ggml_quantize_chunk_types(self):
        self.compare(CHUNK_TYPES)


if __name__ == "__main__":
    unittest.main()
