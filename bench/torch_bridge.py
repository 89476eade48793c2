#!/usr/bin/env python3
"""Step time of a model: lazyc.torch.train_step against PyTorch eager and
(--inductor) torch.compile with Inductor over the whole step, same process,
same batch, SGD lr 0.01 momentum 0.9, cross-entropy over every target.
Prints one JSON line per model. The models are python/tests/test_bridge.py's
zoo (10 classes; the ViT at 32x32 with 2 layers, BERT with 1 layer);
--input is NxCxHxW, or BxT tokens for BERT_pytorch (default 4x128).

    LAZYC_LIB=build/liblazyc.so PYTHONPATH=python $(scripts/pyenv.sh torch) \\
        bench/torch_bridge.py --models resnet18,vgg16 --input 8x3x128x128 --steps 5 [--inductor]
"""
import argparse
import copy
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import parity  # noqa: E402  (loss_ce: cross-entropy over every target)
import test_bridge  # noqa: E402  (the zoo's PyTorch definitions, dropout off)
import lazyc.torch as lzt  # noqa: E402


def median(ts):
    ts = sorted(ts)
    n = len(ts)
    return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])


def timed(fn, warmup, steps):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="one model (the same as --models with one name)")
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--input", default="8x3x128x128")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--inductor", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    for name in (a.model or a.models).split(","):
        run_model(name, a)


def run_model(name, a):
    torch.manual_seed(0)
    if name == "BERT_pytorch":
        b, t = [int(v) for v in (a.input if a.input.count("x") == 1 else "4x128").split("x")]
        x, y = torch.randint(0, 30522, (b, t)), torch.randint(0, 30522, (b, t))
        size = f"{b}x{t}"
    else:
        shape = [int(v) for v in a.input.split("x")]
        if name == "timm_vision_transformer":
            shape[2:] = [32, 32]
        x = torch.rand(shape) * 2 - 1
        y = torch.randint(0, 10, (shape[0],))
        size = "x".join(str(v) for v in shape)
    base = test_bridge.zoo(name)
    out = {"model": name, "input": size}

    m = copy.deepcopy(base)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

    def eager():
        opt.zero_grad(set_to_none=True)
        parity.loss_ce(m(x), y).backward()
        opt.step()
    out["torch_eager_ms"] = timed(eager, a.warmup, a.steps)

    m2 = copy.deepcopy(base)
    step = lzt.train_step(m2, torch.optim.SGD(m2.parameters(), lr=0.01, momentum=0.9), parity.loss_ce)
    out["lazyc_train_step_ms"] = timed(lambda: step(x, y), a.warmup, a.steps)
    lzt.metrics_reset()
    step(x, y)
    mt = lzt.metrics()
    out["lazyc_executions_per_step"], out["lazyc_compiles_per_step"] = mt["executions"], mt["compiles"]

    if a.inductor:
        m3 = copy.deepcopy(base)
        opt3 = torch.optim.SGD(m3.parameters(), lr=0.01, momentum=0.9)

        @torch.compile
        def whole():
            opt3.zero_grad(set_to_none=True)
            parity.loss_ce(m3(x), y).backward()
            opt3.step()
        out["torch_compile_inductor_ms"] = timed(whole, a.warmup, a.steps)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
