#!/usr/bin/python3
"""Test vectors for loom's GGUF block types, made by llama.cpp itself.

Quantizes fixed pseudo-random rows with llama.cpp's own quantizer (ggml_quantize_chunk,
an importance matrix for the types that need one) and dequantizes the blocks with its
to_float, through node-llama-cpp's prebuilt libggml-base.so (scripts/install-test-oracles).
Writes one file per type to tests/core/ggml_vectors/<TYPE>.bin:

    "LGQV", u32 ggml type id, u32 rows, u32 elements per row,
    rows * ggml_row_size bytes of blocks, rows * elements f32 (little endian)

tests/core/ggml_vectors_test.cc checks that loom's reference dequantization gives those
floats bit for bit. For the types loom also quantizes to (QUANTIZED_BY_LOOM) it writes
quantize_<TYPE>.bin: "LGQQ", the same three u32, the f32 rows, then the blocks llama.cpp's
quantizer (no importance matrix, as llama-quantize) made of them, which loom's quantizer
must give byte for byte. With --tables it also writes src/core/quantize_iq_grids.cc, the IQ
types' grids read back through the same library's dequantization of blocks that select
each grid row in turn (so nothing is typed by hand).

    /usr/bin/python3 tests/oracles/make_ggml_quant_vectors.py [--tables]
"""
import ctypes
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, ".cache", "npm-llama", "node_modules", "@node-llama-cpp", "linux-x64", "bins",
                   "linux-x64", "libggml-base.so")

# ggml.h's enum ggml_type
TYPES = {
    "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q2_K": 10, "Q3_K": 11, "IQ2_XXS": 16, "IQ2_XS": 17,
    "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22, "IQ4_XS": 23,
    "IQ1_M": 29, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39,
}

TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", TO_FLOAT), ("from_float_ref", ctypes.c_void_p)]


def load():
    lib = ctypes.CDLL(LIB)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    return lib


def traits(lib, name):
    t = lib.ggml_get_type_traits(TYPES[name]).contents
    assert t.type_name.decode().upper() == name, (t.type_name, name)
    return t


def dequantize(lib, name, blocks, n):
    out = (ctypes.c_float * n)()
    buf = ctypes.create_string_buffer(bytes(blocks), len(blocks))
    traits(lib, name).to_float(ctypes.cast(buf, ctypes.c_void_p), out, n)
    return np.frombuffer(out, dtype=np.float32).copy()


def vectors(lib, name, rows=3, per_row=1024):
    rng = np.random.default_rng(52 + TYPES[name])
    x = rng.standard_normal((rows, per_row)).astype(np.float32)
    x *= np.array([0.02, 1.0, 37.0], dtype=np.float32)[:rows, None]  # small, unit and large scales
    x[1, 5] = 9.0                                                       # an outlier in a block
    x[2, 300:332] = 0.0                                                 # an all-zero sub-block
    imatrix = (rng.random(per_row).astype(np.float32) + 0.1)
    lib.ggml_quantize_init(TYPES[name])
    row_size = lib.ggml_row_size(TYPES[name], per_row)
    dst = ctypes.create_string_buffer(rows * row_size)
    written = lib.ggml_quantize_chunk(TYPES[name], x.ctypes.data, dst, 0, rows, per_row, imatrix.ctypes.data)
    assert written == rows * row_size, (name, written, rows * row_size)
    blocks = dst.raw
    y = dequantize(lib, name, blocks, rows * per_row)
    return struct.pack("<4sIII", b"LGQV", TYPES[name], rows, per_row) + blocks + y.astype("<f4").tobytes()


# The types loom quantizes to besides Q8_0, Q4_0 and the K types: llama.cpp's quantizer
# without an importance matrix, as llama-quantize runs it.
QUANTIZED_BY_LOOM = ["Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4"]


def quantizer_vectors(lib, name, rows=3, per_row=1024):
    """"LGQQ", u32 type, u32 rows, u32 per_row, the f32 input, then llama.cpp's blocks."""
    rng = np.random.default_rng(520 + TYPES[name])
    x = rng.standard_normal((rows, per_row)).astype(np.float32)
    x *= np.array([0.02, 1.0, 37.0], dtype=np.float32)[:rows, None]
    x[1, 5] = 9.0
    x[2, 300:332] = 0.0
    x[0, 64:96] = 0.5  # a constant block
    lib.ggml_quantize_init(TYPES[name])
    row_size = lib.ggml_row_size(TYPES[name], per_row)
    dst = ctypes.create_string_buffer(rows * row_size)
    written = lib.ggml_quantize_chunk(TYPES[name], x.ctypes.data, dst, 0, rows, per_row, None)
    assert written == rows * row_size
    return struct.pack("<4sIII", b"LGQQ", TYPES[name], rows, per_row) + x.astype("<f4").tobytes() + dst.raw


F16_ONE = 0x3C00


def grid_rows(lib, name, count, make_block, per_block, block_bytes, row_len, scale):
    """Every grid row, read back by dequantizing blocks that select rows i..i+per_block-1."""
    rows = []
    for first in range(0, count, per_block):
        blk = make_block(first)
        assert len(blk) == block_bytes
        y = dequantize(lib, name, blk, 256)
        rows.extend(y[:per_block * row_len].reshape(per_block, row_len) / scale)
    return np.array(rows[:count])


def iq2xxs_block(first):
    # d = 1; sub-block j takes grid rows first + 4j .. + 3, sign index 0, scale nibble 0
    qs = bytearray()
    for j in range(8):
        idx = [(first + 4 * j + l) % 256 for l in range(4)]
        qs += bytes(idx) + struct.pack("<I", 0)
    return struct.pack("<H", F16_ONE) + bytes(qs)


def iq2xs_block(first):
    qs = b"".join(struct.pack("<H", (first + i) % 512) for i in range(32))  # 9-bit row, 7-bit sign 0
    return struct.pack("<H", F16_ONE) + qs + bytes(8)


def iq2s_block(first):
    low = bytes((first + i) & 255 for i in range(32))
    signs = bytes(32)
    qh = bytearray(8)
    for i in range(32):
        hi = ((first + i) % 1024) >> 8
        qh[i // 4] |= hi << (2 * (i % 4))
    return struct.pack("<H", F16_ONE) + low + signs + bytes(qh) + bytes(8)


def iq3xxs_block(first):
    idx = bytes((first + i) % 256 for i in range(64))
    return struct.pack("<H", F16_ONE) + idx + bytes(32)


def iq3s_block(first):
    low = bytes((first + i) & 255 for i in range(64))
    qh = bytearray(8)
    for i in range(64):
        qh[i // 8] |= (((first + i) % 512) >> 8) << (i % 8)
    return struct.pack("<H", F16_ONE) + low + bytes(qh) + bytes(32) + bytes(4)


def iq1s_block(first):
    low = bytes((first + i) & 255 for i in range(32))
    qh = b"".join(struct.pack("<H", sum((((first + 4 * j + l) % 2048) >> 8) << (3 * l) for l in range(4)))
                  for j in range(8))
    return struct.pack("<H", F16_ONE) + low + qh


def write_tables(lib, path):
    # Dequantized value = d · scale · grid value with these blocks' d = 1 and scale nibbles 0.
    specs = [
        ("iq2xxs_grid", "IQ2_XXS", 256, iq2xxs_block, 32, 66, 8, 0.125, "uint8_t", 8),
        ("iq2xs_grid", "IQ2_XS", 512, iq2xs_block, 32, 74, 8, 0.125, "uint8_t", 8),
        ("iq2s_grid", "IQ2_S", 1024, iq2s_block, 32, 82, 8, 0.125, "uint8_t", 8),
        ("iq3xxs_grid", "IQ3_XXS", 256, iq3xxs_block, 64, 98, 4, 0.25, "uint8_t", 4),
        ("iq3s_grid", "IQ3_S", 512, iq3s_block, 64, 110, 4, 1.0, "uint8_t", 4),
        ("iq1s_grid", "IQ1_S", 2048, iq1s_block, 32, 50, 8, None, "int8_t", 8),
    ]
    lines = ["// Generated by tests/oracles/make_ggml_quant_vectors.py --tables from llama.cpp's",
             "// libggml-base.so (node-llama-cpp's prebuilt build): each row read back through its",
             "// dequantize_row_* of blocks selecting that row. Do not edit.",
             '#include "loom/core/quantize_iq_grids.h"', "", "namespace loom {", ""]
    for var, name, count, make, per_block, nbytes, row_len, scale, ctype, width in specs:
        if scale is None:  # IQ1_S: d·(2·0 + 1)·(grid + delta), delta = +1/8 with sign bit 0
            rows = grid_rows(lib, name, count, make, per_block, nbytes, row_len, 1.0) - 0.125
        else:
            rows = grid_rows(lib, name, count, make, per_block, nbytes, row_len, scale)
        ints = np.rint(rows).astype(np.int64)
        assert np.array_equal(ints.astype(np.float64), rows.astype(np.float64)), var
        lines.append(f"const {ctype} {var}[{count}][{width}] = {{")
        per_line = 4 if width == 8 else 8
        for i in range(0, len(ints), per_line):
            lines.append("    " + " ".join("{" + ", ".join(str(int(v)) for v in r) + "}," for r in ints[i:i + per_line]))
        lines.append("};")
        lines.append("")
    lines.append("}  // namespace loom")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    lib = load()
    out = os.path.join(ROOT, "tests", "core", "ggml_vectors")
    os.makedirs(out, exist_ok=True)
    for name in TYPES:
        with open(os.path.join(out, f"{name}.bin"), "wb") as f:
            f.write(vectors(lib, name))
    for name in QUANTIZED_BY_LOOM:
        with open(os.path.join(out, f"quantize_{name}.bin"), "wb") as f:
            f.write(quantizer_vectors(lib, name))
    if "--tables" in sys.argv:
        write_tables(lib, os.path.join(ROOT, "src", "core", "quantize_iq_grids.cc"))


if __name__ == "__main__":
    main()
