#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of the parity tests.

    /usr/bin/python3 tests/reference/gen_fixtures.py [OUTDIR]

OUTDIR defaults to tests/fixtures (committed). test_fixtures_fresh.sh runs
this script into a temporary directory and checks that the output is byte
for byte the committed one, so the fixtures provably come from here.

Each case is one file, NAME.lzf:

    lazyc-fixture 1
    op NAME                   the lazyc op the C test runs (lz_NAME)
    iattr KEY V1 V2 ...       integer attributes (axes, keepdim, shape, ...)
    fattr KEY V1 ...          float attributes (pow's exponent, sgd's lr, ...)
    tensor NAME DTYPE NDIM D0 D1 ...
    ...
    data
    <raw little-endian data of every tensor, in header order>

Op cases name their tensors x0, x1, ... (inputs), w (the weighting), out
(forward value) and gI (d sum(out * w) / d xI, present exactly for the inputs
that carry a gradient). Ops without a gradient (comparisons, casts to
integers) have no w and no gI. INDEX lists every case file.

Inputs are drawn in f32 from torch.rand (uniform: its bits do not depend on
the CPU, unlike randn's vectorised path), one generator per case seeded from
the case name, so adding a case changes no other. The reference is computed
by PyTorch's own ops and autograd in f64 from those exact f32 inputs and
rounded to f32: the fixtures then do not depend on which f32 kernels (AVX2,
AVX-512, OpenBLAS core type) the generating machine picks, the freshness
check is byte-exact anywhere, and the tolerance measures lazyc's f32 error
alone.
"""
import os
import sys
import zlib

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

F32, I64, I32 = torch.float32, torch.int64, torch.int32
DTYPE_NAME = {F32: "f32", I64: "i64", I32: "i32"}
DTYPE_LE = {F32: "<f4", I64: "<i8", I32: "<i4"}


class Case:
    def __init__(self, name):
        self.name = name
        self.gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def uniform(self, shape, lo=-2.0, hi=2.0):
        return lo + (hi - lo) * torch.rand(shape, generator=self.gen, dtype=F32)

    def signed(self, shape, lo=0.5, hi=2.0):
        """Magnitudes in [lo, hi) with random signs: safe divisors."""
        mag = self.uniform(shape, lo, hi)
        sign = torch.where(torch.rand(shape, generator=self.gen) < 0.5, -1.0, 1.0)
        return mag * sign

    def ints(self, shape, lo, hi, dtype=I64):
        return torch.randint(lo, hi, shape, generator=self.gen, dtype=dtype)


def header_tensor(name, t):
    dims = " ".join(str(d) for d in t.shape)
    return f"tensor {name} {DTYPE_NAME[t.dtype]} {t.dim()} {dims}".rstrip()


def write_fixture(outdir, name, op, tensors, iattrs=None, fattrs=None):
    lines = ["lazyc-fixture 1", f"op {op}"]
    for key, vals in (iattrs or {}).items():
        lines.append(f"iattr {key} " + " ".join(str(int(v)) for v in vals))
    for key, vals in (fattrs or {}).items():
        lines.append(f"fattr {key} " + " ".join(repr(float(v)) for v in vals))
    blobs = []
    for tname, t in tensors:
        t = t.detach().contiguous()
        assert t.dtype in DTYPE_NAME, (name, tname, t.dtype)
        lines.append(header_tensor(tname, t))
        blobs.append(t.numpy().astype(DTYPE_LE[t.dtype]).tobytes())
    lines.append("data")
    path = os.path.join(outdir, name + ".lzf")
    with open(path, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode("ascii"))
        for b in blobs:
            f.write(b)
    return name + ".lzf"


# --------------------------------------------------------------------------
# op cases

def op_case(outdir, name, op, inputs, fn, iattrs=None, fattrs=None, grad=None):
    """inputs: f32/int tensors; fn maps f64 (or int) inputs to the output.
    grad: which inputs carry a gradient (default: every f32 input)."""
    c_inputs = [t.clone() for t in inputs]
    if grad is None:
        grad = [t.dtype == F32 for t in inputs]
    xs = []
    for t, g in zip(inputs, grad):
        x = t.double() if t.dtype == F32 else t.clone()
        if g:
            x.requires_grad_(True)
        xs.append(x)
    out = fn(*xs)
    tensors = [(f"x{i}", t) for i, t in enumerate(c_inputs)]
    if any(grad):
        wgen = torch.Generator().manual_seed(zlib.crc32((name + "/w").encode()))
        w = 0.5 + torch.rand(out.shape, generator=wgen, dtype=F32)
        (out * w.double()).sum().backward()
        tensors.append(("w", w))
        tensors.append(("out", out.detach().float()))
        for i, (x, g) in enumerate(zip(xs, grad)):
            if g:
                tensors.append((f"g{i}", x.grad.float()))
    else:
        o = out.detach()
        tensors.append(("out", o.float() if o.is_floating_point() else o))
    return write_fixture(outdir, name, op, tensors, iattrs, fattrs)


def no_ties(x, dims):
    """max over dims must have a unique argmax per group, or the gradient
    (split among ties in torch) is not well defined."""
    m = torch.amax(x, dim=dims, keepdim=True)
    assert int((x == m).sum()) == m.numel(), "tie in max_axes input"


def gen_ops(outdir):
    files = []

    def add(name, op, make_inputs, fn, **kw):
        c = Case(name)
        files.append(op_case(outdir, name, op, make_inputs(c), fn, **kw))

    # element-wise binary, with broadcasting
    binary = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "maximum": torch.maximum,
    }
    shapes = {
        "same": ([4, 5], [4, 5]),
        "row": ([2, 3, 4], [4]),
        "outer": ([2, 1, 4], [3, 1]),
        "scalar": ([3, 4], []),
        "lead": ([1], [3, 4]),
    }
    for op, fn in binary.items():
        for sname, (sa, sb) in shapes.items():
            if op == "div":
                mk = lambda c, sa=sa, sb=sb: [c.uniform(sa), c.signed(sb)]
            else:
                mk = lambda c, sa=sa, sb=sb: [c.uniform(sa), c.uniform(sb)]
            add(f"{op}_{sname}", op, mk, fn)

    # element-wise unary
    unary = {
        "neg": (torch.neg, -2.0, 2.0),
        "exp": (torch.exp, -2.0, 2.0),
        "log": (torch.log, 0.1, 3.0),
        "sqrt": (torch.sqrt, 0.1, 3.0),
        "rsqrt": (torch.rsqrt, 0.2, 3.0),
        "tanh": (torch.tanh, -3.0, 3.0),
        "sigmoid": (torch.sigmoid, -6.0, 6.0),
        "relu": (torch.relu, -2.0, 2.0),
        "gelu": (F.gelu, -4.0, 4.0),
    }
    for op, (fn, lo, hi) in unary.items():
        add(f"{op}_2d", op, lambda c, lo=lo, hi=hi: [c.uniform([6, 7], lo, hi)], fn)
        add(f"{op}_3d", op, lambda c, lo=lo, hi=hi: [c.uniform([2, 3, 5], lo, hi)], fn)

    for tag, e, lo in (("2", 2.0, -2.0), ("3", 3.0, -2.0), ("half", 0.5, 0.1),
                       ("m1p5", -1.5, 0.3), ("0", 0.0, -2.0), ("1", 1.0, -2.0)):
        add(f"pow_{tag}", "pow", lambda c, lo=lo: [c.uniform([5, 6], lo, 2.0)],
            lambda x, e=e: torch.pow(x, e), fattrs={"exponent": [e]})

    # comparisons: small integer values so that ties (eq, ge, le) occur
    cmp = {"gt": torch.gt, "lt": torch.lt, "ge": torch.ge, "le": torch.le, "eq": torch.eq}
    for op, fn in cmp.items():
        add(f"{op}_same", op,
            lambda c: [c.ints([4, 5], -2, 3).float(), c.ints([4, 5], -2, 3).float()],
            lambda a, b, fn=fn: fn(a, b).float(), grad=[False, False])
        add(f"{op}_bcast", op,
            lambda c: [c.ints([2, 3, 4], -2, 3).float(), c.ints([3, 1], -2, 3).float()],
            lambda a, b, fn=fn: fn(a, b).float(), grad=[False, False])

    # where: cond != 0 selects a (cond holds -1, 0 and 1)
    def where_fn(cond, a, b):
        return torch.where(cond != 0, a, b)
    add("where_same", "where",
        lambda c: [c.ints([4, 5], -1, 2).float(), c.uniform([4, 5]), c.uniform([4, 5])],
        where_fn, grad=[False, True, True])
    add("where_bcast", "where",
        lambda c: [c.ints([3, 1], -1, 2).float(), c.uniform([2, 3, 4]), c.uniform([4])],
        where_fn, grad=[False, True, True])

    # casts: the output dtype is the target (float to int truncates toward 0)
    add("cast_f32_i64", "cast", lambda c: [c.uniform([4, 6], -5.0, 5.0)],
        lambda x: x.to(I64), grad=[False])
    add("cast_f32_i32", "cast", lambda c: [c.uniform([4, 6], -5.0, 5.0)],
        lambda x: x.to(I32), grad=[False])
    add("cast_i64_f32", "cast", lambda c: [c.ints([4, 6], -100, 100)],
        lambda x: x.to(F32), grad=[False])
    add("cast_i32_f32", "cast", lambda c: [c.ints([4, 6], -100, 100, I32)],
        lambda x: x.to(F32), grad=[False])
    add("cast_i64_i32", "cast", lambda c: [c.ints([4, 6], -100, 100)],
        lambda x: x.to(I32), grad=[False])
    add("cast_f32_f32", "cast", lambda c: [c.uniform([4, 6])], lambda x: x * 1.0)

    # reductions
    add("sum_all", "sum", lambda c: [c.uniform([6, 7, 5])], torch.sum)
    add("mean_all", "mean", lambda c: [c.uniform([6, 7, 5])], torch.mean)
    red = {"sum_axes": torch.sum, "mean_axes": torch.mean, "max_axes": torch.amax}
    red_cases = (("a1", [6, 7, 5], [1], 0), ("a1k", [6, 7, 5], [1], 1),
                 ("a20", [6, 7, 5], [2, 0], 0), ("a02k", [6, 7, 5], [0, 2], 1),
                 ("neg", [6, 7, 5], [-1], 0), ("all", [6, 7, 5], [0, 1, 2], 0),
                 ("2d0", [9, 8], [0], 0))
    for op, fn in red.items():
        for tag, shape, axes, keep in red_cases:
            def mk(c, shape=shape, axes=axes, op=op):
                x = c.uniform(shape)
                if op == "max_axes":
                    no_ties(x, axes)
                return [x]
            add(f"{op}_{tag}", op, mk,
                lambda x, fn=fn, axes=axes, keep=keep: fn(x, dim=axes, keepdim=bool(keep)),
                iattrs={"axes": axes, "keepdim": [keep]})

    # shape ops
    for tag, src, dst in (("flat", [2, 3, 4], [6, 4]), ("infer", [4, 6], [-1, 3, 2]),
                          ("to1d", [2, 3, 4], [24]), ("add1", [3, 4], [3, 1, 4, 1])):
        add(f"reshape_{tag}", "reshape", lambda c, src=src: [c.uniform(src)],
            lambda x, dst=dst: x.reshape(dst), iattrs={"shape": dst})
    for tag, src, perm in (("3d", [2, 3, 4], [2, 0, 1]), ("4d", [2, 3, 4, 2], [3, 1, 0, 2]),
                           ("2d", [5, 3], [1, 0])):
        add(f"permute_{tag}", "permute", lambda c, src=src: [c.uniform(src)],
            lambda x, perm=perm: x.permute(perm), iattrs={"perm": perm})
    for tag, src, ax in (("2d", [5, 3], [0, 1]), ("3d02", [2, 3, 4], [0, 2]),
                         ("neg", [2, 3, 4], [-1, -2])):
        add(f"transpose_{tag}", "transpose", lambda c, src=src: [c.uniform(src)],
            lambda x, ax=ax: x.transpose(ax[0], ax[1]), iattrs={"axes": ax})
    for tag, src, dst in (("col", [3, 1], [3, 5]), ("lead", [4], [2, 3, 4]),
                          ("mid", [1, 3, 1], [2, 3, 4]), ("same", [2, 3], [2, 3])):
        add(f"expand_{tag}", "expand", lambda c, src=src: [c.uniform(src)],
            lambda x, dst=dst: x.expand(dst), iattrs={"shape": dst})
    for tag, src, axis, start, end in (("a0", [6, 4], 0, 1, 4), ("a1", [3, 7, 2], 1, 2, 7),
                                       ("neg", [3, 7], -1, -3, -1), ("last", [5, 4, 3], 2, 0, 1)):
        def slice_fn(x, axis=axis, start=start, end=end):
            idx = [slice(None)] * x.dim()
            idx[axis] = slice(start, end)
            return x[tuple(idx)]
        add(f"slice_{tag}", "slice", lambda c, src=src: [c.uniform(src)], slice_fn,
            iattrs={"axis": [axis], "start": [start], "end": [end]})
    for tag, shapes_, axis in (("a0", [[2, 4], [3, 4], [1, 4]], 0),
                               ("a1", [[2, 3, 4], [2, 1, 4], [2, 2, 4]], 1),
                               ("neg", [[3, 2], [3, 5]], -1)):
        add(f"cat_{tag}", "cat", lambda c, shapes_=shapes_: [c.uniform(s) for s in shapes_],
            lambda *xs, axis=axis: torch.cat(xs, dim=axis), iattrs={"axis": [axis]})

    # matmul: 2-d, batched, broadcast batch, and numpy's 1-d rules
    for tag, sa, sb in (("2d", [5, 7], [7, 3]), ("batched", [2, 5, 7], [2, 7, 3]),
                        ("bcast", [2, 1, 4, 6], [3, 6, 5]), ("mat_batch", [4, 6], [2, 6, 5]),
                        ("batch_mat", [3, 4, 6], [6, 5]), ("vec_mat", [7], [7, 3]),
                        ("mat_vec", [5, 7], [7]), ("batch_vec", [2, 5, 7], [7]),
                        ("wide", [16, 24], [24, 20])):
        add(f"matmul_{tag}", "matmul", lambda c, sa=sa, sb=sb: [c.uniform(sa), c.uniform(sb)],
            torch.matmul)

    # softmax family
    for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        for tag, shape, axis, lo, hi in (("last", [8, 10], -1, -3.0, 3.0),
                                         ("a0", [5, 6], 0, -3.0, 3.0),
                                         ("mid", [2, 5, 3], 1, -3.0, 3.0),
                                         ("large", [4, 9], 1, -60.0, 60.0)):
            add(f"{op}_{tag}", op, lambda c, shape=shape, lo=lo, hi=hi: [c.uniform(shape, lo, hi)],
                lambda x, fn=fn, axis=axis: fn(x, axis), iattrs={"axis": [axis]})

    # cross-entropy: mean over the batch of -log_softmax[target]
    for tag, n, ncls, lo, hi, tdt in (("i64", 8, 10, -3.0, 3.0, I64),
                                      ("i32", 6, 5, -3.0, 3.0, I32),
                                      ("large", 4, 7, -40.0, 40.0, I64),
                                      ("one", 1, 3, -2.0, 2.0, I64)):
        add(f"cross_entropy_{tag}", "cross_entropy",
            lambda c, n=n, ncls=ncls, lo=lo, hi=hi, tdt=tdt:
                [c.uniform([n, ncls], lo, hi), c.ints([n], 0, ncls, tdt)],
            lambda x, t: F.cross_entropy(x, t.long()), grad=[True, False])
    return files


# --------------------------------------------------------------------------
# MLP: 16 -> 32 relu -> 10, batch 8, cross-entropy, SGD momentum

MLP_STEPS = 5


def gen_mlp(outdir, name, lr, momentum, dampening, weight_decay, nesterov):
    c = Case(name)
    n_in, n_hid, n_out, batch = 16, 32, 10, 8
    # nn.Linear's default init is uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
    b1_ = 1.0 / n_in ** 0.5
    b2_ = 1.0 / n_hid ** 0.5
    init = {
        "W1": c.uniform([n_hid, n_in], -b1_, b1_),
        "b1": c.uniform([n_hid], -b1_, b1_),
        "W2": c.uniform([n_out, n_hid], -b2_, b2_),
        "b2": c.uniform([n_out], -b2_, b2_),
    }
    xs = c.uniform([MLP_STEPS, batch, n_in])
    ys = c.ints([MLP_STEPS, batch], 0, n_out)

    params = {k: v.double().clone().requires_grad_(True) for k, v in init.items()}
    order = ["W1", "b1", "W2", "b2"]
    opt = torch.optim.SGD([params[k] for k in order], lr=lr, momentum=momentum,
                          dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
    losses = []
    for step in range(MLP_STEPS):
        opt.zero_grad()
        x = xs[step].double()
        h = torch.relu(x @ params["W1"].t() + params["b1"])
        logits = h @ params["W2"].t() + params["b2"]
        loss = F.cross_entropy(logits, ys[step])
        loss.backward()
        opt.step()
        losses.append(loss.item())

    tensors = [("x", xs), ("y", ys)]
    tensors += [(k, init[k]) for k in order]
    tensors.append(("losses", torch.tensor(losses, dtype=torch.float64).float()))
    tensors += [(k + "_final", params[k].detach().float()) for k in order]
    return write_fixture(outdir, name, "mlp", tensors,
                         iattrs={"steps": [MLP_STEPS], "nesterov": [int(nesterov)]},
                         fattrs={"lr": [lr], "momentum": [momentum], "dampening": [dampening],
                                 "weight_decay": [weight_decay]})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    files = gen_ops(outdir)
    files.append(gen_mlp(outdir, "mlp_sgd_momentum", 0.1, 0.9, 0.0, 1e-4, False))
    files.append(gen_mlp(outdir, "mlp_sgd_nesterov", 0.1, 0.9, 0.0, 1e-4, True))
    assert len(files) == len(set(files)), "duplicate case name"
    with open(os.path.join(outdir, "INDEX"), "w") as f:
        f.write("".join(n + "\n" for n in sorted(files)))
    print(f"gen_fixtures: wrote {len(files)} cases to {os.path.normpath(outdir)}")


if __name__ == "__main__":
    main()
