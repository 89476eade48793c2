#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/).
The files are committed; rerun this only to change the seeds."""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def out(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ---------------------------------------------------------

def st(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, raw bytes)] -> file bytes."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i64(*v):
    return struct.pack("<%dq" % len(v), *v)


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


S = "fuzz_safetensors"
out(S, "model_meta", st([("weight", "F32", [2, 2], f32(1, 2, 3, 4)),
                         ("bias", "F32", [2], f32(-1, 0.5)),
                         ("step", "I64", [], i64(7)),
                         ("idx", "I32", [2], i32(0, 1))],
                        {"epoch": "3", "step": "120"}))
out(S, "halves", st([("h", "F16", [3], struct.pack("<3H", 0x3C00, 0x0001, 0x7C00)),
                     ("b", "BF16", [2, 1], struct.pack("<2H", 0x3F80, 0xC000))]))
out(S, "empty", st([]))
out(S, "meta_only", st([], {"epoch": "1", "": "x", "note": "caf\u00e9 \\u0000"}))
out(S, "zero_sized", st([("z", "F32", [0, 3], b""), ("s", "F32", [], f32(2.5)),
                         ("e", "I64", [4, 0], b"")]))
out(S, "unsupported", st([("u", "U8", [4], b"\x01\x02\x03\x04")], {"epoch": "0"}))
out(S, "unpadded", st([("a", "F32", [1, 1, 1, 2], f32(0, -0.0))], pad=False))
out(S, "escaped_names", st([("a\"b\\c\u00e9", "F32", [1], f32(1)),
                            ("layer.0.weight", "I64", [2], i64(-1, 1 << 40))]))

# ---- IDX (flags, image-file length u16 LE, image file, label file) -------


def idx(dims, data):
    magic = bytes([0, 0, 8, len(dims)])
    return magic + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def idx_input(flags, img, lab):
    return bytes([flags]) + struct.pack("<H", len(img)) + img + lab


def gz(b):
    return gzip.compress(b, mtime=0)


I = "fuzz_idx"
img3 = idx([3, 2, 2], range(12))
lab3 = idx([3], [0, 9, 4])
out(I, "raw", idx_input(0, img3, lab3))
out(I, "harness_gzip", idx_input(3 | 1 << 2 | 1 << 4, img3, lab3))
out(I, "file_gzip", idx_input(0, gz(img3), gz(lab3)))
img5 = idx([5, 1, 3], [i * 50 % 256 for i in range(15)])
lab5 = idx([5], [1, 2, 3, 4, 5])
out(I, "drop_last", idx_input(2 << 2 | 1 << 4 | 1 << 5, img5, lab5))
out(I, "mismatch", idx_input(0, img3, lab5))

# ---- op programs (see fuzz_ops.c for the byte format) --------------------

O = "fuzz_ops"
# matmul, relu, sum, backward, step, read the grad
out(O, "mlp_backward", bytes([
    0x00, 0x00, 0x02, 0x01, 0x02, 0x00, 0x05,       # x f32 [2,3]
    0x00, 0x00, 0x02, 0x02, 0x03, 0x00, 0x07,       # w f32 [3,4]
    0x0b, 0x00, 0x01, 0x01,                         # requires_grad(w)
    0x02, 0x0a, 0x00, 0x01,                         # matmul
    0x03, 0x07, 0x02,                               # relu
    0x03, 0x0a, 0x03,                               # sum
    0x0b, 0x01, 0x04,                               # backward
    0x08, 0x04, 0x00,                               # mark_step
    0x0b, 0x02, 0x01,                               # grad(w) into a slot
    0x08, 0x01, 0x05, 0x00,                         # to_host(grad)
    0x08, 0x00, 0x04,                               # item(loss)
]))
# conv, max pool, adaptive pool, eager mode, sync
out(O, "conv_pool", bytes([
    0x00, 0x00, 0x04, 0x00, 0x01, 0x03, 0x03, 0x00, 0x09,   # x [1,2,4,4]
    0x00, 0x00, 0x04, 0x02, 0x01, 0x02, 0x02, 0x00, 0x0b,   # w [3,2,3,3]
    0x07, 0x03, 0x00, 0x01, 0x00, 1, 1, 1, 1, 1, 1, 1,      # conv2d pad 1
    0x07, 0x04, 0x02, 2, 2, 0, 2, 2, 0, 0, 1,               # max pool 2x2
    0x07, 0x06, 0x03, 0x01, 0x01,                           # adaptive 1x1
    0x03, 0x0b, 0x04,                                       # mean
    0x0c, 0x00, 0x01,                                       # eager on
    0x03, 0x09, 0x02,                                       # relu6
    0x09, 0x02, 0x05, 0x06, 0x01,                           # sync 2, wait
    0x08, 0x00, 0x05,                                       # item
]))
# scopes, reshape, transpose, keep, cat, softmax, cross entropy
out(O, "scopes_shapes", bytes([
    0x0c, 0x03,                                     # scope begin
    0x00, 0x00, 0x02, 0x01, 0x02, 0x00, 0x03,       # x [2,3]
    0x06, 0x00, 0x00, 0x02, 0x05, 0x01,             # reshape [-1,2]
    0x06, 0x02, 0x01, 0x00, 0x01,                   # transpose(0,1)
    0x0a, 0x02, 0x02,                               # keep
    0x0c, 0x04,                                     # scope end
    0x06, 0x05, 0x00, 0x03, 0x00, 0x00, 0x00,       # cat x3 axis 0
    0x07, 0x00, 0x01, 0xff,                         # softmax(axis -1)
    0x00, 0x04, 0x01, 0x01, 0x00, 0x02,             # target i64 [2]
    0x07, 0x02, 0x00, 0x02,                         # cross entropy
    0x08, 0x00, 0x03,                               # item
]))
# batch norm with running stats, layer norm, embedding, attention, dropout
out(O, "nn_misc", bytes([
    0x00, 0x00, 0x04, 0x01, 0x01, 0x01, 0x01, 0x00, 0x11,   # x [2,2,2,2]
    0x00, 0x00, 0x01, 0x01, 0x01,                           # zeros [2]
    0x00, 0x00, 0x01, 0x01, 0x02, 0x01,                     # full [2] 1.0
    0x07, 0x07, 0x00, 0x1c, 0x01, 0x02, 0x06, 0x05,         # batch norm train
    0x07, 0x08, 0x00, 0x04, 0x05,                           # layer norm 1 axis
    0x00, 0x04, 0x01, 0x02, 0x00, 0x01,                     # idx i64 [3]
    0x07, 0x09, 0x01, 0x01, 0x04,                           # embedding
    0x07, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00,               # attention(x,x,x)
    0x03, 0x0f, 0x00, 0x03, 0x01,                           # dropout 0.5
    0x09, 0x04, 0x00, 0x01, 0x02, 0x03, 0x01,               # sync 4
]))
# capture a step (add, relu, square, sum of two inputs) and call it 3 times
out(O, "capture", bytes([
    0x00, 0x00, 0x02, 0x01, 0x02, 0x00, 0x05,       # x [2,3]
    0x00, 0x00, 0x02, 0x01, 0x02, 0x00, 0x06,       # y [2,3]
    0x0d, 0x00, 0x00, 0x01, 0x00,                   # capture fn 0: 2 in, 1 out
    0x00, 0x10, 0x02, 0x02, 0x01, 0x33, 0x03, 0x04,
    0x0d, 0x01, 0x00, 0x00, 0x01,                   # call (warm-up)
    0x0d, 0x01, 0x00, 0x00, 0x01,                   # call (trace)
    0x0d, 0x01, 0x00, 0x00, 0x01,                   # call (replay)
    0x08, 0x00, 0x04,                               # item
]))
