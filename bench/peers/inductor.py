#!/usr/bin/env python3
"""torch.compile with Inductor (PyTorch 2.9, CPU): the forward and loss
compiled, compiled autograd for the backward
(torch._dynamo.config.compiled_autograd, backward called inside the
compiled region), and the optimizer step compiled on its own (PyTorch's
"compiling the optimizer" recipe). zero_grad(set_to_none) stays eager.

    $(scripts/pyenv.sh torch) bench/peers/inductor.py --model resnet18

Graphs are counted by a backend that wraps Inductor's compile_fx: each
call of a compiled graph is one execution, each backend call one compile
(Dynamo's own counters, graph breaks included, are under "dynamo").
--no-compiled-autograd keeps AOTAutograd's backward (then the backward's
graph runs inside the forward's compiled function and is not counted
separately: executions_per_step is a lower bound, said in the note).
"""
import sys

import peers_common as pc


def body(args):
    import torch
    from torch._inductor.compile_fx import compile_fx
    from torch._dynamo.utils import counters as dyn
    import peers_torch as pt
    cell = pc.Cell(args)
    model, x, y, params = pt.build(args)
    opt = pt.sgd(params)
    count = {"executions": 0, "compiles": 0}

    def counting_backend(gm, example_inputs):
        count["compiles"] += 1
        fn = compile_fx(gm, example_inputs)

        def run(*a):
            count["executions"] += 1
            return fn(*a)
        return run

    compiled_autograd = not args.no_compiled_autograd
    torch._dynamo.config.compiled_autograd = compiled_autograd

    @torch.compile(backend=counting_backend)
    def forward_backward():
        loss = pt.loss_fn(model, x, y)
        loss.backward()
        return loss.detach()

    @torch.compile(backend=counting_backend)
    def opt_step():
        opt.step()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_backward()
        opt_step()
        return loss

    def counters():
        d = dict(count)
        d["unique_graphs"] = dyn["stats"].get("unique_graphs", 0)
        d["graph_breaks"] = sum(dyn["graph_break"].values())
        d["compiled_autograd_captures"] = dyn["compiled_autograd"].get("captures", 0)
        return d

    cell.time_steps(step, lambda: None, counters, pt.loss_float)
    notes = [] if compiled_autograd else ["backward graphs inside the forward's: not counted"]
    cell.d["compiled_autograd"] = compiled_autograd
    return cell.finish("executions", ("compiles",), notes)


def versions():
    import peers_torch as pt
    return pt.versions()


if __name__ == "__main__":
    import argparse
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--no-compiled-autograd", action="store_true")
    flags, rest = extra.parse_known_args()
    args = pc.parse_args("inductor", argv=rest)
    args.no_compiled_autograd = flags.no_compiled_autograd
    sys.exit(pc.run_cell(args, body, versions))
