#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of the nn-op parity test
(tests/test_parity_nn.c): embedding, layer_norm, hardtanh, relu6, flatten
and attention.

    /usr/bin/python3 tests/reference/gen_nn.py [OUTDIR]

OUTDIR defaults to tests/fixtures/nn (committed); test_fixtures_fresh.sh
checks that the committed files are byte for byte what this writes. The
file format, the input generator and the f64 reference from f32 inputs are
gen_fixtures.py's (its docstring), reused from there.

Attributes per op:
    embedding    x0 weight [V, D], x1 indices (no gradient)
    layer_norm   iattr n_axes, has_weight, has_bias; fattr eps;
                 x0 input, then weight and bias when present
    hardtanh     fattr min max
    flatten      iattr start
    attention    iattr has_mask; fattr scale (0: 1/sqrt(d)); x0 q, x1 k,
                 x2 v, x3 additive mask when present (no gradient)

Dropout has no fixture: torch's generator is not lazyc's, so equal seeds
give different masks by design (tests/test_dropout.c checks the
distribution instead).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gen_fixtures import F32, I32, I64, Case, op_case  # noqa: E402


def with_values(x, values):
    """x with its first elements set to values (exact bound hits)."""
    x = x.clone().reshape(-1)
    x[: len(values)] = torch.tensor(values, dtype=x.dtype)
    return x


def gen(outdir):
    files = []

    def add(name, op, make_inputs, fn, **kw):
        c = Case(name)
        files.append(op_case(outdir, name, op, make_inputs(c), fn, **kw))

    # embedding: repeated indices make the backward a scatter-add
    for tag, v, d, ishape, dt in (("i64", 10, 4, [2, 3], I64), ("i32", 7, 5, [6], I32),
                                  ("3d", 12, 3, [2, 2, 3], I64), ("scalar", 5, 6, [], I64)):
        def mk(c, v=v, d=d, ishape=ishape, dt=dt):
            idx = c.ints(ishape, 0, v, dt)
            if idx.numel() >= 3:
                flat = idx.reshape(-1)
                flat[-1] = flat[0]          # at least one repeat
            return [c.uniform([v, d]), idx]
        add(f"embedding_{tag}", "embedding", mk,
            lambda w, i: F.embedding(i.long(), w), grad=[True, False])

    # layer norm over the last 1 or 2 axes, with and without weight/bias
    for tag, shape, n_axes, has_w, has_b, eps in (
            ("affine", [4, 6], 1, 1, 1, 1e-5), ("plain", [3, 8], 1, 0, 0, 1e-5),
            ("2axes", [2, 3, 5], 2, 1, 1, 1e-5), ("weight", [2, 4, 5], 1, 1, 0, 1e-6),
            ("bias", [5, 7], 1, 0, 1, 1e-5), ("eps", [3, 4], 1, 1, 1, 0.1),
            ("3d_plain", [2, 3, 4], 2, 0, 0, 1e-5)):
        norm = shape[len(shape) - n_axes:]

        def mk(c, shape=shape, norm=norm, has_w=has_w, has_b=has_b):
            xs = [c.uniform(shape, -3.0, 3.0)]
            if has_w:
                xs.append(c.uniform(norm, 0.5, 1.5))
            if has_b:
                xs.append(c.uniform(norm))
            return xs

        def fn(x, *wb, norm=norm, has_w=has_w, has_b=has_b, eps=eps):
            w = wb[0] if has_w else None
            b = wb[-1] if has_b else None
            return F.layer_norm(x, norm, w, b, eps)
        add(f"layer_norm_{tag}", "layer_norm", mk, fn,
            iattrs={"n_axes": [n_axes], "has_weight": [has_w], "has_bias": [has_b]},
            fattrs={"eps": [eps]})

    # hardtanh and relu6, with elements exactly at the bounds (gradient 0)
    for tag, lo, hi in (("default", -1.0, 1.0), ("wide", -2.0, 0.5)):
        add(f"hardtanh_{tag}", "hardtanh",
            lambda c, lo=lo, hi=hi: [with_values(c.uniform([5, 6], -3.0, 3.0), [lo, hi]).reshape(5, 6)],
            lambda x, lo=lo, hi=hi: F.hardtanh(x, lo, hi), fattrs={"min": [lo], "max": [hi]})
    for tag, shape in (("2d", [6, 7]), ("3d", [2, 3, 5])):
        add(f"relu6_{tag}", "relu6",
            lambda c, shape=shape: [with_values(c.uniform(shape, -2.0, 8.0), [0.0, 6.0]).reshape(shape)],
            F.relu6)

    # flatten
    for tag, shape, start in (("s1", [2, 3, 4, 5], 1), ("s0", [3, 4, 2], 0),
                              ("neg", [2, 3, 4, 5], -2), ("last", [3, 4], 1)):
        add(f"flatten_{tag}", "flatten", lambda c, shape=shape: [c.uniform(shape)],
            lambda x, start=start: torch.flatten(x, start), iattrs={"start": [start]})

    # attention: softmax(q k^T * scale + mask) v
    def attention(q, k, v, mask=None, scale=0.0):
        s = scale if scale else 1.0 / math.sqrt(q.shape[-1])
        scores = q @ k.transpose(-2, -1) * s
        if mask is not None:
            scores = scores + mask
        return torch.softmax(scores, -1) @ v

    def causal(lq, lk):
        m = torch.zeros(lq, lk, dtype=F32)
        m[torch.triu(torch.ones(lq, lk, dtype=torch.bool), 1)] = -1e9
        return m

    for tag, sq, sk, sv, mask, scale in (
            ("3d", [2, 5, 8], [2, 7, 8], [2, 7, 6], None, 0.0),
            ("heads", [2, 3, 5, 4], [2, 3, 5, 4], [2, 3, 5, 4], None, 0.0),
            ("scale", [3, 4, 6], [3, 6, 6], [3, 6, 5], None, 0.5),
            ("causal", [2, 3, 5, 4], [2, 3, 5, 4], [2, 3, 5, 4], "causal", 0.0),
            ("padmask", [2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 3], "pad", 0.0),
            ("bcast", [2, 4, 8], [4, 8], [4, 5], "rand", 0.25)):
        def mk(c, sq=sq, sk=sk, sv=sv, mask=mask):
            xs = [c.uniform(sq, -1.5, 1.5), c.uniform(sk, -1.5, 1.5), c.uniform(sv)]
            if mask == "causal":
                xs.append(causal(sq[-2], sk[-2]))
            elif mask == "pad":
                # key padding: batch element 1 ignores its last two keys
                m = torch.zeros(sq[0], 1, 1, sk[-2], dtype=F32)
                m[1, 0, 0, -2:] = -1e9
                xs.append(m)
            elif mask == "rand":
                xs.append(c.uniform([sq[-2], sk[-2]], -2.0, 0.0))
            return xs
        has_mask = mask is not None
        add(f"attention_{tag}", "attention", mk,
            lambda *xs, scale=scale: attention(*xs, scale=scale),
            iattrs={"has_mask": [int(has_mask)]}, fattrs={"scale": [scale]},
            grad=[True, True, True] + ([False] if has_mask else []))
    return files


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "nn")
    os.makedirs(outdir, exist_ok=True)
    files = gen(outdir)
    assert len(files) == len(set(files)), "duplicate case name"
    with open(os.path.join(outdir, "INDEX"), "w") as f:
        f.write("".join(n + "\n" for n in sorted(files)))
    print(f"gen_nn: wrote {len(files)} cases to {os.path.normpath(outdir)}")


if __name__ == "__main__":
    main()
