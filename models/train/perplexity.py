#!/usr/bin/python3
"""PyTorch reference for `loom perplexity`: per-token loss of a Llama model
directory on a text file, with the chunking the model card describes.

  /usr/bin/python3 models/train/perplexity.py --model models/loom-kjv-tiny --file valid.txt

Prints one JSON line: {"loss": nats/token, "perplexity": ..., "tokens": N, "seq_len": ...}.
The file is encoded whole, without special tokens, through the `tokenizers`
npm package (tokenize.js); pieces of seq_len-1 tokens each run as [BOS]+piece.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from llama_model import LlamaForCausalLM  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    tensors, _ = safetensors_io.load_file(os.path.join(model_dir, "model.safetensors"))
    model = LlamaForCausalLM(cfg)
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    return model, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--seq-len", type=int, default=256, help="positions per chunk, BOS included")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, cfg = load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        ids_path = os.path.join(tmp, "ids.bin")
        subprocess.run(["node", os.path.join(HERE, "tokenize.js"), "encode-file",
                        os.path.join(args.model, "tokenizer.json"), args.file, ids_path],
                       check=True, stdout=subprocess.DEVNULL)
        ids = train.load_ids(ids_path)
    loss, count = train.validation_loss(model, ids, cfg["bos_token_id"], args.seq_len)
    print(json.dumps({"loss": loss, "perplexity": math.exp(loss), "tokens": count, "seq_len": args.seq_len}))


if __name__ == "__main__":
    main()
