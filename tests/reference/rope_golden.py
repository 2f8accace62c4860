"""Prints the golden values of tests/runtime/rope_test.cc Rope.ApplyMatchesTransformersGolden
as C++ hex floats, computed by the reference's RoPE (which follows Transformers'
modeling_rope_utils / apply_rotary_pos_emb): 3 tokens x 2 heads x head_dim 10, partial rotary
over 6 dims, positions 0, 7, 100000, theta 10000, cos/sin scaled by 1.25, inputs
((i*37) mod 101 - 50) / 32 in row-major order.

    /usr/bin/python3 tests/reference/rope_golden.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_model import _default_inv_freq, apply_rope, rope_cos_sin  # noqa: E402

TOKENS, HEADS, HEAD_DIM, ROTARY_DIM, SCALING = 3, 2, 10, 6, 1.25
POSITIONS = [0, 7, 100000]


def golden():
    x = torch.tensor([((i * 37) % 101 - 50) / 32 for i in range(TOKENS * HEADS * HEAD_DIM)], dtype=torch.float32)
    x = x.view(TOKENS, HEADS, HEAD_DIM).transpose(0, 1)  # apply_rope wants [heads, T, head_dim]
    cos, sin = rope_cos_sin(_default_inv_freq(10000.0, ROTARY_DIM), SCALING, torch.tensor(POSITIONS), torch.float32)
    return apply_rope(x, cos, sin).transpose(0, 1).reshape(-1)


def cpp_hex(v):
    mantissa, exponent = float(v).hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}f"


if __name__ == "__main__":
    values = [cpp_hex(v) for v in golden()]
    for row in range(0, len(values), 5):
        print("      " + " ".join(v + "," for v in values[row:row + 5]))
