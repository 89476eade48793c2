#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of the conv/pool/batch-norm parity test.

    /usr/bin/python3 tests/reference/gen_conv.py [OUTDIR]

OUTDIR defaults to tests/fixtures/conv. The file format, the input drawing
and the f64 reference are gen_fixtures.py's (read its docstring): inputs in
f32 from a generator seeded by the case name, the reference computed by
PyTorch in f64 from those exact inputs and rounded to f32.

Cases (op line, then attributes):

    conv2d               iattr stride padding dilation (2 each), groups, bias;
                         x0 = input, x1 = weight, x2 = bias (when bias 1)
    max_pool2d           iattr kernel stride padding (2 each), ceil_mode
    avg_pool2d           the same + count_include_pad
    adaptive_avg_pool2d  iattr out (2)
    batch_norm           iattr training, affine, stats; fattr momentum, eps;
                         x0 = input, x1 = weight, x2 = bias (when affine);
                         rm, rv = running stats before (when stats) and
                         rm_out, rv_out after the call
    convnet              conv(pad 1) -> batch_norm (training, stats) -> relu
                         -> max_pool(3, 2, 1) -> depthwise conv (pad 1, bias)
                         -> avg_pool(2) -> adaptive_avg_pool(1, 1); x0..x5 =
                         input, conv w, bn weight/bias, depthwise w/b (no
                         bias before batch norm: its gradient is 0)

Every case has w (the weighting), out, and gI = d sum(out * w) / d xI for
each xI. Max-pool inputs are permutations of distinct values, so no window
has a tie and the argmax (hence the gradient) is the same in f32 and f64.
"""
import os
import sys
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import F32, Case, write_fixture  # noqa: E402


def weighting(name, shape):
    wgen = torch.Generator().manual_seed(zlib.crc32((name + "/w").encode()))
    return 0.5 + torch.rand(shape, generator=wgen, dtype=F32)


def distinct(c, shape, lo=-2.0, hi=2.0):
    """Distinct values in [lo, hi), shuffled: max pooling without ties."""
    n = 1
    for d in shape:
        n *= d
    perm = torch.randperm(n, generator=c.gen).to(F32)
    return (lo + (hi - lo) * (perm + 0.5) / n).reshape(shape)


def grad_case(outdir, name, op, inputs, fn, iattrs=None, fattrs=None, extra=None):
    """inputs: f32 tensors that all carry a gradient; fn maps their f64
    copies to the output (or (output, [(name, tensor), ...]) for extra
    results such as updated running statistics)."""
    xs = [t.double().requires_grad_(True) for t in inputs]
    res = fn(*xs)
    out, more = res if isinstance(res, tuple) else (res, [])
    w = weighting(name, out.shape)
    (out * w.double()).sum().backward()
    tensors = [(f"x{i}", t) for i, t in enumerate(inputs)]
    tensors += extra or []
    tensors += [("w", w), ("out", out.detach().float())]
    tensors += [(f"g{i}", x.grad.float()) for i, x in enumerate(xs)]
    tensors += [(k, v.detach().float()) for k, v in more]
    return write_fixture(outdir, name, op, tensors, iattrs, fattrs)


def gen_conv(outdir, files):
    # name, x shape, w shape, stride, padding, dilation, groups, bias
    cases = (
        ("conv_basic", [2, 3, 7, 7], [4, 3, 3, 3], (1, 1), (1, 1), (1, 1), 1, True),
        ("conv_stride2", [2, 3, 8, 9], [5, 3, 3, 3], (2, 2), (1, 1), (1, 1), 1, False),
        ("conv_dilation2", [1, 2, 9, 8], [3, 2, 3, 3], (1, 1), (2, 2), (2, 2), 1, True),
        ("conv_groups2", [2, 4, 6, 6], [6, 2, 3, 3], (1, 1), (1, 1), (1, 1), 2, True),
        ("conv_depthwise", [2, 4, 7, 7], [4, 1, 3, 3], (2, 2), (1, 1), (1, 1), 4, True),
        ("conv_depthwise_mult", [1, 3, 6, 6], [6, 1, 3, 3], (1, 1), (0, 0), (1, 1), 3, False),
        ("conv_depthwise_big", [2, 16, 12, 12], [16, 1, 3, 3], (1, 1), (1, 1), (1, 1), 16, True),
        ("conv_1x1", [2, 5, 4, 4], [3, 5, 1, 1], (1, 1), (0, 0), (1, 1), 1, True),
        ("conv_1x1_stride2", [2, 4, 6, 6], [4, 4, 1, 1], (2, 2), (0, 0), (1, 1), 1, False),
        ("conv_rect", [2, 3, 9, 7], [4, 3, 3, 2], (2, 1), (1, 0), (1, 2), 1, True),
        ("conv_stem7x7", [1, 3, 16, 16], [4, 3, 7, 7], (2, 2), (3, 3), (1, 1), 1, False),
        ("conv_team", [8, 8, 10, 10], [8, 8, 3, 3], (1, 1), (1, 1), (1, 1), 1, True),
        ("conv_team_groups", [4, 8, 8, 8], [8, 2, 3, 3], (1, 1), (1, 1), (1, 1), 4, False),
        ("conv_team_1x1", [8, 16, 8, 8], [12, 16, 1, 1], (1, 1), (0, 0), (1, 1), 1, False),
    )
    for name, xs, ws, st, pad, dil, groups, bias in cases:
        c = Case(name)
        bound = 1.0 / (ws[1] * ws[2] * ws[3]) ** 0.5
        inputs = [c.uniform(xs), c.uniform(ws, -bound, bound)]
        if bias:
            inputs.append(c.uniform([ws[0]], -bound, bound))
        files.append(grad_case(
            outdir, name, "conv2d", inputs,
            lambda x, w, b=None, st=st, pad=pad, dil=dil, groups=groups:
                F.conv2d(x, w, b, st, pad, dil, groups),
            iattrs={"stride": st, "padding": pad, "dilation": dil, "groups": [groups],
                    "bias": [int(bias)]}))


def gen_pools(outdir, files):
    # name, x shape, kernel, stride, padding, ceil_mode
    maxes = (
        ("max_pool_k2", [2, 3, 8, 8], (2, 2), (2, 2), (0, 0), 0),
        ("max_pool_k3s2p1", [2, 3, 9, 9], (3, 3), (2, 2), (1, 1), 0),
        ("max_pool_ceil", [1, 2, 7, 7], (3, 3), (2, 2), (0, 0), 1),
        ("max_pool_ceil_pad", [1, 2, 8, 8], (3, 3), (2, 2), (1, 1), 1),
        ("max_pool_rect", [2, 2, 7, 9], (3, 2), (2, 1), (1, 0), 0),
        ("max_pool_big", [8, 8, 16, 16], (3, 3), (2, 2), (1, 1), 0),
    )
    for name, xs, k, st, pad, ceil in maxes:
        c = Case(name)
        files.append(grad_case(
            outdir, name, "max_pool2d", [distinct(c, xs)],
            lambda x, k=k, st=st, pad=pad, ceil=ceil:
                F.max_pool2d(x, k, st, pad, ceil_mode=bool(ceil)),
            iattrs={"kernel": k, "stride": st, "padding": pad, "ceil_mode": [ceil]}))
    # name, x shape, kernel, stride, padding, ceil_mode, count_include_pad
    avgs = (
        ("avg_pool_k2", [2, 3, 8, 8], (2, 2), (2, 2), (0, 0), 0, 1),
        ("avg_pool_k3s2p1_cip1", [2, 3, 9, 9], (3, 3), (2, 2), (1, 1), 0, 1),
        ("avg_pool_k3s2p1_cip0", [2, 3, 9, 9], (3, 3), (2, 2), (1, 1), 0, 0),
        ("avg_pool_ceil_cip1", [1, 2, 6, 6], (3, 3), (2, 2), (1, 1), 1, 1),
        ("avg_pool_ceil_cip0", [1, 2, 6, 6], (3, 3), (2, 2), (1, 1), 1, 0),
        ("avg_pool_ceil_nopad", [1, 2, 6, 6], (4, 4), (3, 3), (0, 0), 1, 1),
        ("avg_pool_rect", [2, 2, 7, 9], (3, 2), (2, 1), (1, 0), 0, 0),
        ("avg_pool_big", [8, 8, 16, 16], (3, 3), (2, 2), (1, 1), 0, 1),
    )
    for name, xs, k, st, pad, ceil, cip in avgs:
        c = Case(name)
        files.append(grad_case(
            outdir, name, "avg_pool2d", [c.uniform(xs)],
            lambda x, k=k, st=st, pad=pad, ceil=ceil, cip=cip:
                F.avg_pool2d(x, k, st, pad, ceil_mode=bool(ceil), count_include_pad=bool(cip)),
            iattrs={"kernel": k, "stride": st, "padding": pad, "ceil_mode": [ceil],
                    "count_include_pad": [cip]}))
    adaptive = (
        ("adaptive_global", [2, 3, 8, 8], (1, 1)),
        ("adaptive_uneven", [2, 3, 10, 7], (3, 4)),
        ("adaptive_up", [1, 2, 4, 4], (7, 7)),
        ("adaptive_mixed", [1, 2, 5, 3], (2, 6)),
        ("adaptive_big", [8, 16, 10, 10], (5, 5)),
    )
    for name, xs, o in adaptive:
        c = Case(name)
        files.append(grad_case(
            outdir, name, "adaptive_avg_pool2d", [c.uniform(xs)],
            lambda x, o=o: F.adaptive_avg_pool2d(x, o), iattrs={"out": o}))


def gen_batch_norm(outdir, files):
    # name, x shape, training, affine, stats, momentum, eps
    cases = (
        ("bn_train_4d", [4, 3, 5, 5], 1, 1, 1, 0.1, 1e-5),
        ("bn_train_2d", [6, 5], 1, 1, 1, 0.1, 1e-5),
        ("bn_train_3d", [3, 4, 6], 1, 1, 1, 0.1, 1e-5),
        ("bn_train_noaffine", [4, 3, 4, 4], 1, 0, 1, 0.1, 1e-5),
        ("bn_train_nostats", [4, 3, 4, 4], 1, 1, 0, 0.1, 1e-5),
        ("bn_train_momentum", [2, 4, 3, 3], 1, 1, 1, 0.3, 1e-3),
        ("bn_eval_4d", [3, 4, 3, 3], 0, 1, 1, 0.1, 1e-5),
        ("bn_eval_2d", [5, 6], 0, 1, 1, 0.1, 1e-5),
        ("bn_eval_noaffine", [3, 4, 3, 3], 0, 0, 1, 0.1, 1e-5),
    )
    for name, xs, training, affine, stats, momentum, eps in cases:
        c = Case(name)
        C = xs[1]
        # an offset and a spread per channel, so the statistics matter
        shift = [1] * len(xs)
        shift[1] = C
        x = c.uniform(xs) * c.uniform(shift, 0.5, 3.0) + c.uniform(shift, -2.0, 2.0)
        inputs = [x]
        if affine:
            inputs += [c.uniform([C], 0.5, 1.5), c.uniform([C], -0.5, 0.5)]
        extra, rm, rv = [], None, None
        if stats:
            rm, rv = c.uniform([C], -0.5, 0.5), c.uniform([C], 0.5, 2.0)
            extra = [("rm", rm), ("rv", rv)]

        def fn(x, w=None, b=None, training=training, momentum=momentum, eps=eps, rm=rm, rv=rv):
            if rm is None:
                return F.batch_norm(x, None, None, w, b, bool(training), momentum, eps)
            rmd, rvd = rm.double(), rv.double()
            out = F.batch_norm(x, rmd, rvd, w, b, bool(training), momentum, eps)
            return out, [("rm_out", rmd), ("rv_out", rvd)]
        files.append(grad_case(
            outdir, name, "batch_norm", inputs, fn, extra=extra,
            iattrs={"training": [training], "affine": [affine], "stats": [stats]},
            fattrs={"momentum": [momentum], "eps": [eps]}))


def max_pool_margin(h, k, s, p):
    """Smallest gap between a window's largest and second-largest value,
    over windows whose max is positive (ties at 0 after relu carry no
    gradient)."""
    cols = F.unfold(h.reshape(-1, 1, h.shape[2], h.shape[3]), k, padding=p, stride=s,
                    dilation=1)
    # padding reads 0 in unfold, not -inf: a window whose max is positive
    # still has the same two largest values
    top = cols.topk(2, dim=1).values
    pos = top[:, 0] > 0
    return float((top[:, 0] - top[:, 1])[pos].min())


def gen_convnet(outdir, files):
    name = "convnet"
    c = Case(name)
    x = c.uniform([2, 3, 12, 12])
    w1 = c.uniform([8, 3, 3, 3], -0.3, 0.3)
    bnw, bnb = c.uniform([8], 0.5, 1.5), c.uniform([8], -0.5, 0.5)
    w2 = c.uniform([8, 1, 3, 3], -0.5, 0.5)
    b2 = c.uniform([8], -0.3, 0.3)
    rm, rv = c.uniform([8], -0.5, 0.5), c.uniform([8], 0.5, 2.0)
    rmd, rvd = rm.double(), rv.double()

    def fn(x, w1, bnw, bnb, w2, b2):
        h = F.conv2d(x, w1, None, padding=1)
        h = F.relu(F.batch_norm(h, rmd, rvd, bnw, bnb, True, 0.1, 1e-5))
        assert max_pool_margin(h.detach(), 3, 2, 1) > 1e-4, "near-tie in convnet's max pool"
        h = F.max_pool2d(h, 3, 2, 1)
        h = F.conv2d(h, w2, b2, padding=1, groups=8)
        h = F.avg_pool2d(h, 2)
        return F.adaptive_avg_pool2d(h, (1, 1)), [("rm_out", rmd), ("rv_out", rvd)]
    files.append(grad_case(outdir, name, "convnet", [x, w1, bnw, bnb, w2, b2], fn,
                           extra=[("rm", rm), ("rv", rv)]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "conv")
    os.makedirs(outdir, exist_ok=True)
    files = []
    gen_conv(outdir, files)
    gen_pools(outdir, files)
    gen_batch_norm(outdir, files)
    gen_convnet(outdir, files)
    assert len(files) == len(set(files)), "duplicate case name"
    with open(os.path.join(outdir, "INDEX"), "w") as f:
        f.write("".join(n + "\n" for n in sorted(files)))
    print(f"gen_conv: wrote {len(files)} cases to {os.path.normpath(outdir)}")


if __name__ == "__main__":
    main()
