#!/usr/bin/env python3
"""PyTorch on one CUDA GPU, the baseline of `lazyc bench --device cuda`
(issue 46): the same models, batch and step as lazyc's zoo (the shapes of
bench/peers/peers_common.py, the definitions of bench/torch_reference.py,
SGD lr 0.01 momentum 0.9), in PyTorch eager and under torch.compile
(Inductor, default mode: the forward and loss compiled, AOTAutograd's
compiled backward, the optimizer step eager), each step timed between
CUDA events after warm-up (torch.compile compiles in the warm-up).

    python3 bench/gpu/torch_cuda.py --size gpu --models resnet50,BERT_pytorch \\
        --systems eager,compile --out torch_cuda.json [--deadline 300] [--dtype bf16]

A cell that fails (out of memory, a compile error, the deadline) says why
and the run goes on. Prints a table; writes one JSON object:
{"size", "dtype", "device", "torch", "cells": [{"system", "model", "ms",
"steps_ms", "warmup_s", "loss", "peak_bytes", "error"}]}.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
import peers_common as pc  # noqa: E402  (imports torch_reference, not torch)


def build(model, size, device):
    import torch
    torch.manual_seed(0)
    inp, tgt, classes, tokens = pc.shapes(model, size)
    x = torch.randint(0, classes, inp, dtype=torch.int64) if tokens else torch.rand(inp) * 2 - 1
    y = torch.randint(0, classes, tgt, dtype=torch.int64)
    m = pc.ref.build_model(model, size, inp, classes).train().to(device)
    params = [p for p in m.parameters() if p.requires_grad]
    return m, x.to(device), y.to(device), params


def cell(system, model, args):
    import torch
    import torch.nn.functional as F
    out = {"system": system, "model": model}
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    m, x, y, params = build(model, args.size, "cuda")
    opt = torch.optim.SGD(params, lr=pc.LR, momentum=pc.MOMENTUM)
    autocast = args.dtype == "bf16"

    def fwd_loss(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            o = m(x)
            return F.cross_entropy(o.reshape(-1, o.shape[-1]).float(), y.reshape(-1))

    f = torch.compile(fwd_loss) if system == "compile" else fwd_loss

    def step():
        opt.zero_grad(set_to_none=True)
        loss = f(x, y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    loss = None
    for _ in range(args.warmup):
        loss = step()
    torch.cuda.synchronize()
    out["warmup_s"] = round(time.perf_counter() - t0, 3)
    out["loss"] = float(loss.detach().float().cpu()) if loss is not None else None
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(args.steps):
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    out["steps_ms"] = [round(t, 4) for t in times]
    out["ms"] = round(statistics.median(times), 4)
    out["peak_bytes"] = torch.cuda.max_memory_allocated()
    del m, opt, x, y, params
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="bench", choices=pc.SIZES)
    ap.add_argument("--models", default=",".join(pc.ZOO))
    ap.add_argument("--systems", default="eager,compile")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--deadline", type=float, default=0, help="seconds: later cells are skipped")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    models = [s for s in args.models.split(",") if s]
    systems = [s for s in args.systems.split(",") if s]
    for mname in models:
        if mname not in pc.ZOO:
            ap.error(f"unknown model {mname}")
    for s in systems:
        if s not in ("eager", "compile"):
            ap.error(f"unknown system {s} (eager, compile)")
    import torch
    if not torch.cuda.is_available():
        print("torch_cuda.py: no CUDA device for PyTorch", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False   # float32 means float32, as lazyc's default
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    res = {"size": args.size, "dtype": args.dtype, "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "cells": []}
    t_start = time.time()
    for system in systems:
        for mname in models:
            if args.deadline and time.time() - t_start > args.deadline:
                c = {"system": system, "model": mname, "error": "skipped: the deadline passed"}
            else:
                try:
                    c = cell(system, mname, args)
                except Exception as e:   # one cell's failure is not the run's
                    c = {"system": system, "model": mname,
                         "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
                    traceback.print_exc(limit=2)
                    torch.cuda.empty_cache()
            res["cells"].append(c)
            print(f"{system:8s} {mname:24s} " + (f"{c['ms']:9.3f} ms  (warm-up {c['warmup_s']:.1f} s)"
                                                 if "ms" in c else c["error"]), flush=True)
            with open(args.out, "w") as f:   # what is done so far survives a kill
                json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
