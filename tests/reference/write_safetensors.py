#!/usr/bin/python3
"""safetensors files from PyTorch tensors, with the Python standard library only.

Debian ships no `safetensors` package, so the reference side of the parity
tests writes and reads the format itself:

    from write_safetensors import save_file, load_file
    save_file({"fc.weight": w, "x": x}, "w.safetensors", metadata={"format": "pt"})
    tensors, metadata = load_file("g.safetensors")

The layout is the one `safetensors.torch.save_file` writes: an 8-byte
little-endian header length, a compact JSON header {"__metadata__": {...},
NAME: {"dtype", "shape", "data_offsets": [begin, end]}, ...} padded with
spaces to a multiple of 8 bytes, then the raw little-endian data. As in the
reference implementation, tensors are laid out by decreasing dtype
alignment, then by name, and the header lists them in that order.
"""
import json
import struct
import sys

import torch

DTYPES = {
    torch.float64: ("F64", 8), torch.float32: ("F32", 4), torch.float16: ("F16", 2),
    torch.bfloat16: ("BF16", 2), torch.int64: ("I64", 8), torch.int32: ("I32", 4),
    torch.int16: ("I16", 2), torch.int8: ("I8", 1), torch.uint8: ("U8", 1),
    torch.bool: ("BOOL", 1),
}
BY_NAME = {name: (dt, size) for dt, (name, size) in DTYPES.items()}

if sys.byteorder != "little":
    raise SystemExit("write_safetensors: the format is little-endian; this writer copies host bytes")


def tensor_bytes(t):
    """The raw host bytes of t, whatever its dtype (numpy has no bfloat16:
    view the storage as bytes instead)."""
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def save_file(tensors, path, metadata=None):
    names = list(tensors)
    if "__metadata__" in names:
        raise ValueError("a tensor cannot be named __metadata__")
    order = sorted(names, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for n in order:
        t = tensors[n]
        b = tensor_bytes(t)
        header[n] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_file(path):
    """Returns ({name: tensor}, metadata) in the header's order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        dt, size = BY_NAME[info["dtype"]]
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = flat.view(dt).reshape(info["shape"]).clone()
    return out, metadata
