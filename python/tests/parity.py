"""Parity of lazyc.torch.train_step against eager PyTorch, the way
tests/reference/model_parity.py measures lazyc's C models: the reference is
the same model and optimizer run in float64 from the same f32 weights, and
the tolerance of each tensor is the larger of TOL and MARGIN times PyTorch's
own float32 error on it (eager f32 against that float64 run)."""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
import lazyc.torch as lzt  # noqa: E402

TOL, MARGIN = 1e-4, 30.0
F32_DRAWS = 3   # f32 runs with the weights moved by a few rounding steps (model_parity.py)


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    if ref.numel() == 0:
        return 0.0
    diff = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    return diff / scale if scale > 0 else diff


def loss_ce(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if kind == "sgd_nesterov_wd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-3)
    if kind == "sgd_dampening":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=1e-3)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    raise ValueError(kind)


def eager(model, opt, x, y, steps, loss_fn, clip=None):
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.detach())
    return losses


def state_tensors(model):
    return {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}


def check(model, x, y, opt_kind="sgd", steps=3, loss_fn=loss_ce, clip=None):
    """Returns (problems, worst, counters): problems lists every tensor out of
    tolerance; worst = (err/tol, name, err, tol); counters per lazyc call."""
    model.train()
    m64 = copy.deepcopy(model).double()
    m32 = copy.deepcopy(model)
    mlz = copy.deepcopy(model)
    x64 = x.double() if x.is_floating_point() else x
    y64 = y.double() if y.is_floating_point() else y
    ref = eager(m64, make_opt(opt_kind, m64.parameters()), x64, y64, steps, loss_fn, clip)
    t32 = eager(m32, make_opt(opt_kind, m32.parameters()), x, y, steps, loss_fn, clip)
    # PyTorch's own f32 error, the largest over runs from weights moved by
    # ~2^-20 (a ReLU near its kink or a near-tie in max pooling flips in some
    # runs): the conditioning of each tensor, not one run's luck
    drawn = []
    gen = torch.Generator().manual_seed(1234)
    for _ in range(F32_DRAWS - 1):
        mp = copy.deepcopy(model)
        with torch.no_grad():
            for p in mp.parameters():
                p.mul_(1 + (torch.rand(p.shape, generator=gen) * 2 - 1) * 2.0 ** -20)
        drawn.append((mp, eager(mp, make_opt(opt_kind, mp.parameters()), x, y, steps, loss_fn, clip)))
    opt = make_opt(opt_kind, mlz.parameters())
    step = lzt.train_step(mlz, opt, loss_fn, **({} if clip is None else {"clip_grad_norm": clip}))
    losses, counters = [], []
    for _ in range(steps):
        lzt.metrics_reset()
        losses.append(torch.tensor(step(x, y)))
        m = lzt.metrics()
        counters.append((m["executions"], m["compiles"]))
    lzt.sync(mlz, opt)
    pairs = [("loss%d" % i, losses[i], [t32[i]] + [d[1][i] for d in drawn], ref[i]) for i in range(steps)]
    s64, s32, slz = state_tensors(m64), state_tensors(m32), state_tensors(mlz)
    sd = [state_tensors(d[0]) for d in drawn]
    pairs += [(k, slz[k], [s32[k]] + [s[k] for s in sd], s64[k]) for k in s64]
    problems, worst = [], (0.0, None, 0.0, 0.0)
    for name, got, f32s, r in pairs:
        e = rel_err(got, r)
        tol = max(TOL, MARGIN * max(rel_err(f, r) for f in f32s))
        if not e <= tol:
            problems.append("%s differs by %.3e (tolerance %.1e)" % (name, e, tol))
        if worst[1] is None or e / tol > worst[0]:
            worst = (e / tol, name, e, tol)
    step.close()
    return problems, worst, counters
