"""torch.compile(model, backend="lazyc"): the compiler-bridge path.

Dynamo hands over the forward graph; aot_autograd splits it into a forward
and a backward aten graph, each lowered to lazyc ops the way train_step's
graph is. A graph with an op lazyc cannot lower runs in eager torch instead,
with a warning naming the op. Each compiled graph is one lazyc execution per
call (its inputs copied in, its outputs copied out: the optimizer stays in
torch, so forward, backward and the update are three separate runs; only
train_step makes the whole step one).
"""
import ctypes
import warnings

import torch

from .._lib import lib, error
from . import lower
from .step import _to_lazyc, _DTYPES


class _Compiled:
    def __init__(self, gm, kind):
        self.gm, self.kind = gm, kind
        self.consts = lower.Constants()
        lower.prepare_constants(gm, self.consts)
        self.outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]

    def __call__(self, args):
        args = list(args)
        handles = [_to_lazyc(a) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            with self.consts.scope():
                outs = lower.run_graph(self.gm, handles, self.consts)
                live = [h for h in outs if isinstance(h, lower.Handle)]
                if live and lib.lz_sync((ctypes.c_void_p * len(live))(*live), len(live), 1) != 0:
                    raise error("lazyc torch.compile backend: running the graph")   # all outputs: one graph
                results = []
                for node, h in zip(self.outs, outs):
                    if h is None or not isinstance(node, torch.fx.Node):
                        results.append(h)
                        continue
                    val = node.meta["val"]
                    if val.dtype not in _DTYPES:
                        raise lower.Unsupported("an output of dtype %s" % val.dtype)
                    t = torch.empty(tuple(val.shape), dtype=val.dtype)
                    if lib.lz_to_host(h, ctypes.c_void_p(t.data_ptr()), t.numel() * t.element_size()) != 0:
                        raise error("lazyc torch.compile backend: reading an output")
                    results.append(t)
        finally:
            for a, h in zip(args, handles):
                if isinstance(a, torch.Tensor):
                    lib.lz_free(h)
        return results


def _has_mutated_inputs(gm):
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target == lower.aten.copy_.default:
            return True
    return False


def _compiler(kind):
    def compile_graph(gm, example_inputs):
        bad = lower.unsupported_ops(gm)
        if not bad and _has_mutated_inputs(gm):
            bad = ["aten::copy_ into a graph input (buffer updates)"]
        if bad:
            warnings.warn("lazyc: the %s graph runs in eager torch: lazyc has no lowering for %s"
                          % (kind, ", ".join(bad)), stacklevel=2)
            from functorch.compile import make_boxed_func
            return make_boxed_func(gm.forward)
        c = _Compiled(gm, kind)
        c._boxed_call = True     # aot_autograd passes the argument list itself
        return c
    return compile_graph


def lazyc_backend(gm, example_inputs, **kwargs):
    """The "lazyc" torch.compile backend (aot_autograd: forward and backward graphs)."""
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"))(
        gm, example_inputs, **kwargs)


def register():
    from torch._dynamo.backends.registry import register_backend, _BACKENDS
    if "lazyc" not in _BACKENDS:
        register_backend(name="lazyc", compiler_fn=lazyc_backend)
