"""torch.compile(model, backend="lazyc"): the compiler-bridge path.

Dynamo hands over a torch-level graph. It is traced to a functionalised
aten graph (make_fx on the example inputs' fake tensors, the way
train_step traces) and cut into the parts lazyc lowers and the ops it does
not: each lowered part becomes one torch.autograd.Function whose forward
is one lazyc execution (the part's outputs and every value its backward
saves, cut in one graph by lz_mark_step) and whose backward is lazyc's
autograd over the same recorded forward, one more execution. An op lazyc
cannot lower runs in eager torch between the parts, with a warning naming
it, instead of sending the whole graph back to torch. Buffer updates
(batch norm's running statistics, its counter) are written back into the
torch buffers after the part that makes them.

The optimizer stays in torch: a training step is the forward and the
backward execution of each part plus torch's update. train_step is the
path that makes the whole step, update included, one execution.
"""
import contextlib
import ctypes
import operator
import warnings

import torch

from .._lib import lib, error, shape_arg
from . import lower
from .step import _to_lazyc

aten = torch.ops.aten


@contextlib.contextmanager
def _real():
    """Host computation (constants, factory values) outside any fake mode
    Dynamo has active: a FakeTensor has no data to copy into lazyc."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        yield


def _to_torch_new(h, val):
    """A new torch tensor with lazyc tensor h's value (val: the node's
    example value, for shape and dtype)."""
    dt = val.dtype
    t = torch.empty(tuple(val.shape), dtype=torch.float32 if dt == torch.bool else dt)
    if lib.lz_to_host(h, ctypes.c_void_p(t.data_ptr()), t.numel() * t.element_size()) != 0:
        raise error("lazyc torch.compile backend: reading an output")
    return t != 0 if dt == torch.bool else t


class _Part:
    """One lowered part: its aten graph and constants."""

    def __init__(self, gm):
        self.gm = gm
        self.consts = lower.Constants()
        with _real():
            lower.prepare_constants(gm, self.consts)
        out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        self.outs = list(out) if isinstance(out, (list, tuple)) else [out]
        self.single = not isinstance(out, (list, tuple))
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # inputs the part writes: copy_ into them (functionalised updates) and
        # the arguments an op writes in place (batch norm's running
        # statistics): their torch tensors get the new values after a run
        self.mutated = {}
        for n in gm.graph.nodes:
            if n.op != "call_function" or not hasattr(n.target, "_schema"):
                continue
            for a, v in lower._bound(n):
                if isinstance(v, torch.fx.Node) and v.op == "placeholder" and a.alias_info is not None \
                        and a.alias_info.is_write:
                    self.mutated[self.placeholders.index(v)] = v

    def forward(self, args, want_grad):
        """Runs the part in lazyc: (torch outputs, state for backward or None).
        want_grad: grad mode where the part was called (autograd.Function's
        forward itself runs without it)."""
        handles, grads_for = [], []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                h = _to_lazyc(a)
                if want_grad and a.requires_grad and a.is_floating_point():
                    lib.lz_requires_grad(h, 1)
                    grads_for.append(i)
                handles.append(lower.Handle(h))
            else:
                handles.append(a)
        try:
            with self.consts.scope():
                outs = lower.run_graph(self.gm, handles, self.consts)
                outs = [outs] if self.single else list(outs)
                # an output that is an input passed through is that input's
                # handle, not a new one to keep
                kept = [lower.Handle(lib.lz_retain(h)) if isinstance(h, lower.Handle) else None for h in outs]
            # one execution: the outputs, the buffers' new values and what the
            # backward saves (every live tensor's pending IR)
            lib.lz_mark_step()
            results = []
            for node, h in zip(self.outs, kept):
                if h is None or not isinstance(node, torch.fx.Node):
                    results.append(None if h is None and isinstance(node, torch.fx.Node) else node)
                    continue
                results.append(_to_torch_new(h, node.meta["val"]))
            for i in self.mutated:
                with torch.no_grad():
                    args[i].copy_(_to_torch_new(handles[i], args[i]))
        except BaseException:
            for h in handles:
                if isinstance(h, lower.Handle):
                    lib.lz_free(h)
            raise
        state = None
        if grads_for:
            state = (handles, grads_for, kept)
        else:
            self.release(handles, kept, args)
        return results, state

    def release(self, handles, kept, args=None):
        for h in kept:
            if h:
                lib.lz_free(h)
        for h in handles:
            if isinstance(h, lower.Handle):
                lib.lz_free(h)

    def backward(self, state, gouts):
        handles, grads_for, kept = state
        try:
            lib.lz_scope_begin()
            try:
                seed = None
                for h, g, node in zip(kept, gouts, self.outs):
                    if h is None or g is None or not isinstance(node, torch.fx.Node) or \
                            not node.meta["val"].is_floating_point():
                        continue
                    term = lib.lz_sum(lib.lz_mul(h, _to_lazyc(g.contiguous())))
                    seed = term if seed is None else lib.lz_add(seed, term)
                grads = [None] * len(handles)
                if seed is not None:
                    if lib.lz_backward(seed) != 0:
                        raise error("lazyc torch.compile backend: backward")
                    live = [lib.lz_grad(handles[i]) for i in grads_for]
                    live = [g for g in live if g]
                    if live and lib.lz_sync((ctypes.c_void_p * len(live))(*live), len(live), 1) != 0:
                        raise error("lazyc torch.compile backend: running the backward")   # one graph
                    for i in grads_for:
                        g = lib.lz_grad(handles[i])
                        if g:
                            grads[i] = _to_torch_new(g, self.placeholders[i].meta["val"])
            finally:
                lib.lz_scope_end()
            return grads
        finally:
            self.release(handles, kept)


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, part, want_grad, *args):
        results, state = part.forward(list(args), want_grad)
        ctx.part, ctx.state = part, state
        ctx.n = len(args)
        tensors = [r for r in results if isinstance(r, torch.Tensor)]
        ctx.mark_non_differentiable(*[t for t in tensors if not t.is_floating_point()])
        return tuple(results)

    @staticmethod
    def backward(ctx, *gouts):
        if ctx.state is None:
            return (None,) * (ctx.n + 2)
        grads = ctx.part.backward(ctx.state, gouts)
        ctx.state = None
        return (None, None) + tuple(grads)


class _PartModule(torch.nn.Module):
    def __init__(self, gm):
        super().__init__()
        self.part = _Part(gm)

    def forward(self, *args):
        out = _Fn.apply(self.part, torch.is_grad_enabled(), *args)
        return out[0] if self.part.single else out


class _Supported:
    def __init__(self, gm):
        self.live = lower.live_nodes(gm)

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            return True
        if node.target == aten.copy_.default:
            return node.args[0].op == "placeholder"
        return node.target in lower.LOWER and not lower.arg_problems(node)


def _partition(gm):
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    sup = _Supported(gm)

    class S(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return sup.is_node_supported(submodules, node)

    p = CapabilityBasedPartitioner(gm, S(), allows_single_node_partition=True)
    fused = p.fuse_partitions(p.propose_partitions())
    # what stays outside the parts runs in torch: the ops lazyc does not
    # lower (and the reads of values that feed only Python)
    fallback = sorted({lower._name(n.target) for n in fused.graph.nodes
                       if n.op == "call_function" and n.target is not operator.getitem
                       and not lower._dead(n)})
    for n in list(fused.graph.nodes):
        if n.op == "call_module" and n.target.startswith("fused_"):
            setattr(fused, n.target, _PartModule(getattr(fused, n.target)))
    return fused, fallback


# compiled graphs and the lazyc parts they were cut into, since import
# (the corpus reports executions per part)
STATS = {"graphs": 0, "parts": 0}


def lazyc_backend(gm, example_inputs, **kwargs):
    """The "lazyc" torch.compile backend."""
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch._guards import detect_fake_mode

    from torch.func import functional_call

    # parameters and buffers the graph reads as attributes become inputs of
    # the aten graph, so that gradients reach them and buffer updates are
    # written back: each call passes the module's current tensors
    names = [n for n, _ in gm.named_parameters(remove_duplicate=False)] + \
            [n for n, _ in gm.named_buffers(remove_duplicate=False)]

    def owned():
        d = dict(gm.named_parameters(remove_duplicate=False))
        d.update(gm.named_buffers(remove_duplicate=False))
        return [d[n] for n in names]

    def f(*flat):
        ts, xs = flat[:len(names)], flat[len(names):]
        return functional_call(gm, dict(zip(names, ts)), tuple(xs)) if names else gm(*xs)

    fake = detect_fake_mode(example_inputs)
    ctx = fake
    if fake is None:
        # real example inputs (Dynamo's parameters among them): traced as
        # plain tensors, on clones so the trace leaves the model's alone
        fake = torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=False)
        ctx = fake
    ex = [fake.from_tensor(t.detach(), static_shapes=True) if isinstance(t, torch.Tensor) else t
          for t in example_inputs]
    with ctx, lower.TracingMode():
        ts = [fake.from_tensor(t.detach(), static_shapes=True) for t in owned()]
        aten_gm = make_fx(functionalize(f, remove="mutations"), tracing_mode="real",
                          record_stack_traces=True)(*ts, *ex)
    fused, fallback = _partition(aten_gm)
    parts = [m for m in fused.modules() if isinstance(m, _PartModule)]
    STATS["graphs"] += 1
    STATS["parts"] += len(parts)
    if fallback:
        warnings.warn("lazyc: these ops run in eager torch between lazyc's executions (no lowering): %s"
                      % ", ".join(fallback), stacklevel=2)
    if not parts:
        warnings.warn("lazyc: the whole graph runs in eager torch", stacklevel=2)
    def run(*args):
        return fused(*owned(), *args)
    return run


def register():
    from torch._dynamo.backends.registry import register_backend, _BACKENDS
    if "lazyc" not in _BACKENDS:
        register_backend(name="lazyc", compiler_fn=lazyc_backend)
