#!/usr/bin/env python3
"""PyTorch/XLA 2.9, the dynamo bridge: torch.compile(step, backend="openxla")
over zero_grad, forward, cross-entropy, backward and optimizer.step(), the
way PyTorch/XLA's docs train with dynamo. Dynamo breaks the graph at
loss.backward() and around the optimizer; each piece runs as its own XLA
executable, so executions_per_step (ExecuteTime samples per timed step) is
the figure to compare with lazyc's captured step (1).

    PJRT_DEVICE=CPU $(scripts/pyenv.sh torch) bench/peers/xla_dynamo.py --model resnet18

--without-optimizer compiles zero_grad, forward and backward only (the
case PyTorch/XLA's dynamo tests count executions for); the cell's system is
then "xla_dynamo_no_opt".

Also reported: Dynamo's unique graphs and graph breaks (torch._dynamo.utils
.counters) in "dynamo".
"""
import os
import sys

import peers_common as pc


def dynamo_counts():
    from torch._dynamo.utils import counters
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
            "frames_ok": counters["frames"].get("ok", 0)}


def body(args):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import peers_torch as pt
    import xla_metrics as xmet
    cell = pc.Cell(args)
    dev = torch_xla.device()
    model, x, y, params = pt.build(args, dev)
    opt = pt.sgd(params)
    if args.without_optimizer:
        def fwd_bwd():
            opt.zero_grad(set_to_none=True)
            loss = pt.loss_fn(model, x, y)
            loss.backward()
            return loss
        step = torch.compile(fwd_bwd, backend="openxla")
    else:
        step = torch.compile(pt.plain_step(model, x, y, opt), backend="openxla")

    def counters():
        d = xmet.counters()
        d.update(dynamo_counts())
        return d

    cell.time_steps(step, xm.wait_device_ops, counters, pt.loss_float)
    cell.d["dynamo"] = {k: cell.d["counters_timed"][k] + cell.d["counters_warmup"][k]
                        for k in dynamo_counts()}
    return xmet.finish(cell)


if __name__ == "__main__":
    import argparse
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--without-optimizer", action="store_true")
    flags, rest = extra.parse_known_args()
    args = pc.parse_args("xla_dynamo_no_opt" if flags.without_optimizer else "xla_dynamo",
                         argv=rest)
    args.without_optimizer = flags.without_optimizer
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("CPU_NUM_DEVICES", "1")
    sys.exit(pc.run_cell(args, body, lambda: __import__("xla_metrics").versions()))
