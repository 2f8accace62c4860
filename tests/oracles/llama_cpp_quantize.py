"""GGUF files in llama.cpp's weight types, made by llama.cpp itself, for the oracle tests.

Two makers, both through node-llama-cpp's prebuilt libraries (ctypes, no build):
- quantize_with_llama(src, dst, ftype, ggml_type): llama.cpp's own llama_model_quantize
  with the ftype's mix of types, the token embeddings (and so the tied output head) in
  ggml_type too;
- requantize_every_matrix(src, dst, ggml_type, only): every 2-D f32 tensor whose rows are
  whole blocks (and whose name `only` accepts, if given) quantized to ggml_type by
  ggml_quantize_chunk, the rest copied. For the types
  llama_model_quantize makes only with an importance matrix (IQ3_XXS, IQ2_XXS, IQ2_XS,
  IQ2_S, IQ1_S, IQ1_M: passed here as ones, which the quantizer takes as uniform weights) and for
  MXFP4 (which llama.cpp's ftypes put only on MoE experts).
dequantize_every_tensor(src, dst) writes the same file with every quantized tensor as F32
by llama.cpp's own to_float; tensor_types(path) lists a file's {name: ggml type id}.
"""
import concurrent.futures
import ctypes
import os
import struct

SOURCE = os.environ.get("LOOM_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LIBS = os.path.join(SOURCE, ".cache", "npm-llama", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")


class QuantizeParams(ctypes.Structure):
    # llama.h's llama_model_quantize_params: the leading fields this file sets, then room
    # for the rest (bools and pointers), which llama_model_quantize_default_params fills.
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("output_tensor_type", ctypes.c_int32),
                ("token_embedding_type", ctypes.c_int32), ("rest", ctypes.c_uint8 * 256)]


def quantize_with_llama(src, dst, ftype, ggml_type=None):
    lib = ctypes.CDLL(os.path.join(LIBS, "libllama.v0.4.0.so"))
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    params = lib.llama_model_quantize_default_params()
    params.nthread = 2
    params.ftype = ftype
    if ggml_type is not None:
        params.token_embedding_type = ggml_type
        params.output_tensor_type = ggml_type
    rc = lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, ftype {ftype}) returned {rc}")


# GGUF value types' fixed sizes (8: string, 9: array)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(buf, at, vtype):
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, at)
        return at + 8 + n
    if vtype == 9:
        etype, count = struct.unpack_from("<IQ", buf, at)
        at += 12
        if etype in _SIZES:
            return at + count * _SIZES[etype]
        for _ in range(count):
            at = _skip_value(buf, at, etype)
        return at
    return at + _SIZES[vtype]


def _parse(buf):
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and version == 3
    at = 24
    alignment = 32
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, at)
        key = buf[at + 8:at + 8 + klen].decode()
        at += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, at)
        at += 4
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, at)
        at = _skip_value(buf, at, vtype)
    kv_end = at
    tensors = []
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", buf, at)
        name = buf[at + 8:at + 8 + nlen].decode()
        at += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", buf, at)
        ne = list(struct.unpack_from(f"<{n_dims}Q", buf, at + 4))
        at += 4 + 8 * n_dims
        gtype, offset = struct.unpack_from("<IQ", buf, at)
        at += 12
        tensors.append({"name": name, "ne": ne, "type": gtype, "offset": offset})
    data = (at + alignment - 1) // alignment * alignment
    return {"n_kv": n_kv, "kv_end": kv_end, "tensors": tensors, "data": data, "alignment": alignment}


def tensor_types(path):
    with open(path, "rb") as f:
        buf = f.read()
    return {t["name"]: t["type"] for t in _parse(buf)["tensors"]}


def requantize_every_matrix(src, dst, ggml_type, only=None):
    base = ctypes.CDLL(os.path.join(LIBS, "libggml-base.so"))
    base.ggml_quantize_chunk.restype = ctypes.c_size_t
    base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    base.ggml_row_size.restype = ctypes.c_size_t
    base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    base.ggml_blck_size.restype = ctypes.c_int64
    base.ggml_blck_size.argtypes = [ctypes.c_int]
    base.ggml_quantize_init.argtypes = [ctypes.c_int]
    base.ggml_quantize_init(ggml_type)
    block = base.ggml_blck_size(ggml_type)
    with open(src, "rb") as f:
        buf = f.read()
    g = _parse(buf)

    def convert(t):
        ne = t["ne"]
        rows = 1
        for d in ne[1:]:
            rows *= d
        start = g["data"] + t["offset"]
        if t["type"] == 0 and len(ne) == 2 and ne[0] % block == 0 and (only is None or only(t["name"])):
            src_buf = ctypes.create_string_buffer(buf[start:start + 4 * ne[0] * rows], 4 * ne[0] * rows)
            out = ctypes.create_string_buffer(base.ggml_row_size(ggml_type, ne[0]) * rows)
            ones = (ctypes.c_float * ne[0])(*([1.0] * ne[0]))
            size = base.ggml_quantize_chunk(ggml_type, src_buf, out, 0, rows, ne[0], ones)
            return out.raw[:size], ggml_type
        size = {0: 4, 1: 2, 30: 2}[t["type"]] * ne[0] * rows
        return buf[start:start + size], t["type"]

    # ctypes lets go of the GIL in the quantizer: the tensors quantize on every core.
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        converted = list(pool.map(convert, g["tensors"]))
    infos, blobs, offset = [], [], 0
    for t, (blob, gtype) in zip(g["tensors"], converted):
        infos.append((t["name"], t["ne"], gtype, offset))
        blobs.append(blob)
        offset = (offset + len(blob) + g["alignment"] - 1) // g["alignment"] * g["alignment"]
    _write(dst, buf, g, infos, blobs)


def dequantize_every_tensor(src, dst):
    """The same file with every quantized tensor as F32, by llama.cpp's own to_float."""
    base = ctypes.CDLL(os.path.join(LIBS, "libggml-base.so"))
    to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)

    class Traits(ctypes.Structure):
        _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64), ("blck_size_interleave", ctypes.c_int64),
                    ("type_size", ctypes.c_size_t), ("is_quantized", ctypes.c_bool), ("to_float", to_float_t),
                    ("from_float_ref", ctypes.c_void_p)]

    base.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
    base.ggml_row_size.restype = ctypes.c_size_t
    base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    with open(src, "rb") as f:
        buf = f.read()
    g = _parse(buf)
    infos, blobs, offset = [], [], 0
    for t in g["tensors"]:
        ne = t["ne"]
        n = 1
        for d in ne:
            n *= d
        start = g["data"] + t["offset"]
        size = base.ggml_row_size(t["type"], ne[0]) * (n // ne[0])
        if t["type"] in (0, 24, 25, 26, 27, 28):
            blob, gtype = buf[start:start + size], t["type"]
        else:
            out = (ctypes.c_float * n)()
            data = ctypes.create_string_buffer(buf[start:start + size], size)
            base.ggml_get_type_traits(t["type"]).contents.to_float(ctypes.cast(data, ctypes.c_void_p), out, n)
            blob, gtype = bytes(out), 0
        infos.append((t["name"], ne, gtype, offset))
        blobs.append(blob)
        offset = (offset + len(blob) + g["alignment"] - 1) // g["alignment"] * g["alignment"]
    _write(dst, buf, g, infos, blobs)


def _write(dst, buf, g, infos, blobs):
    out = bytearray(struct.pack("<4sIQQ", b"GGUF", 3, len(infos), g["n_kv"]))
    out += buf[24:g["kv_end"]]
    for name, ne, gtype, off in infos:
        out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
        out += struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", gtype, off)
    out += bytes((-len(out)) % g["alignment"])
    for blob in blobs:
        out += bytes((-len(out)) % g["alignment"]) + blob  # each blob at its aligned offset
    with open(dst, "wb") as f:
        f.write(out)
