#!/usr/bin/python3
"""The PyTorch side of bench_mlp: the same MLP training step (forward,
cross-entropy, backward, SGD lr 0.01 momentum 0.9) in PyTorch eager, timed
the way bench_mlp times lazyc: each step from its first op until its
update is done (CPU tensors: the ops run as they are called), the median
over the timed steps after warm-up steps, on two threads.

    /usr/bin/python3 bench/mlp_torch.py --batch 16 --in 24 --hidden 32 \\
        --depth 1 --classes 6 --bias 0 --steps 2000 --warmup 50

Prints one JSON line on stdout: {"torch_us": F} (the median step, in
microseconds; eager steps are synchronous, so there is no pipelined
figure), or {"unavailable": REASON} when torch cannot be imported.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("batch", 16), ("in", 24), ("hidden", 32), ("depth", 1),
                          ("classes", 6), ("bias", 0), ("steps", 2000), ("warmup", 50)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch"
        print(json.dumps({"unavailable": "cannot import torch: %s" % e}))
        return 0
    torch.set_num_threads(2)
    torch.manual_seed(0)
    layers, fin = [], getattr(a, "in")
    for _ in range(a.depth):
        layers += [torch.nn.Linear(fin, a.hidden, bias=bool(a.bias)), torch.nn.ReLU()]
        fin = a.hidden
    layers.append(torch.nn.Linear(fin, a.classes, bias=bool(a.bias)))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(a.batch, getattr(a, "in")) * 2 - 1
    y = torch.arange(a.batch) % a.classes
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"torch_us": statistics.median(times) * 1e6}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
