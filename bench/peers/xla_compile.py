#!/usr/bin/env python3
"""PyTorch/XLA 2.9, whole-step capture: torch_xla.compile(step,
full_graph=True) over zero_grad, forward, cross-entropy, backward and
optimizer.step(). full_graph=True makes PyTorch/XLA raise when the step
would need more than one graph; that error (or any other) becomes the
cell's reason, which is the answer to "does it work for training".

    PJRT_DEVICE=CPU $(scripts/pyenv.sh torch) bench/peers/xla_compile.py --model resnet18
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
    step = torch_xla.compile(pt.plain_step(model, x, y, pt.sgd(params)), full_graph=True,
                             name=f"{args.model}_step")
    cell.time_steps(step, xm.wait_device_ops, xmet.counters, pt.loss_float)
    return xmet.finish(cell)


if __name__ == "__main__":
    args = pc.parse_args("xla_compile")
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("CPU_NUM_DEVICES", "1")
    sys.exit(pc.run_cell(args, body, lambda: __import__("xla_metrics").versions()))
