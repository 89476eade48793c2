#!/usr/bin/python3
"""Model parity with PyTorch for the zoo's ten models at smoke size, and
for resnet18_fmnist (`lazyc train --model resnet18`, fmnist_ref.py).

    model_parity.py write NAME OUTDIR
        writes, for one model, the files the C side reads:
          OUTDIR/weights.safetensors       every state_dict entry (f32, i64)
          OUTDIR/inputs.safetensors        x (images f32 / tokens i64), y (i64)
          OUTDIR/expected.safetensors      loss and every parameter's gradient
          OUTDIR/expected_sgd.safetensors  the state_dict after 3 SGD steps
    model_parity.py compare EXPECTED GOT [--skip SUFFIX]
        compares two safetensors files tensor by tensor
    model_parity.py run --lazyc BIN --test-models BIN [--models a,b,...] [--keep DIR]
                        [--save-got DIR]
        the ctest driver (tests/test_model_parity.sh): for each model, write
        the files into a temporary folder, run
          lazyc grads --model NAME --size smoke --weights W --inputs I --out G
        (test_models grads NAME W I G for the training models, which
        `lazyc grads` does not list) and compare the loss and every gradient, then run
          test_models sgd NAME W I S 3
        (3 SGD steps, the last two captured) and compare every parameter and
        running statistic, and the loss of every step. Where step k's
        forward has a max-pool window tied within rounding (choices.py),
        `test_models sgd ... k:k-1` instead: the state after k-1 steps and
        the losses of steps 1..k (docs/testing.md, "Ties within rounding"). Prints one line per model and names the worst
        tensor of any failure; exits 1 if a model fails. --save-got DIR
        keeps lazyc's results and the tolerances' basis (PyTorch's f32
        errors) in DIR/<model>/, for compare-runs.
    model_parity.py compare-runs EXPECTED_DIR GOT_DIR
        two runs' saved results (--save-got) against each other, model by
        model, with the parity tolerances: the CUDA backend's against the
        CPU's from the same weights (scripts/device_check.sh)

Models without batch norm train on the seeded batch or, of a few others,
the one whose ReLU inputs stay farthest from the kink (train_batch).

The reference is the PyTorch definition of each model (torchvision 0.14;
BERT from bert_ref.py), initialised by torch from a per-model seed, with
every all-zero float parameter (ViT's zero-initialised head and class
token, VGG's zero biases) given small random values so every gradient path
carries signal. The weights are written in f32; the expected values are
computed in float64 from those exact f32 weights (model.double()), in train
mode (batch statistics) with dropout disabled (bert_ref.disable_dropout:
nn.Dropout modules and nn.MultiheadAttention's own dropout), and rounded to
f32. SGD: lr 0.01, momentum 0.9, the same batch each step.

Tolerance, per tensor (the loss, every gradient, every parameter and
running statistic after the SGD steps, the eval-mode gradients): the larger
of TOL (1e-4, the floor) and MARGIN (30) times PyTorch's own f32 error on
that tensor against its float64 one, measured here with one thread, the
largest over F32_DRAWS runs with the weights moved by a few rounding steps
(a ReLU unit near its kink, or a max-pooling window whose two largest
inputs nearly tie, flips in some runs and not in others). The error is
max |got - ref| / max |ref| (the absolute error when the reference is all
zeros); the loss's relative to its own value. The printed line says which
tolerance applied. num_batches_tracked buffers are not compared after SGD
(lazyc need not count batches).

Batch-norm models (resnet*, resnext, mobilenet_v2, mnasnet1_0) in train mode
over a batch of 2 are ill-conditioned: PyTorch's own f32 run differs from
its f64 one by up to several hundred percent on some gradients (a BN bias
whose exact gradient is 0, the last bottlenecks of resnet50), and three SGD
steps compound it. Their gradients are also checked with batch norm in eval
mode (test_models grads ... eval), where they are well conditioned.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bert_ref  # noqa: E402
import choices  # noqa: E402
import fmnist_ref  # noqa: E402
from write_safetensors import load_file, save_file  # noqa: E402

MODELS = ["resnet50", "resnet18", "BERT_pytorch", "resnext50_32x4d", "alexnet",
          "mobilenet_v2", "mnasnet1_0", "vgg16", "timm_vision_transformer", "squeezenet1_1"]
# `lazyc train`'s models with a torch definition; lz_model_new knows them,
# `lazyc grads` (the reference ten only) does not
TRAIN_MODELS = ["resnet18_fmnist"]
# Batch-norm models at other input sizes and batches, gradients only
# (`test_models grads`): NAME@SIDExBATCH. Their last blocks normalise over
# few values per channel, where f32 rounding moves some gradients by
# percents: mnasnet1_0's 3x3 planes at 80x80, batch 3 (27 values per
# channel), resnet18's 1x1 planes at 32x32, batch 3 (3 values).
SHAPE_CASES = ["mnasnet1_0@80x3", "resnet18@32x3"]
SMOKE_CLASSES = 10
TOL = 1e-4
MARGIN = 30.0   # times PyTorch's own f32 error, where that is measured and larger
SGD_STEPS, LR, MOMENTUM = 3, 0.01, 0.9
F32_DRAWS = 3   # PyTorch f32 runs that measure the BN models' conditioning
TIE_KINDS = ("max-pool",)   # choices whose ties cut the SGD comparison (choices.py)


def make_model(name):
    """The smoke-size PyTorch definition of a zoo model (f32)."""
    if name == "BERT_pytorch":
        return bert_ref.make_bert(2)
    if name == "resnet18_fmnist":
        return fmnist_ref.make_resnet18_fmnist()
    if name == "timm_vision_transformer":
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=6,
                                 hidden_dim=384, mlp_dim=1536, num_classes=SMOKE_CLASSES)
    return getattr(torchvision.models, name)(num_classes=SMOKE_CLASSES)


def shape_case(name):
    """(model name, side, batch) of a SHAPE_CASES entry, or None."""
    if "@" not in name:
        return None
    base, size = name.split("@")
    side, batch = size.split("x")
    return base, int(side), int(batch)


def make_case(name, case=0):
    """(model, x, y): seeded weights and batch for one model. Case 0 is
    the model's own (seeded by its name); case k > 0 another draw of both,
    seeded by k alone."""
    seed = zlib.crc32(name.encode()) if case == 0 else 7919 * case
    torch.manual_seed(seed)
    shaped = shape_case(name)
    model = make_model(shaped[0] if shaped else name)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and not p.any():
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
    if name == "BERT_pytorch":
        x = torch.randint(0, bert_ref.VOCAB, (2, 16), generator=gen)
        y = torch.randint(0, bert_ref.VOCAB, (2, 16), generator=gen)
    else:
        side = 32 if name == "timm_vision_transformer" else 64
        shape = (2, 1, 28, 28) if name == "resnet18_fmnist" else (2, 3, side, side)
        if shaped:
            shape = (shaped[2], 3, shaped[1], shaped[1])
        x = torch.rand(shape, generator=gen) * 2 - 1
        y = torch.randint(0, SMOKE_CLASSES, (shape[0],), generator=gen)
    return model, x, y


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def as_f32(t):
    """A copy (never a view: gradients and parameters change in place)."""
    return t.detach().to(torch.float32 if t.is_floating_point() else t.dtype, copy=True).contiguous()


def has_batch_norm(model):
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def trajectory(model, x, y, dtype=torch.float64, steps=SGD_STEPS, f32_model=None, keep=()):
    """A reference run (on model itself): (expected, states, losses, ties):
    loss and gradients of the first step (the gradients are those of the
    first SGD step: one pass serves both), the state_dict after each step
    in keep and after the last (states[k] = after k steps), the loss of
    each step, and with f32_model (a constructor of the same model in f32)
    the conditioning of each step's discrete choices: ties[k - 1] lists,
    per max-pool and ReLU layer, the closest call of step k's forward
    against 30x PyTorch's own f32 error there (choices.ties)."""
    bert_ref.disable_dropout(model.to(dtype)).train()
    xd = x.to(dtype) if x.is_floating_point() else x
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses, expected, states, conds = [], None, {}, []
    probe = choices.Probe(model) if f32_model else None
    for step in range(steps):
        if probe:
            # the same weights in f32: what f32 arithmetic makes of each
            # probed input on this step's forward
            m32 = bert_ref.disable_dropout(f32_model()).train()
            m32.load_state_dict(model.state_dict())
            p32 = choices.Probe(m32)
            with torch.no_grad():
                m32(x)
            acts32 = p32.acts
            del m32, p32
        opt.zero_grad()
        loss = loss_of(model, xd, y)
        if probe:
            conds.append(choices.ties(probe, acts32))
            probe.clear()
            del acts32
        loss.backward()
        if step == 0:
            expected = {"loss": as_f32(loss)}
            for n, p in model.named_parameters():
                expected[n] = as_f32(p.grad)
        opt.step()
        losses.append(float(loss))
        if step + 1 in keep or step + 1 == steps:
            states[step + 1] = {k: as_f32(v) for k, v in model.state_dict().items()}
    if probe:
        probe.remove()
    return expected, states, losses, conds


def closeness(r):
    """gap / tau of a choices.ties record (inf when tau is 0)."""
    return r["gap"] / r["tau"] if r["tau"] > 0 else float("inf")


def first_tie(conds):
    """(step, record) of the first tie along a trajectory (1-based), or
    None; the record is that step's tie with the smallest gap / tau."""
    for k, recs in enumerate(conds, 1):
        tied = [r for r in recs if r["tie"] and r["kind"] in TIE_KINDS]
        if tied:
            return k, min(tied, key=lambda r: closeness(r))
    return None


def relu_margin(model, x):
    """The smallest |input| of any ReLU/ReLU6 kink over the largest |input|
    of its layer, in one forward pass: how far the batch keeps every unit
    from a point where f32 rounding could flip its gradient on or off."""
    margins = []

    def pre(mod, inp):
        v = inp[0].detach().abs()
        top = v.max().item()
        if top > 0:
            near = v.min().item()
            if isinstance(mod, nn.ReLU6):
                near = min(near, (inp[0].detach() - 6).abs().min().item())
            margins.append(near / top)

    hooks = [m.register_forward_pre_hook(pre) for m in model.modules()
             if isinstance(m, (nn.ReLU, nn.ReLU6))]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return min(margins) if margins else 1.0


def eval_batch(model, name, shape, candidates=4):
    """Of a few deterministic batches, the one with the largest ReLU margin.
    A deep ReLU network always has some unit within a rounding step of its
    kink for some batch; there one f32 rounding turns a unit's gradient on
    or off (a 1e-2 change in one block of resnet50 for the first batch
    tried), which says nothing about the code. Returns (x, margin)."""
    best = None
    for k in range(candidates):
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()) + 1000 + k)
        x = torch.rand(shape, generator=gen) * 2 - 1
        m = relu_margin(model, x.double())
        if best is None or m > best[1]:
            best = (x, m)
    return best


def train_batch(name, x, candidates=4):
    """The seeded batch x, or of a few others the one whose ReLU inputs (in
    train mode, as the case runs) stay farthest from the kink. On the
    seeded batch vgg16 has a ReLU input 7e-8 of its layer's largest: lazyc
    then matched PyTorch with either convolution kernel alone but not with
    both mixed, a flipped unit that says nothing about the code (see
    eval_batch)."""
    if not x.is_floating_point():
        return x
    model = bert_ref.disable_dropout(make_case(name)[0].double()).train()
    best = (x, relu_margin(model, x.double()))
    for k in range(1, candidates):
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()) + 2000 + k)
        xk = torch.rand(x.shape, generator=gen) * 2 - 1
        m = relu_margin(model, xk.double())
        if m > best[1]:
            best = (xk, m)
    return best[0]


def perturbed(model, draw):
    """model itself (draw 0), or with every float weight scaled by
    1 + u, |u| < 2^-20 (a few f32 rounding steps, what another summation
    order moves a dot product by), drawn from a fixed seed."""
    if draw:
        gen = torch.Generator().manual_seed(7919 * draw)
        with torch.no_grad():
            for p in model.parameters():
                u = (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0 ** -20
                p.copy_((p.double() * (1 + u)).to(p.dtype))
    return model


def eval_grads(model, x, y):
    """Loss and gradients of one pass of model (in its dtype and mode)."""
    dtype = next(model.parameters()).dtype
    loss = loss_of(model, x.to(dtype), y)
    loss.backward()
    out = {"loss": as_f32(loss)}
    for n, p in model.named_parameters():
        out[n] = as_f32(p.grad)
    return out


def write_case(name, outdir):
    """Writes the case files; returns the reference's losses over the SGD
    steps and PyTorch's own f32 errors (empty when not measured)."""
    os.makedirs(outdir, exist_ok=True)
    model, x, y = make_case(name)
    if not has_batch_norm(model):
        x = train_batch(name, x)
    save_file({k: as_f32(v) for k, v in model.state_dict().items()},
              os.path.join(outdir, "weights.safetensors"))
    save_file({"x": x, "y": y}, os.path.join(outdir, "inputs.safetensors"))
    bn = has_batch_norm(model)
    steps = 1 if shape_case(name) else SGD_STEPS   # gradients only
    expected, states, losses, conds = trajectory(model, x, y, steps=steps,
                                                 f32_model=lambda: make_case(name)[0],
                                                 keep=range(1, steps))
    del model
    # The state compared is the one after the last step whose forward has
    # no tie within rounding (see first_tie): after `cut` steps; after the
    # first step where that one ties (nothing earlier to compare).
    tie = first_tie(conds)
    cut = steps if tie is None else max(tie[0] - 1, 1)
    save_file(expected, os.path.join(outdir, "expected.safetensors"))
    if cut:
        save_file(states[cut], os.path.join(outdir, "expected_sgd.safetensors"))
    del states
    f32 = {"grads": {}, "sgd": {}, "losses": [0.0] * steps, "conds": conds, "cut": cut}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for draw in range(F32_DRAWS):
        e2, s2, l2, _ = trajectory(perturbed(make_case(name)[0], draw), x, y, torch.float32,
                                   steps, keep=(cut,))
        for k, v in expected.items():
            f32["grads"][k] = max(f32["grads"].get(k, 0.0), rel_err(e2[k], v))
        if cut:
            ref_state, _ = load_file(os.path.join(outdir, "expected_sgd.safetensors"))
            for k, v in ref_state.items():
                if v.is_floating_point():
                    f32["sgd"][k] = max(f32["sgd"].get(k, 0.0), rel_err(s2[cut][k], v))
            del ref_state
        for k, (l32, l64) in enumerate(zip(l2, losses)):
            f32["losses"][k] = max(f32["losses"][k], abs(l32 - l64) / max(abs(l64), 1e-30))
    torch.set_num_threads(threads)
    if bn and not shape_case(name):
        # In eval mode the same models are well conditioned (PyTorch's f32
        # is within about 1e-6): their gradients are also checked that way,
        # on the batch whose ReLU inputs stay farthest from the kink (see
        # eval_batch), against the same derived tolerance.
        model = bert_ref.disable_dropout(make_case(name)[0].double()).eval()
        xe, margin = eval_batch(model, name, x.shape)
        save_file({"x": xe, "y": y}, os.path.join(outdir, "inputs_eval.safetensors"))
        probe = choices.Probe(model)
        expected = eval_grads(model, xe, y)
        m32 = bert_ref.disable_dropout(make_case(name)[0]).eval()
        p32 = choices.Probe(m32)
        with torch.no_grad():
            m32(xe)
        f32["eval_conds"] = choices.ties(probe, p32.acts)
        probe.remove()
        del m32, p32, probe
        save_file(expected, os.path.join(outdir, "expected_eval.safetensors"))
        f32["eval"] = {}
        torch.set_num_threads(1)
        for draw in range(F32_DRAWS):
            m32 = bert_ref.disable_dropout(perturbed(make_case(name)[0], draw)).eval()
            e2 = eval_grads(m32, xe, y)
            for k, v in expected.items():
                f32["eval"][k] = max(f32["eval"].get(k, 0.0), rel_err(e2[k], v))
        torch.set_num_threads(threads)
        f32["eval_relu_margin"] = margin
    with open(os.path.join(outdir, "torch_f32_error.json"), "w") as f:
        json.dump(f32, f)
    return losses, f32


def rel_err(got, ref):
    ref = ref.double()
    diff = (got.double() - ref).abs().max().item() if ref.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return diff / scale if scale > 0 else diff


def tolerance(name, sens):
    return max(TOL, MARGIN * sens.get(name, 0.0))


def compare(expected_path, got_path, skip_suffix=None, sens=None):
    """Checks every tensor of expected against got. Returns (worst, largest,
    problems): worst = (error, tolerance, name) of the tensor closest to
    failing (the largest error / tolerance), largest = the same for the
    largest error; problems lists missing, extra, mis-shaped and failing
    tensors, worst first."""
    sens = sens or {}
    ref, _ = load_file(expected_path)
    got, _ = load_file(got_path)
    problems, fails, worst, largest = [], [], (0.0, TOL, None), (0.0, TOL, None)
    for name, r in ref.items():
        if skip_suffix and name.endswith(skip_suffix):
            continue
        g = got.get(name)
        if g is None:
            problems.append(f"{name} missing")
            continue
        if tuple(g.shape) != tuple(r.shape):
            problems.append(f"{name} has shape {list(g.shape)}, expected {list(r.shape)}")
            continue
        if name == "loss":
            e = abs(float(g) - float(r)) / max(abs(float(r)), 1e-30)
        else:
            e = rel_err(g, r)
        tol = tolerance(name, sens)
        if not e <= tol:            # NaN fails too
            fails.append((e / tol if e == e else float("inf"), e, tol, name))
        if worst[2] is None or not e / tol <= worst[0] / worst[1]:
            worst = (e, tol, name)
        if largest[2] is None or not e <= largest[0]:
            largest = (e, tol, name)
    for name in got:
        if name not in ref and not (skip_suffix and name.endswith(skip_suffix)):
            problems.append(f"{name} unexpected")
    fails.sort(reverse=True)
    problems += [f"{n} differs by {e:.3e} (tolerance {t:.1e})" for _, e, t, n in fails]
    return worst, largest, problems


def describe(worst, largest):
    def one(t):
        e, tol, name = t
        why = f" = {MARGIN:g}x PyTorch's own f32 error" if tol > TOL else ""
        return f"{e:.1e} at {name} (tolerance {tol:.1e}{why})"
    text = "largest " + one(largest)
    if worst[2] != largest[2]:
        text += ", nearest its tolerance " + one(worst)
    return text


def run_cmd(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout, time.time() - t0


# The scripts whose text decides a reference case: this one and what it
# imports (other scripts in this folder do not change a case).
CASE_SOURCES = ("bert_ref.py", "choices.py", "fmnist_ref.py", "model_parity.py", "write_safetensors.py")


def cache_root():
    """Where reference cases are kept between runs: the plain and the
    sanitizer runs of the suite, one after the other in CI, compute PyTorch's
    side once (it is most of the test's time). Keyed by these scripts, the
    torch and torchvision versions, and what changes PyTorch's own f32
    results (its threads, oneDNN's ISA cap), so a change to any computes
    anew: the tolerances and the ties come from PyTorch's f32 run, and a
    suite run under DNNL_MAX_CPU_ISA=AVX2 beside a plain one must not take
    whichever run wrote first. LZ_PARITY_CACHE=off computes every time."""
    root = os.environ.get("LZ_PARITY_CACHE")
    if root == "off":
        return None
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "lazyc", "parity")
    h = hashlib.sha256(f"{torch.__version__} {torchvision.__version__} {torch.get_num_threads()} "
                       f"{os.environ.get('DNNL_MAX_CPU_ISA', '')} "
                       f"{os.environ.get('ONEDNN_MAX_CPU_ISA', '')}".encode())
    for f in CASE_SOURCES:
        with open(os.path.join(HERE, f), "rb") as fh:
            h.update(f.encode() + b"\0" + fh.read())
    key = os.path.join(root, h.hexdigest()[:16])
    prune_cache(root, key)
    return key


STALE_CACHE_S = 2 * 24 * 3600


def prune_cache(root, key):
    """Each change to these scripts makes a new key of about 4 GB; the keys
    no run has used for two days are removed, so the cache holds what is in
    use (other checkouts' keys included) and not every past edit."""
    try:
        os.makedirs(key, exist_ok=True)
        os.utime(key)
        now = time.time()
        for k in os.listdir(root):
            p = os.path.join(root, k)
            if p != key and os.path.isdir(p) and now - os.path.getmtime(p) > STALE_CACHE_S:
                shutil.rmtree(p, ignore_errors=True)
    except OSError:
        pass   # a read-only or missing cache is no error: it just is not kept


def reference_case(name, tmp, keep):
    """(folder with the case files, losses, PyTorch's f32 errors, cached?).
    With --keep the files are written there, never taken from the cache."""
    root = None if keep else cache_root()
    if root:
        d = os.path.join(root, name)
        meta = os.path.join(d, "case.json")
        if os.path.exists(meta):
            with open(meta) as f:
                m = json.load(f)
            return d, m["losses"], m["sens"], True
    losses, sens = write_case(name, tmp)
    if root:
        staged = f"{d}.{os.getpid()}"
        try:
            with open(os.path.join(tmp, "case.json"), "w") as f:
                json.dump({"losses": losses, "sens": sens}, f)
            shutil.copytree(tmp, staged)
            os.replace(staged, d)   # whole or not at all
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)   # not writable: no cache
    return tmp, losses, sens, False


def check_model(name, args, tmp):
    """One line of results; returns (ok, line)."""
    t0 = time.time()
    case, ref_losses, sens, cached = reference_case(name, tmp, args.keep)
    t_ref = time.time() - t0
    w, i = os.path.join(case, "weights.safetensors"), os.path.join(case, "inputs.safetensors")
    g, s = os.path.join(tmp, "grads.safetensors"), os.path.join(tmp, "sgd.safetensors")
    fails, parts = [], []

    if name in MODELS:
        tool = "lazyc grads"
        cmd = [args.lazyc, "grads", "--model", name, "--size", "smoke",
               "--weights", w, "--inputs", i, "--out", g]
    else:
        tool = "test_models grads"
        cmd = [args.test_models, "grads", name.split("@")[0], w, i, g]
    rc, out, t_grads = run_cmd(cmd)
    if rc != 0:
        fails.append(f"{tool} exited {rc}:\n{out[-2000:]}")
    else:
        worst, largest, problems = compare(os.path.join(case, "expected.safetensors"), g,
                                           sens=sens["grads"])
        got, _ = load_file(g)
        if "loss" in got:
            parts.append(f"loss {float(got['loss']):.6f} (torch {ref_losses[0]:.6f})")
        parts.append("grads: " + describe(worst, largest))
        if problems:
            fails.append("grads: " + "; ".join(problems[:6]) + first_step_hint(sens))

    expected_eval = os.path.join(case, "expected_eval.safetensors")
    if os.path.exists(expected_eval):
        ge = os.path.join(tmp, "grads_eval.safetensors")
        ie = os.path.join(case, "inputs_eval.safetensors")
        rc, out, _ = run_cmd([args.test_models, "grads", name, w, ie, ge, "eval"])
        if rc != 0:
            fails.append(f"test_models grads (eval) exited {rc}:\n{out[-2000:]}")
        else:
            worst, largest, problems = compare(expected_eval, ge, sens=sens.get("eval"))
            parts.append("grads with eval-mode batch norm: " + describe(worst, largest) +
                         f" [ReLU margin {sens.get('eval_relu_margin', 0):.1e}]")
            eval_tie = first_tie([sens.get("eval_conds", [])])
            if eval_tie:
                parts.append("TIE WITHIN ROUNDING in the eval-mode forward: " + choice_text(eval_tie[1]) +
                             "; compared as usual (nothing earlier to compare)")
            if problems:
                fails.append("grads with eval-mode batch norm: " + "; ".join(problems[:6]) +
                             ("\n      (the eval-mode forward has a max-pool tie within rounding: the "
                              "gradients may legitimately differ; if so, pick another eval batch)"
                              if eval_tie else ""))

    # The SGD comparison stops before the first step whose forward has a
    # max-pool window tied within rounding (see first_tie): from that step
    # on the parameters may legitimately follow the other choice.
    conds = sens.get("conds", [])
    tie = first_tie(conds)
    cut = sens.get("cut", SGD_STEPS)
    t_sgd = 0.0
    if any(conds):   # models with max-pools or ReLUs
        parts.append(choices_line(conds, tie, cut))
    # A tie on the first step (or in the eval-mode forward) leaves nothing
    # earlier to compare: the gradients and the state after step 1 are
    # compared as usual, and a failure names the tie (another batch then).
    hint = ("\n      (" + choice_text(tie[1]) + " on the first step's forward: the gradients may "
            "legitimately differ there; if so, pick another batch for this model)") \
        if tie and tie[0] == 1 else ""
    if not shape_case(name):
        k = tie[0] if tie else SGD_STEPS
        rc, out, t_sgd = run_cmd([args.test_models, "sgd", name, w, i, s, f"{k}:{cut}"])
        if rc != 0:
            fails.append(f"test_models sgd exited {rc}:\n{out[-2000:]}")
        else:
            worst, largest, problems = compare(os.path.join(case, "expected_sgd.safetensors"), s,
                                               skip_suffix="num_batches_tracked", sens=sens["sgd"])
            state_problems = list(problems)
            got_losses = [float(t.split()[3]) for t in out.splitlines() if t.startswith("step ")]
            loss_tols = [max(TOL, MARGIN * e) for e in sens.get("losses", [])][:k]
            loss_errs = [abs(g - r) / max(abs(r), 1e-30) for g, r in zip(got_losses, ref_losses)]
            if len(got_losses) != k:
                problems.append(f"test_models sgd printed {len(got_losses)} losses, expected {k}")
            problems += [f"loss of step {j + 1} differs by {e:.3e} (tolerance {t:.1e})"
                         for j, (e, t) in enumerate(zip(loss_errs, loss_tols)) if not e <= t]
            parts.append(f"state after {cut} SGD step{'s' if cut > 1 else ''}: " + describe(worst, largest) +
                         (f"; losses of steps 1-{k}" if k > 1 else "; loss of step 1") +
                         f": largest error {max(loss_errs, default=0):.1e}")
            own = own_tie(name, args, w, i, tmp, cut, sens) if state_problems and cut > 1 else None
            if own:
                # lazyc took the other side of a tie, or reached weights
                # where float32 cannot tell step t's gradients: the state
                # after `cut` steps follows that; step t's gradients were
                # checked against float64 there, step 1's above, and the
                # losses of steps 1..t are compared
                t, r = own
                if r["why"] == "conditioning":
                    parts.append(f"ILL-CONDITIONED on lazyc's own trajectory: at lazyc's weights after "
                                 f"step {t - 1}, no tied choice put on its other side explains step {t}'s "
                                 f"gradients, and PyTorch's own f32 ones there fail the same comparison "
                                 f"with float64 ({r['name']} {r['err']:.1e} against its tolerance "
                                 f"{r['tol']:.1e}); lazyc's largest error there, {r['lz_err']:.1e} "
                                 f"({r['lz_name']}), is within {MARGIN:g}x PyTorch's largest "
                                 f"({r['torch_max']:.1e})")
                else:
                    parts.append(f"TIE WITHIN ROUNDING on lazyc's own trajectory: at lazyc's weights "
                                 f"after step {t - 1}, step {t}'s gradients match float64's with "
                                 f"{choice_text(r)} ({choices.FACTOR:g}x PyTorch's own f32 error "
                                 f"{r['err']:.1e} there)" +
                                 (f" and {r['others']} other tied calls" if r["others"] else "") +
                                 " on its other side")
                parts[-1] += (f"; the state after {cut} steps ({state_problems[0]}) is not compared, "
                              f"the losses of steps 1-{t} are")
                problems = [q for q in problems if q not in state_problems and
                            not (q.startswith("loss of step") and int(q.split()[3]) > t)]
            if problems:
                fails.append(f"after {cut} SGD steps: " + "; ".join(problems[:6]) + hint +
                             f"\n      torch losses {['%.6f' % l for l in ref_losses]}; lazyc: " +
                             " ".join(out.split()))
    if args.save_got:
        keep = os.path.join(args.save_got, name)
        os.makedirs(keep, exist_ok=True)
        for f in ("grads.safetensors", "sgd.safetensors", "grads_eval.safetensors"):
            if os.path.exists(os.path.join(tmp, f)):
                shutil.copy(os.path.join(tmp, f), os.path.join(keep, f))
        with open(os.path.join(keep, "sens.json"), "w") as fh:
            json.dump(sens, fh)
    line = (f"{name} [torch {t_ref:.0f} s{' (cached)' if cached else ''}, lazyc grads {t_grads:.0f} s, sgd {t_sgd:.0f} s]" +
            "".join("\n    " + p for p in parts))
    return not fails, line + "".join("\n    FAILED: " + f for f in fails)


def own_tie(name, args, w, i, tmp, last, sens):
    """Whether lazyc's trajectory took the other side of a tie within
    rounding (docs/testing.md, "Ties within rounding"): a trajectory within
    the tolerances may carry a unit or window the reference kept far from
    its kink onto it. For t in 2..last, at lazyc's own weights after step
    t - 1 (`test_models sgd ... t-1:t-1`): lazyc's gradient of step t
    (`test_models grads`) against float64's at those weights; if they
    differ, against float64's with the step's tied choices (choices.py:
    gap below 2x PyTorch's own f32 error there, each call of a module apart) put on
    their other side, each call's alone, then all. If none matches and
    PyTorch's own f32 gradients at those weights fail the same comparison
    (a point where float32 cannot tell the gradients), lazyc's largest
    error there only has to stay within MARGIN x PyTorch's largest. Returns
    (t, record) for the first step explained either way (record["why"]:
    "tie" or "conditioning"), or None (no step differs, or one differs
    that neither explains: a real difference)."""
    tensors, _ = load_file(i)
    x, y = tensors["x"], tensors["y"]
    tol = sens.get("grads", {})

    def grads_of(model, hooks=()):
        model.zero_grad(set_to_none=True)
        dtype = next(model.parameters()).dtype
        loss = loss_of(model, x.to(dtype) if x.is_floating_point() else x, y)
        loss.backward()
        for h in hooks:
            h.remove()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    def matches(lz, ref):
        return all(n in lz and rel_err(lz[n], g) <= tolerance(n, tol) for n, g in ref.items())

    for t in range(2, last + 1):
        state_path = os.path.join(tmp, f"own_{t - 1}.safetensors")
        grads_path = os.path.join(tmp, f"own_grads_{t}.safetensors")
        if run_cmd([args.test_models, "sgd", name, w, i, state_path, f"{t - 1}:{t - 1}"])[0] != 0 or \
           run_cmd([args.test_models, "grads", name, state_path, i, grads_path])[0] != 0:
            return None
        state, _ = load_file(state_path)
        lz, _ = load_file(grads_path)
        models, probes = [], []
        for dtype in (torch.float64, torch.float32):
            model = bert_ref.disable_dropout(make_case(name)[0]).to(dtype).train()
            sd = model.state_dict()
            for k, v in state.items():
                if k in sd and not k.endswith("num_batches_tracked"):
                    sd[k] = v.to(dtype) if v.is_floating_point() else v
            model.load_state_dict(sd)
            probe = choices.Probe(model)
            with torch.no_grad():
                loss_of(model, x.to(dtype) if x.is_floating_point() else x, y)
            probe.remove()
            models.append(model)
            probes.append(probe)
        m64 = models[0]
        g64 = grads_of(m64)
        if matches(lz, g64):
            continue   # step t agrees with float64: look further
        tied = choices.tied_calls(probes[0], probes[1])
        trials = [{k: r} for k, r in sorted(tied.items(), key=lambda kr: closeness(kr[1]))][:16]
        if len(tied) > 1:
            trials.append(tied)
        for trial in trials:
            if matches(lz, grads_of(m64, choices.other_side_hooks(m64, trial))):
                r = min(trial.values(), key=closeness)
                return t, dict(r, why="tie", others=len(trial) - 1)
        # No flip explains it. If PyTorch's own f32, started from the same
        # weights, fails the same comparison, this point is one where
        # float32 cannot tell the gradients (ties on several kinks, taken
        # differently by every implementation): nothing lazyc computes
        # there can be held to these tolerances, so only its largest error
        # is bounded, by MARGIN x PyTorch's largest there.
        g32 = grads_of(models[1])
        err32 = {n: rel_err(g32[n], g) for n, g in g64.items()}
        failing = [n for n in g64 if err32[n] > tolerance(n, tol)]
        err_lz = {n: rel_err(lz[n], g) if n in lz else float("inf") for n, g in g64.items()}
        if failing and max(err_lz.values()) <= MARGIN * max(err32.values()):
            n32 = max(failing, key=lambda n: err32[n] / tolerance(n, tol))
            nlz = max(err_lz, key=err_lz.get)
            return t, {"why": "conditioning", "name": n32, "err": err32[n32],
                       "tol": tolerance(n32, tol), "lz_name": nlz, "lz_err": err_lz[nlz],
                       "torch_max": max(err32.values())}
        return None
    return None


def first_step_hint(sens):
    """What a failure of the first step's gradients says when that step's
    forward has a max-pool tie within rounding."""
    tie = first_tie(sens.get("conds", [])[:1])
    return ("\n      (" + choice_text(tie[1]) + " on the first step's forward: the gradients may "
            "legitimately differ there; if so, pick another batch for this model)") if tie else ""


def choice_text(r):
    return (f"{r['kind']} {r['layer']}, {r['where']}: gap {r['gap']:.2e} "
            f"{'<' if r['tie'] else '>='} tau {r['tau']:.2e}")


def choices_line(conds, tie, cut):
    """The one line that says how the discrete choices along the SGD run
    are conditioned, and so which steps are compared."""
    if tie:
        k, r = tie
        head = (f"TIE WITHIN ROUNDING on step {k}'s forward: {choice_text(r)} "
                f"({choices.FACTOR:g}x PyTorch's own f32 error {r['err']:.1e} on its input)")
        if k == 1:
            return (head + "; nothing earlier to compare: the gradients and the state after step 1 "
                    "are compared as usual, a failure there may be this tie")
        return (head + f"; steps >= {k} may pick the other input, so the state is compared after "
                f"step{'s' if cut > 1 else ''} 1{'-%d' % cut if cut > 1 else ''} and the losses of steps 1-{k}")
    pools = [r for recs in conds for r in recs if r["kind"] == "max-pool"]
    relus = [r for recs in conds for r in recs if r["kind"] != "max-pool"]
    text = f"no max-pool tie within rounding in {len(conds)} step{'s' if len(conds) > 1 else ''}"
    if pools:
        r = min(pools, key=lambda r: closeness(r))
        text += f" (closest: {choice_text(r)})"
    if relus:
        r = min(relus, key=lambda r: closeness(r))
        text += f"; closest ReLU kink (not used to cut): {choice_text(r)}"
    return text


def main_run(argv):
    ap = argparse.ArgumentParser(prog="model_parity.py run")
    ap.add_argument("--lazyc", required=True)
    ap.add_argument("--test-models", required=True)
    ap.add_argument("--models", default=",".join(MODELS + TRAIN_MODELS + SHAPE_CASES))
    ap.add_argument("--skip", default="", help="models left out, said so in the summary")
    ap.add_argument("--keep", help="write each model's files under this folder and keep them")
    ap.add_argument("--save-got", help="keep lazyc's results under DIR/<model>/ (for compare-runs)")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("LZ_TORCH_THREADS", "2")))
    skipped = [n for n in args.skip.split(",") if n]
    names = [n for n in args.models.split(",") if n and n not in skipped]
    known = MODELS + TRAIN_MODELS + SHAPE_CASES
    unknown = [n for n in names + skipped if n not in known]
    if unknown:
        print(f"unknown models: {unknown}; known: {known}", file=sys.stderr)
        return 2
    failed = []
    t0 = time.time()
    for name in names:
        tmp = os.path.join(args.keep, name) if args.keep else tempfile.mkdtemp(prefix=f"lz_parity_{name}_")
        try:
            ok, line = check_model(name, args, tmp)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
        print(line, flush=True)
        if not ok:
            failed.append(name)
    print(f"model parity: {len(names) - len(failed)}/{len(names)} models match PyTorch "
          f"({time.time() - t0:.0f} s)" + (f"; FAILED: {', '.join(failed)}" if failed else "") +
          (f"; NOT CHECKED in this run: {', '.join(skipped)}" if skipped else ""))
    return 1 if failed else 0


def compare_runs(expected_dir, got_dir):
    """Each model both runs saved: got against expected, every file, with
    the tolerances expected's run derived (its sens.json)."""
    failed, n = [], 0
    for name in sorted(os.listdir(expected_dir)):
        e, g = os.path.join(expected_dir, name), os.path.join(got_dir, name)
        if not os.path.isdir(e) or not os.path.isdir(g):
            continue
        with open(os.path.join(e, "sens.json")) as fh:
            sens = json.load(fh)
        n += 1
        parts = []
        for f, kind, skip in (("grads.safetensors", "grads", None), ("grads_eval.safetensors", "eval", None),
                              ("sgd.safetensors", "sgd", "num_batches_tracked")):
            if not os.path.exists(os.path.join(e, f)):
                continue
            if not os.path.exists(os.path.join(g, f)):
                parts.append(f"{f}: missing")
                failed.append(name)
                continue
            worst, largest, problems = compare(os.path.join(e, f), os.path.join(g, f), skip, sens.get(kind))
            parts.append(f"{kind}: " + describe(worst, largest) + ("" if not problems else
                                                                    "; FAILED: " + "; ".join(problems[:4])))
            if problems:
                failed.append(name)
        print(name + "".join("\n    " + p for p in parts), flush=True)
    failed = sorted(set(failed))
    print(f"compare-runs: {n - len(failed)}/{n} models within the parity tolerances" +
          (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed or not n else 0


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "write":
        torch.set_num_threads(int(os.environ.get("LZ_TORCH_THREADS", "2")))
        losses, sens = write_case(sys.argv[2], sys.argv[3])
        print(f"{sys.argv[2]}: torch losses over {SGD_STEPS} SGD steps {losses}")
        for kind, d in sens.items():
            if isinstance(d, dict) and d:
                k = max(d, key=d.get)
                print(f"  largest PyTorch f32 error, {kind}: {k} {d[k]:.2e}")
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "compare":
        skip = sys.argv[5] if len(sys.argv) >= 6 and sys.argv[4] == "--skip" else None
        sens_path = os.path.join(os.path.dirname(sys.argv[2]), "torch_f32_error.json")
        sens = {}
        if os.path.exists(sens_path):
            with open(sens_path) as f:
                base = os.path.basename(sys.argv[2])
                sens = json.load(f).get("sgd" if "sgd" in base else "eval" if "eval" in base
                                        else "grads", {})
        worst, largest, problems = compare(sys.argv[2], sys.argv[3], skip, sens)
        for p in problems:
            print(p)
        print(describe(worst, largest))
        return 0 if not problems else 1
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        return main_run(sys.argv[2:])
    if len(sys.argv) == 4 and sys.argv[1] == "compare-runs":
        return compare_runs(sys.argv[2], sys.argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
