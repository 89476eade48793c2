#!/usr/bin/env python3
"""PyTorch/XLA 2.9, lazy tensors: the step on the `xla` device, then
torch_xla.sync() (xm.mark_step()) cuts the recorded ops into one graph,
compiled once and then taken from the cache. PJRT_DEVICE=CPU.

    PJRT_DEVICE=CPU $(scripts/pyenv.sh torch) bench/peers/xla_lazy.py --model resnet18

executions_per_step: samples of ExecuteTime per timed step; compiles:
UncachedCompile (all steps; CachedCompile is in the counters).
"""
import os
import sys

import peers_common as pc


def body(args):
    import torch_xla
    import torch_xla.core.xla_model as xm
    import peers_torch as pt
    import xla_metrics as xmet
    cell = pc.Cell(args)
    dev = torch_xla.device()
    model, x, y, params = pt.build(args, dev)
    step = pt.plain_step(model, x, y, pt.sgd(params))

    def lazy_step():
        loss = step()
        torch_xla.sync()
        return loss

    cell.time_steps(lazy_step, xm.wait_device_ops, xmet.counters, pt.loss_float)
    return xmet.finish(cell)


if __name__ == "__main__":
    args = pc.parse_args("xla_lazy")
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("CPU_NUM_DEVICES", "1")
    sys.exit(pc.run_cell(args, body, lambda: __import__("xla_metrics").versions()))
