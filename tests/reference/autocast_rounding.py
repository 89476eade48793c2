#!/usr/bin/env python3
"""Where autocast rounds, in float64: is a bf16 gradient's distance from
float64 lazyc's kernels, or the rounding points of its design?

Two float64 emulations of a model's training gradients (smoke size, the
seeded weights and batch of model_parity.py's make_case, dropout off,
train mode), with every convolution's and linear layer's products on
bf16-rounded operands:
  lazyc-style: the operands x and w rounded forward, the incoming gradient
      rounded for both backward products; the products' results, biases
      and everything else unrounded (lazyc's products return float32);
  torch-style: the same, and the products' results rounded too (PyTorch's
      autocast returns bf16 from them).
For each model and seed it prints the worst and the mean gradient cosine
with float64 of both; for seed 0 (the batch autocast_parity.py uses) also
lazyc's own (`lazyc grads --dtype bf16`) and lazyc's against the
lazyc-style emulation, which is 1 up to float32 sums where the kernels
round where the design says. Attention's own products (matmul) are not
emulated, so transformers are out of scope; and a convolution that
autocast keeps float32 (Winograd's, on an AVX512_BF16 CPU; grouped and
depthwise ones with AMX) is emulated rounded all the same (docs/design.md,
autocast): lazyc against the emulation then shows those layers too.

    autocast_rounding.py --lazyc BUILD/lazyc [--models a,b] [--seeds N] [--eval]

--eval: both passes in eval mode (batch norm on the running statistics),
as autocast_parity.py --eval. A model may be NAME@SIDExBATCH, as there.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bert_ref  # noqa: E402
from model_parity import as_f32, loss_of, make_case  # noqa: E402
from write_safetensors import load_file, save_file  # noqa: E402

ORIG_CONV, ORIG_LINEAR = F.conv2d, F.linear


def rnd(t):
    return t.to(torch.bfloat16).to(t.dtype)


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def emulation(round_out):
    class Conv(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, stride, padding, dilation, groups):
            xr, wr = rnd(x), rnd(w)
            ctx.save_for_backward(xr, wr)
            ctx.cfg = (stride, padding, dilation, groups, x.shape, w.shape)
            y = torch.ops.aten.convolution(xr, wr, None, stride, padding, dilation, False, [0, 0],
                                           groups)
            return rnd(y) if round_out else y

        @staticmethod
        def backward(ctx, gy):
            xr, wr = ctx.saved_tensors
            stride, padding, dilation, groups, xs, ws = ctx.cfg
            g = rnd(gy)
            dx = torch.nn.grad.conv2d_input(xs, wr, g, stride, padding, dilation, groups)
            dw = torch.nn.grad.conv2d_weight(xr, ws, g, stride, padding, dilation, groups)
            return dx, dw, None, None, None, None

    class Lin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            xr, wr = rnd(x), rnd(w)
            ctx.save_for_backward(xr, wr)
            y = xr @ wr.t()
            return rnd(y) if round_out else y

        @staticmethod
        def backward(ctx, gy):
            xr, wr = ctx.saved_tensors
            g = rnd(gy)
            return g @ wr, g.reshape(-1, g.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])

    def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        if isinstance(padding, str):
            return ORIG_CONV(x, w, b, stride, padding, dilation, groups)
        y = Conv.apply(x, w, pair(stride), pair(padding), pair(dilation), groups)
        return y if b is None else y + b.view(1, -1, 1, 1)

    def linear(x, w, b=None):
        y = Lin.apply(x, w)
        return y if b is None else y + b

    return conv2d, linear


def grads(name, products=None, train=True, case=0):
    model, x, y = make_case(name, case)
    model = bert_ref.disable_dropout(model.double()).train(train)
    if products:
        F.conv2d, F.linear = products
    try:
        loss = loss_of(model, x.double() if x.is_floating_point() else x, y)
        loss.backward()
    finally:
        F.conv2d, F.linear = ORIG_CONV, ORIG_LINEAR
    return {n: p.grad.detach().double().flatten() for n, p in model.named_parameters()
            if p.grad is not None}


def cosines(got, ref):
    out = {}
    for k, v in ref.items():
        a = got[k]
        na, nb = a.norm(), v.norm()
        if nb > 0:
            out[k] = float((a @ v) / (na * nb)) if na > 0 else 0.0
    return out


def lazyc_grads(lazyc, name, tmp, train=True):
    model, x, y = make_case(name)
    w, i, g = (os.path.join(tmp, f) for f in ("w.safetensors", "i.safetensors", "g.safetensors"))
    save_file({k: as_f32(v) for k, v in model.state_dict().items()}, w)
    save_file({"x": x, "y": y}, i)
    r = subprocess.run([lazyc, "grads", "--model", name.split("@")[0], "--size", "smoke", "--weights", w,
                        "--inputs", i, "--out", g, "--dtype", "bf16"] + ([] if train else ["--eval"]),
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: lazyc grads exited {r.returncode}: {r.stderr[-500:]}")
    got, _ = load_file(g)
    return {k: v.double().flatten() for k, v in got.items() if k != "loss"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lazyc", required=True)
    ap.add_argument("--models", default="squeezenet1_1,vgg16,alexnet")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--eval", action="store_true")
    args = ap.parse_args()
    train = not args.eval
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            # seed 0: make_case's own batch and weights; others: other cases
            for seed in range(args.seeds):
                ref, emu = grads(name, train=train, case=seed), grads(name, emulation(False), train, seed)
                rows = {"lazyc-style": cosines(emu, ref),
                        "torch-style": cosines(grads(name, emulation(True), train, seed), ref)}
                if seed == 0:
                    own = lazyc_grads(args.lazyc, name, tmp, train)
                    rows["lazyc"] = cosines(own, ref)
                    rows["lazyc vs lazyc-style"] = cosines(own, emu)
                line = "; ".join(f"{k} worst {min(c.values()):.5f} ({min(c, key=c.get)}) "
                                 f"mean {sum(c.values()) / len(c):.5f}" for k, c in rows.items())
                print(f"{name} seed {seed}: {line}", flush=True)


if __name__ == "__main__":
    main()
