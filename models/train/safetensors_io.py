"""Minimal safetensors writer/reader (no `safetensors` package on our machines).

Format: 8-byte little-endian header length N, then N bytes of UTF-8 JSON
{"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [begin, end]}}
padded with spaces so the data starts 8-byte aligned, then the raw
little-endian tensor bytes, back to back in header order.
"""
import json
import struct

import numpy as np
import torch

_TO_ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
_FROM_ST = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        # numpy has no bfloat16; the bits are the same as int16's.
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def save_file(tensors, path, metadata=None):
    """tensors: {name: torch.Tensor}. Names are written sorted (as safetensors does)."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _TO_ST:
            raise ValueError("safetensors: tensor %s has unsupported dtype %s" % (name, t.dtype))
        data = _tensor_bytes(t)
        header[name] = {"dtype": _TO_ST[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for data in blobs:
            f.write(data)


def load_file(path):
    """Returns ({name: torch.Tensor}, metadata). Validates offsets against the file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("safetensors: %s is shorter than its 8-byte header length" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("safetensors: %s header length %d exceeds file size %d" % (path, n, len(raw)))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dtype = _FROM_ST.get(info["dtype"])
        if dtype is None:
            raise ValueError("safetensors: %s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
        count = int(np.prod(info["shape"])) if info["shape"] else 1
        if not (0 <= b <= e <= len(data)) or e - b != count * torch.empty((), dtype=dtype).element_size():
            raise ValueError("safetensors: %s: tensor %s has bad data_offsets %s" % (path, name, info["data_offsets"]))
        buf = bytes(data[b:e])
        if dtype == torch.bfloat16:
            t = torch.from_numpy(np.frombuffer(buf, dtype="<i2").copy()).view(torch.bfloat16)
        elif dtype == torch.float16:
            t = torch.from_numpy(np.frombuffer(buf, dtype="<f2").copy())
        else:
            t = torch.from_numpy(np.frombuffer(buf, dtype="<f4").copy())
        out[name] = t.reshape(info["shape"])
    return out, meta
