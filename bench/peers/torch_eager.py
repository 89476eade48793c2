#!/usr/bin/env python3
"""PyTorch 2.9 eager: the same step as bench/torch_reference.py (PyTorch 1.13
in `lazyc bench`) on the current torch, the baseline of the compiled peers.

    $(scripts/pyenv.sh torch) bench/peers/torch_eager.py --model resnet18 --size smoke

Prints one JSON object (peers_common.run_cell). Eager runs every op as it is
called: no graph executions or compiles to count (null).
"""
import sys

import peers_common as pc


def body(args):
    import peers_torch as pt
    cell = pc.Cell(args)
    model, x, y, params = pt.build(args)
    step = pt.plain_step(model, x, y, pt.sgd(params))
    cell.time_steps(step, lambda: None, lambda: {}, pt.loss_float)
    return cell.finish(None, ())


def versions():
    import peers_torch as pt
    return pt.versions()


if __name__ == "__main__":
    args = pc.parse_args("torch_eager")
    sys.exit(pc.run_cell(args, body, versions))
