#!/usr/bin/python3
"""Quick end-to-end test of the default-model pipeline on a tiny slice.

Runs scripts/train-default-model for a few steps on the first 40 chapters with
a tiny model, then checks the Hugging Face files exist and are consistent, the
safetensors loads back into the model, the reloaded weights reproduce the
validation loss recorded in the model card data, and training lowered the loss.

  /usr/bin/python3 models/train/test_train.py        (exit status 0 = pass)

Set LOOM_TRAIN_TEST_KEEP=DIR to keep the outputs in DIR.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from llama_model import LlamaForCausalLM  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402

STEPS = 40
TINY = ["--layers", "2", "--hidden", "64", "--intermediate", "172", "--heads", "4", "--kv-heads", "2",
        "--seq-len", "64", "--batch", "8", "--warmup", "5", "--lr", "3e-3", "--log-every", "5",
        "--sample-tokens", "8", "--max-positions", "128"]


class TrainPipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        keep = os.environ.get("LOOM_TRAIN_TEST_KEEP")
        cls.tmp = keep or tempfile.mkdtemp(prefix="loom-train-test-")
        cls.work = os.path.join(cls.tmp, "work")
        cls.out = os.path.join(cls.tmp, "model")
        cmd = [os.path.join(ROOT, "scripts", "train-default-model"), "--steps", str(STEPS),
               "--max-chapters", "40", "--vocab-size", "384", "--work", cls.work, "--out", cls.out, "--"] + TINY
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        cls.log = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise AssertionError("train-default-model failed (%d):\n%s" % (proc.returncode, cls.log))
        with open(os.path.join(cls.work, "train_result.json")) as f:
            cls.result = json.load(f)

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("LOOM_TRAIN_TEST_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def read_json(self, name):
        with open(os.path.join(self.out, name)) as f:
            return json.load(f)

    def test_files_exist(self):
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json", "README.md"):
            path = os.path.join(self.out, name)
            self.assertTrue(os.path.isfile(path), name)
            self.assertGreater(os.path.getsize(path), 0, name)

    def test_config_matches_tokenizer(self):
        cfg = self.read_json("config.json")
        tok = self.read_json("tokenizer.json")
        tok_cfg = self.read_json("tokenizer_config.json")
        gen = self.read_json("generation_config.json")
        self.assertEqual(cfg["model_type"], "llama")
        self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(cfg["vocab_size"], len(tok["model"]["vocab"]) + len(tok["added_tokens"]))
        by_content = {t["content"]: t["id"] for t in tok["added_tokens"]}
        self.assertEqual(cfg["bos_token_id"], by_content[tok_cfg["bos_token"]])
        self.assertEqual(cfg["eos_token_id"], by_content[tok_cfg["eos_token"]])
        self.assertEqual(gen["bos_token_id"], cfg["bos_token_id"])
        self.assertIn(cfg["eos_token_id"], gen["eos_token_id"])
        for token in ("<|user|>", "<|assistant|>", "<|system|>", "<|end|>"):
            self.assertIn(token, by_content)
            self.assertIn(token, tok_cfg["chat_template"])
        # Every byte must be encodable: ids 0..255 are the byte-level alphabet.
        self.assertEqual(sorted(tok["model"]["vocab"].values())[:256], list(range(256)))

    def test_safetensors_layout_and_reload(self):
        path = os.path.join(self.out, "model.safetensors")
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        self.assertEqual(n % 8, 0)
        self.assertEqual(header["__metadata__"], {"format": "pt"})
        self.assertNotIn("lm_head.weight", header)
        cfg = self.read_json("config.json")
        names = {"model.embed_tokens.weight", "model.norm.weight"}
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            names |= {p + "self_attn.%s_proj.weight" % x for x in "qkvo"}
            names |= {p + "mlp.%s_proj.weight" % x for x in ("gate", "up", "down")}
            names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        self.assertEqual(set(header) - {"__metadata__"}, names)
        tensors, _ = safetensors_io.load_file(path)
        model = LlamaForCausalLM(cfg)
        model.load_state_dict(tensors, strict=True)
        self.assertEqual(model.num_parameters(), self.result["params"])

        # The reloaded weights reproduce the recorded validation loss exactly
        # (same code, float32), so the card's figure belongs to the saved file.
        valid = train.load_ids(os.path.join(self.work, "valid.bin"))
        loss, count = train.validation_loss(model, valid, cfg["bos_token_id"], self.result["args"]["seq_len"])
        self.assertEqual(count, valid.numel())
        self.assertAlmostEqual(loss, self.result["valid_loss"], places=4)

    def test_perplexity_reference_cli(self):
        # perplexity.py is the oracle for `loom perplexity`: from the files alone
        # (model dir + valid.txt) it must give the loss the card reports.
        proc = subprocess.run([sys.executable, os.path.join(HERE, "perplexity.py"), "--model", self.out,
                               "--file", os.path.join(self.work, "valid.txt"),
                               "--seq-len", str(self.result["args"]["seq_len"])],
                              stdout=subprocess.PIPE, check=True)
        got = json.loads(proc.stdout)
        self.assertEqual(got["tokens"], self.result["valid_tokens"])
        self.assertAlmostEqual(got["loss"], self.result["valid_loss"], places=4)

    def test_validation_chunking_scores_every_token_once(self):
        # A model whose logits ignore the input makes the loss a plain average
        # over the scored targets, so the count and the value check the chunking.
        class Uniformish(torch.nn.Module):
            cfg = {"max_position_embeddings": 64}

            def forward(self, x):
                logits = torch.zeros(x.shape[0], x.shape[1], 5)
                logits[..., 0] = 1.0
                return logits

        ids = torch.tensor([0, 1, 2, 3, 4, 0, 0, 1, 2, 3])  # 10 tokens, pieces of 3,3,3,1
        loss, count = train.validation_loss(Uniformish(), ids, bos_id=4, seq_len=4, batch=2)
        self.assertEqual(count, 10)
        import math
        z = math.log(math.e + 4)
        expected = (3 * (z - 1) + 7 * z) / 10  # three targets are id 0
        self.assertAlmostEqual(loss, expected, places=6)

    def test_loss_decreased(self):
        hist = self.result["history"]
        self.assertEqual(hist[-1]["step"], STEPS)
        self.assertLess(hist[-1]["train_loss"], self.result["first_losses"][0] - 0.5)
        # Untrained, the loss is about ln(vocab); training must beat that on held-out text.
        import math
        self.assertLess(self.result["valid_loss"], math.log(self.result["vocab_size"]) - 0.3)

    def test_card_reports_the_run(self):
        with open(os.path.join(self.out, "README.md")) as f:
            card = f.read()
        self.assertIn("%.4f" % self.result["valid_loss"], card)
        self.assertIn("--steps %d" % STEPS, card)
        self.assertIn("public domain", card.lower())
        for s in self.result["samples"]:
            self.assertIn(s["prompt"], card)
        self.assertTrue(re.search(r"BOS", card))


if __name__ == "__main__":
    unittest.main(verbosity=2)
