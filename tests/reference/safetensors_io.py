"""Pure-Python .safetensors reader/writer (Debian 12 has no python3-safetensors).

File layout (https://github.com/huggingface/safetensors):
  8 bytes   little-endian u64 N = length of the header
  N bytes   UTF-8 JSON: {"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets"}, ...},
            padded with spaces so that 8 + N is a multiple of 8
  rest      the tensors' bytes, back to back, little-endian, row-major

We lay files out exactly as the `safetensors` library does for torch's `save_file`, so
that a file written here is byte-identical to one written by Transformers: tensors are
sorted by descending dtype (the order of the library's Dtype enum), then by name; the
header lists `__metadata__` first and then the tensors in data order; JSON is compact.

bf16 has no numpy dtype: its raw 16-bit patterns are moved through int16 views.
"""

import json
import os
import struct
import sys

import numpy as np
import torch

# name -> (torch dtype, numpy dtype used to move the raw bytes, bytes per element,
#          rank in the safetensors Dtype enum: BOOL < U8 < I8 < F8_* < I16 < U16 < F16
#          < BF16 < I32 < U32 < F32 < F64 < I64 < U64; only relative order matters)
_DTYPES = {
    "U8": (torch.uint8, np.uint8, 1, 1),  # gpt-oss's MXFP4 expert blocks and scales
    "F16": (torch.float16, np.float16, 2, 11),
    "BF16": (torch.bfloat16, np.int16, 2, 12),
    "I32": (torch.int32, np.int32, 4, 13),
    "F32": (torch.float32, np.float32, 4, 15),
    "I64": (torch.int64, np.int64, 8, 17),
}
_BY_TORCH = {v[0]: k for k, v in _DTYPES.items()}

if sys.byteorder != "little":  # the format is little-endian; numpy's native order is assumed below
    raise RuntimeError("safetensors_io assumes a little-endian host")


def dtype_name(dtype):
    """safetensors dtype string ("F32", "BF16", ...) of a torch dtype."""
    if dtype not in _BY_TORCH:
        raise ValueError(f"unsupported dtype {dtype}; supported: {sorted(_DTYPES)}")
    return _BY_TORCH[dtype]


def torch_dtype(name):
    """torch dtype of a safetensors dtype string."""
    if name not in _DTYPES:
        raise ValueError(f"unsupported safetensors dtype {name!r}; supported: {sorted(_DTYPES)}")
    return _DTYPES[name][0]


def tensor_to_bytes(t):
    """Raw little-endian bytes of a CPU tensor, row-major."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def _nbytes(dtype, shape):
    n = _DTYPES[dtype][2]
    for d in shape:
        n *= d
    return n


def layout(specs):
    """Orders tensors like the safetensors library and assigns data offsets.

    specs: iterable of (name, dtype string, shape). Returns a list of
    (name, dtype, shape, begin, end) in file order.
    """
    specs = [(name, dtype, list(shape)) for name, dtype, shape in specs]
    for name, dtype, _ in specs:
        if dtype not in _DTYPES:
            raise ValueError(f"tensor {name!r}: unsupported dtype {dtype!r}")
    names = [s[0] for s in specs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate tensor names")
    # Descending dtype rank, then ascending name (Python str order == UTF-8 byte order).
    specs.sort(key=lambda s: (-_DTYPES[s[1]][3], s[0]))
    out, offset = [], 0
    for name, dtype, shape in specs:
        n = _nbytes(dtype, shape)
        out.append((name, dtype, shape, offset, offset + n))
        offset += n
    return out


def header_bytes(ordered, metadata=None):
    """The 8-byte length prefix plus the padded JSON header for `layout()` output."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape, begin, end in ordered:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text


def save_file(tensors, path, metadata=None):
    """Writes {name: torch.Tensor} to `path` (metadata defaults to {"format": "pt"})."""
    if metadata is None:
        metadata = {"format": "pt"}
    specs = [(name, dtype_name(t.dtype), tuple(t.shape)) for name, t in tensors.items()]
    save_file_streaming(specs, lambda name: tensors[name], path, metadata)


def save_file_streaming(specs, produce, path, metadata=None):
    """Writes a file whose tensors are produced one at a time, in file order.

    specs: [(name, dtype string, shape)]; produce(name) -> torch.Tensor of that dtype and
    shape. Only one tensor is alive at a time, so multi-GB checkpoints fit in memory.
    Written to `path + ".tmp"` and renamed, so a crash never leaves a valid-looking file.
    """
    if metadata is None:
        metadata = {"format": "pt"}
    ordered = layout(specs)
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header_bytes(ordered, metadata))
        for name, dtype, shape, begin, end in ordered:
            t = produce(name)
            if dtype_name(t.dtype) != dtype or list(t.shape) != shape:
                raise ValueError(
                    f"tensor {name!r}: produced {dtype_name(t.dtype)}{list(t.shape)}, declared {dtype}{shape}")
            data = tensor_to_bytes(t)
            assert len(data) == end - begin
            f.write(data)
            del t, data
    os.replace(tmp, path)


def read_header(path):
    """Returns (metadata dict or None, {name: (dtype, shape, begin, end)}, data start offset)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    data_start = 8 + n
    entries = {}
    for name, info in header.items():
        dtype, shape = info["dtype"], info["shape"]
        begin, end = info["data_offsets"]
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype!r}")
        if end - begin != _nbytes(dtype, shape) or begin < 0 or data_start + end > size:
            raise ValueError(f"{path}: tensor {name!r} offsets {begin}..{end} do not match "
                             f"{dtype}{shape} or exceed the file")
        entries[name] = (dtype, shape, begin, end)
    return metadata, entries, data_start


def load_file(path, names=None):
    """Reads tensors (all, or those in `names`) into {name: torch.Tensor}."""
    _, entries, data_start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, (dtype, shape, begin, end) in entries.items():
            if names is not None and name not in names:
                continue
            tdtype, npdtype, _, _ = _DTYPES[dtype]
            f.seek(data_start + begin)
            count = (end - begin) // np.dtype(npdtype).itemsize
            arr = np.fromfile(f, dtype=npdtype, count=count)
            t = torch.from_numpy(arr)
            if tdtype == torch.bfloat16:
                t = t.view(torch.bfloat16)
            out[name] = t.reshape(shape)
    return out
