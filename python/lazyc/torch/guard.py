"""Guards on what a real-batch trace assumed about data.

train_step traces its first call with the real batch, so Python in a
forward that reads tensor values (`if (mask == 0).any():`, `.item()`,
HF's checks on attention masks) runs on real values and the trace follows
the branch that batch took. Each such read is a node of the graph
(aten._local_scalar_dense, is_nonzero, equal) whose value the trace
assumed. A guard recomputes it in torch on each later batch, before the
step runs in lazyc, and a different value makes the step trace again.

Only reads of the batch, constants and buffers the step never changes can
be recomputed on the host: a read of a parameter or of a buffer the step
updates (their current values live in lazyc) raises Unsupported naming
the source line.
"""
import operator

import torch

from . import lower

aten = torch.ops.aten
READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default}


def _mutated_inputs(gm):
    return {n.args[0] for n in gm.graph.nodes
            if n.op == "call_function" and n.target == aten.copy_.default and n.args[0].op == "placeholder"}


class Guards:
    def __init__(self, gm, n_params, example):
        """gm: the traced graph; its placeholders are (params..., buffers...,
        x, y) in that order (n_params parameters); example: the values the
        trace ran on, as [params + buffers, x, y]."""
        self.gm = gm
        self.reads = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in READS]
        self.nodes = []
        self.expected = []
        if not self.reads:
            return
        ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.placeholders = ph
        n_tensors = len(ph) - 2
        mutated = _mutated_inputs(gm)
        need = set()
        stack = list(self.reads)
        while stack:
            n = stack.pop()
            if n in need:
                continue
            need.add(n)
            stack.extend(n.all_input_nodes)
        for i, n in enumerate(ph[:n_tensors]):
            if n in need and (i < n_params or n in mutated):
                bad = [r for r in self.reads if self._depends(r, n)]
                raise lower.Unsupported(
                    "lazyc.torch: the model's Python reads the value of %s %s while tracing%s; lazyc "
                    "holds its current value, so the branch taken cannot be checked on the host"
                    % ("a parameter" if i < n_params else "a buffer the step updates", n.target,
                       lower._source(bad[0]) if bad else ""))
        self.nodes = [n for n in gm.graph.nodes if n in need]
        self.n_tensors = n_tensors
        self.expected = self._evaluate(list(example[0]) + [example[1], example[2]])

    def _depends(self, node, target):
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if n is target:
                return True
            if n in seen:
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return False

    def __bool__(self):
        return bool(self.reads)

    def _evaluate(self, inputs):
        env = dict(zip(self.placeholders, inputs))
        out = []
        with torch.no_grad():
            for n in self.nodes:
                if n.op == "placeholder":
                    continue
                if n.op == "get_attr":
                    env[n] = getattr(self.gm, n.target)
                    continue
                args = torch.fx.node.map_arg(n.args, lambda a: env[a])
                kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a])
                env[n] = n.target(*args, **kwargs) if n.target is not operator.getitem else args[0][args[1]]
                if n in self.reads:
                    v = env[n]
                    out.append(v.item() if isinstance(v, torch.Tensor) else v)
        return out

    def hold(self, x, y, buffers):
        """Whether batch (x, y) takes the branches the trace took."""
        n_buf = len(buffers)
        # parameters are never read by a guard (refused above): stand-ins
        inputs = [None] * (self.n_tensors - n_buf) + [b.detach() for b in buffers] + [x, y]
        return self._evaluate(inputs) == self.expected
