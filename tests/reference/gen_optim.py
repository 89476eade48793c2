#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of the Adam/AdamW parity test
(tests/test_adamw.c).

    /usr/bin/python3 tests/reference/gen_optim.py [OUTDIR]

OUTDIR defaults to tests/fixtures/optim (committed); test_fixtures_fresh.sh
regenerates it and checks byte-identity. The file format, the Case generator
and the f64-reference convention are gen_fixtures.py's (read its docstring).

Every case names its optimizer in attributes: fattr lr beta1 beta2 eps
weight_decay, iattr decoupled (0: torch.optim.Adam, weight decay added to
the grad; 1: torch.optim.AdamW, decoupled decay) and iattr steps. The
hyper-parameters are rounded to f32 before torch sees them, so both sides
run with the same numbers (lazyc's options are floats).

op mlp_adam: the MLP of gen_fixtures.py's mlp cases (16 -> 32 relu -> 10,
batch 8, cross-entropy, nn.Linear init), trained for `steps` steps with
zero_grad before each backward. Tensors x [steps, 8, 16], y [steps, 8] i64,
W1 b1 W2 b2 (initial), losses [steps], W1_final ... b2_final.

op skip_adam: two parameters p [3] and q [2] with per-step losses
sum(a[s] * p * p) + sum(b[s] * q * q * q), where a parameter takes no part in
some steps: p in steps 0..3, q in steps 2..4. Grads are set to None before
each step (lz_zero_grad's meaning), so torch skips the absent parameter and
its step count stays behind: the bias corrections of p and q differ from
step 2 on. Tensors p, q (initial), a [steps, 3], b [steps, 2], uses
[steps, 2] i64 (1 where p, q take part), p_hist [steps, 3], q_hist [steps, 2]
(values after each step).
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import Case, write_fixture  # noqa: E402

STEPS = 5


def f32(x):
    """The f32 value lazyc's float options hold, as a Python float."""
    return float(np.float32(x))


def make_opt(params, lr, beta1, beta2, eps, weight_decay, decoupled):
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    return cls(params, lr=f32(lr), betas=(f32(beta1), f32(beta2)), eps=f32(eps),
               weight_decay=f32(weight_decay))


def opt_attrs(lr, beta1, beta2, eps, weight_decay, decoupled):
    iattrs = {"steps": [STEPS], "decoupled": [int(decoupled)]}
    fattrs = {"lr": [f32(lr)], "beta1": [f32(beta1)], "beta2": [f32(beta2)], "eps": [f32(eps)],
              "weight_decay": [f32(weight_decay)]}
    return iattrs, fattrs


def gen_mlp(outdir, name, **hp):
    c = Case(name)
    n_in, n_hid, n_out, batch = 16, 32, 10, 8
    b1_ = 1.0 / n_in ** 0.5
    b2_ = 1.0 / n_hid ** 0.5
    init = {
        "W1": c.uniform([n_hid, n_in], -b1_, b1_),
        "b1": c.uniform([n_hid], -b1_, b1_),
        "W2": c.uniform([n_out, n_hid], -b2_, b2_),
        "b2": c.uniform([n_out], -b2_, b2_),
    }
    xs = c.uniform([STEPS, batch, n_in])
    ys = c.ints([STEPS, batch], 0, n_out)

    order = ["W1", "b1", "W2", "b2"]
    params = {k: v.double().clone().requires_grad_(True) for k, v in init.items()}
    opt = make_opt([params[k] for k in order], **hp)
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        h = torch.relu(xs[step].double() @ params["W1"].t() + params["b1"])
        loss = F.cross_entropy(h @ params["W2"].t() + params["b2"], ys[step])
        loss.backward()
        opt.step()
        losses.append(loss.item())

    tensors = [("x", xs), ("y", ys)]
    tensors += [(k, init[k]) for k in order]
    tensors.append(("losses", torch.tensor(losses, dtype=torch.float64).float()))
    tensors += [(k + "_final", params[k].detach().float()) for k in order]
    iattrs, fattrs = opt_attrs(**hp)
    return write_fixture(outdir, name, "mlp_adam", tensors, iattrs, fattrs)


def gen_skip(outdir, name, **hp):
    c = Case(name)
    p0 = c.signed([3])
    q0 = c.signed([2])
    a = c.uniform([STEPS, 3], 0.5, 2.0)
    b = c.uniform([STEPS, 2], -2.0, 2.0)
    uses = torch.tensor([[1, 0], [1, 0], [1, 1], [1, 1], [0, 1]], dtype=torch.int64)
    assert uses.shape[0] == STEPS

    p = p0.double().clone().requires_grad_(True)
    q = q0.double().clone().requires_grad_(True)
    opt = make_opt([p, q], **hp)
    p_hist, q_hist = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = 0
        if uses[step, 0]:
            loss = loss + (a[step].double() * p * p).sum()
        if uses[step, 1]:
            loss = loss + (b[step].double() * q * q * q).sum()
        loss.backward()
        opt.step()
        p_hist.append(p.detach().float().clone())
        q_hist.append(q.detach().float().clone())

    tensors = [("p", p0), ("q", q0), ("a", a), ("b", b), ("uses", uses),
               ("p_hist", torch.stack(p_hist)), ("q_hist", torch.stack(q_hist))]
    iattrs, fattrs = opt_attrs(**hp)
    return write_fixture(outdir, name, "skip_adam", tensors, iattrs, fattrs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "optim")
    os.makedirs(outdir, exist_ok=True)
    base = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8)
    files = [
        gen_mlp(outdir, "mlp_adam", weight_decay=0.0, decoupled=0, **base),
        gen_mlp(outdir, "mlp_adam_l2", weight_decay=1e-2, decoupled=0, **base),
        gen_mlp(outdir, "mlp_adamw", weight_decay=1e-2, decoupled=1, **base),
        gen_mlp(outdir, "mlp_adamw_betas", lr=3e-3, beta1=0.5, beta2=0.9, eps=1e-6,
                weight_decay=0.1, decoupled=1),
        gen_skip(outdir, "skip_adam", weight_decay=0.0, decoupled=0, lr=0.1, beta1=0.9,
                 beta2=0.999, eps=1e-8),
        gen_skip(outdir, "skip_adamw", weight_decay=0.05, decoupled=1, lr=0.1, beta1=0.8,
                 beta2=0.99, eps=1e-8),
    ]
    assert len(files) == len(set(files)), "duplicate case name"
    with open(os.path.join(outdir, "INDEX"), "w") as f:
        f.write("".join(n + "\n" for n in sorted(files)))
    print(f"gen_optim: wrote {len(files)} cases to {os.path.normpath(outdir)}")


if __name__ == "__main__":
    main()
