#!/usr/bin/env python3
"""Step time of one model: lazyc.torch.train_step against PyTorch eager and
(--inductor) torch.compile with Inductor over the whole step, same process,
same batch, SGD lr 0.01 momentum 0.9, cross-entropy. Prints one JSON line.

    LAZYC_LIB=build/liblazyc.so PYTHONPATH=python $(scripts/pyenv.sh torch) \\
        bench/torch_bridge.py --model resnet18 --input 8x3x128x128 --steps 5 [--inductor]
"""
import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
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
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--input", default="8x3x128x128")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--inductor", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    shape = [int(v) for v in a.input.split("x")]
    x = torch.rand(shape) * 2 - 1
    y = torch.randint(0, 10, (shape[0],))
    base = test_bridge.zoo(a.model)
    out = {"model": a.model, "input": a.input}

    m = copy.deepcopy(base)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

    def eager():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()
    out["torch_eager_ms"] = timed(eager, a.warmup, a.steps)

    m2 = copy.deepcopy(base)
    step = lzt.train_step(m2, torch.optim.SGD(m2.parameters(), lr=0.01, momentum=0.9), F.cross_entropy)
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
            F.cross_entropy(m3(x), y).backward()
            opt3.step()
        out["torch_compile_inductor_ms"] = timed(whole, a.warmup, a.steps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
