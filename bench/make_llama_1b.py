#!/usr/bin/python3
"""Writes a random-weight checkpoint shaped exactly like meta-llama/Llama-3.2-1B (its config.json:
hidden 2048, 16 layers, 32 heads, 8 kv heads, head_dim 64, intermediate 8192, vocab 128256,
tied embeddings, rope llama3 factor 32 / theta 500000) for speed benchmarks. The values are
random (N(0, 0.02^2) like initializer_range), so only timings are meaningful, never outputs.

  /usr/bin/python3 bench/make_llama_1b.py --out /work/bench-models/llama-1b-bf16 --dtype bf16

~2.5 GB in bf16, ~5 GB in f32. Tensors are generated and written one at a time, so peak memory
is about one tensor (the 128256 x 2048 embedding), not the whole model.
"""

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import safetensors_io  # noqa: E402

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "use_cache": True,
    "vocab_size": 128256,
}
GENERATION_CONFIG = {"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": True,
                     "temperature": 0.6, "top_p": 0.9}
DTYPES = {"f32": (torch.float32, "F32", "float32"), "bf16": (torch.bfloat16, "BF16", "bfloat16")}


def tensor_shapes(c):
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [c["vocab_size"], h], "model.norm.weight": [h]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        })
    return shapes  # tied: no lm_head.weight, as in the real checkpoint


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tdtype, st_dtype, cfg_dtype = DTYPES[args.dtype]

    os.makedirs(args.out, exist_ok=True)
    shapes = tensor_shapes(CONFIG)
    total = sum(math.prod(s) for s in shapes.values())
    gen = torch.Generator().manual_seed(args.seed)
    start, done = time.time(), [0]

    def produce(name):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            t = torch.ones(shape)
        else:
            t = torch.randn(shape, generator=gen).mul_(0.02)
        done[0] += t.numel()
        print(f"  {name} {shape} ({100 * done[0] / total:.0f}%, {time.time() - start:.0f}s)", flush=True)
        return t.to(tdtype)

    print(f"writing {total / 1e9:.2f}B parameters ({args.dtype}) to {args.out}", flush=True)
    safetensors_io.save_file_streaming([(n, st_dtype, s) for n, s in shapes.items()], produce,
                                       os.path.join(args.out, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(CONFIG, torch_dtype=cfg_dtype), f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
        f.write("\n")
    print(f"done in {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
