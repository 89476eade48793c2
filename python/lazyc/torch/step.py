"""train_step: a whole PyTorch training step as one lazyc execution.

The model's forward and the loss are traced once with make_fx (fake tensors,
nothing computed) into one aten graph over (parameters, buffers, x, y). That
graph is lowered to lazyc ops inside a step function given to lz_capture,
followed by lazyc's in-graph backward and optimizer update (lz_sgd/lz_adamw
implement torch.optim.SGD/Adam/AdamW's formulas, with the learning rate and
Adam's step count as data). lz_capture traces the step function once and
replays it: a call is one lz_call, one execution, and never enters Python
while replaying.
"""
import ctypes
import warnings
import weakref

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functional_call

from .._lib import lib, error, shape_arg, STEP_FN, SgdOpts, AdamwOpts, F32, I64, I32, BF16
from . import lower, guard

_DTYPES = {torch.float32: F32, torch.int64: I64, torch.int32: I32}
# torch.bool tensors (masks, buffers) travel as f32 0/1, lazyc's masks

_LIVE = {}      # id(model) -> the latest TrainStep over it, for sync()
# id(parameter) -> the TrainStep whose execution updates it: torch's
# clip_grad_norm_ on such a parameter finds no .grad and clips nothing
_IN_LAZYC = weakref.WeakValueDictionary()


def _to_lazyc(t, what="tensors"):
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        t = t.float()
    if t.dtype not in _DTYPES:
        raise TypeError("lazyc.torch: %s must be float32, int64, int32 or bool, not %s" % (what, t.dtype))
    if t.device.type != "cpu":
        raise TypeError("lazyc.torch: tensors must be on the CPU (lazyc runs them), not %s" % t.device)
    shape = tuple(t.shape)
    h = lib.lz_from_host(ctypes.c_void_p(t.data_ptr()), _DTYPES[t.dtype], len(shape), shape_arg(shape))
    if not h:
        raise error("lz_from_host")
    return h


def _to_torch(h, like):
    """Copies lazyc tensor h into torch tensor `like` (same shape and dtype)."""
    if like.dtype == torch.bool:
        tmp = torch.empty(like.shape, dtype=torch.float32)
        if lib.lz_to_host(h, ctypes.c_void_p(tmp.data_ptr()), tmp.numel() * 4) != 0:
            raise error("lz_to_host")
        with torch.no_grad():
            like.copy_(tmp != 0)
        return
    tmp = torch.empty(like.shape, dtype=like.dtype)
    if lib.lz_to_host(h, ctypes.c_void_p(tmp.data_ptr()), tmp.numel() * tmp.element_size()) != 0:
        raise error("lz_to_host")
    with torch.no_grad():
        like.copy_(tmp)


class _Opt:
    """One lazyc optimizer for one torch.optim param group."""

    def __init__(self, kind, group, handles, params):
        self.kind, self.group, self.params, self.handles = kind, group, params, list(handles)
        arr = (ctypes.c_void_p * len(handles))(*handles)
        zero = -1e30  # LZ_OPT_ZERO: an exact 0 where 0 would mean "torch's default"
        if group.get("maximize") or group.get("differentiable"):
            raise ValueError("lazyc.torch: maximize/differentiable optimizers are not supported")
        if kind == "sgd":
            o = SgdOpts(lr=group["lr"] or zero, momentum=group["momentum"], dampening=group["dampening"],
                        weight_decay=group["weight_decay"], nesterov=int(bool(group["nesterov"])))
            self.h = lib.lz_sgd_new(arr, len(handles), o)
        else:
            if group.get("amsgrad"):
                raise ValueError("lazyc.torch: Adam/AdamW with amsgrad is not supported")
            b1, b2 = group["betas"]
            o = AdamwOpts(lr=group["lr"] or zero, beta1=b1 or zero, beta2=b2 or zero,
                          eps=group["eps"] or zero, weight_decay=group["weight_decay"],
                          decoupled=int(kind == "adamw"))
            self.h = lib.lz_adamw_new(arr, len(handles), o)
        if not self.h:
            raise error("lazyc.torch: making the %s optimizer" % kind)
        self.lr = float(group["lr"])

    def set_lr_if_changed(self):
        lr = float(self.group["lr"])
        if lr != self.lr:
            (lib.lz_sgd_set_lr if self.kind == "sgd" else lib.lz_adamw_set_lr)(self.h, ctypes.c_float(lr))
            self.lr = lr

    def zero_grad(self):
        (lib.lz_sgd_zero_grad if self.kind == "sgd" else lib.lz_adamw_zero_grad)(self.h)

    def step(self):
        return (lib.lz_sgd_step if self.kind == "sgd" else lib.lz_adamw_step)(self.h)

    def state(self):
        """{(param index in group, state name): handle} (new handles, caller frees the set)."""
        ps = lib.lz_params_new()
        fn = lib.lz_sgd_state if self.kind == "sgd" else lib.lz_adamw_state
        if fn(self.h, ps, b"s") != 0:
            lib.lz_params_free(ps)
            raise error("lazyc.torch: reading the optimizer state")
        out = {}
        for i in range(lib.lz_params_count(ps)):
            name = lib.lz_params_name(ps, i).decode().split(".")
            if len(name) == 3:
                out[(int(name[2]), name[1])] = lib.lz_params_at(ps, i)
            else:
                out[(None, name[1])] = lib.lz_params_at(ps, i)
        return ps, out

    def free(self):
        (lib.lz_sgd_free if self.kind == "sgd" else lib.lz_adamw_free)(self.h)


def _opt_kind(optimizer):
    if type(optimizer) is torch.optim.SGD:
        return "sgd"
    if type(optimizer) is torch.optim.AdamW:
        return "adamw"
    if type(optimizer) is torch.optim.Adam:
        return "adam"
    raise TypeError("lazyc.torch.train_step: optimizer must be torch.optim.SGD, Adam or AdamW, not %s"
                    % type(optimizer).__name__)


class TrainStep:
    """The callable train_step returns: step(x, y) -> loss as a float."""

    def __init__(self, model, optimizer, loss_fn, clip_grad_norm=None, accumulate=1):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        if int(accumulate) != accumulate or accumulate < 1:
            raise ValueError("lazyc.torch.train_step: accumulate=%r must be a positive integer" % (accumulate,))
        self.accumulate, self.micro = int(accumulate), None
        if clip_grad_norm is not None and not (float(clip_grad_norm) > 0 and
                                               float(clip_grad_norm) < float("inf")):
            raise ValueError("lazyc.torch.train_step: clip_grad_norm=%r must be a positive finite number"
                             % (clip_grad_norm,))
        self.clip = None if clip_grad_norm is None else float(clip_grad_norm)
        self._norm = None        # the last step's gradient norm (a lazyc handle), when clipping
        kind = _opt_kind(optimizer)
        if any(optimizer.state.get(p) for g in optimizer.param_groups for p in g["params"]):
            raise ValueError("lazyc.torch.train_step: the optimizer has state already; start from a "
                             "fresh optimizer (loading torch's optimizer state is not supported yet)")
        self.pnames = [n for n, _ in model.named_parameters()]
        self.ptensors = [p for _, p in model.named_parameters()]
        self.bnames = [n for n, _ in model.named_buffers()]
        self.btensors = [b for _, b in model.named_buffers()]
        self.handles = [_to_lazyc(t) for t in self.ptensors + self.btensors]
        by_id = {}
        for p, h in zip(self.ptensors, self.handles):
            if p.requires_grad:
                lib.lz_requires_grad(h, 1)
            by_id[id(p)] = h
        self.opts = []
        for g in optimizer.param_groups:
            ps = [p for p in g["params"] if p.requires_grad]
            for p in ps:
                if id(p) not in by_id:
                    raise ValueError("lazyc.torch.train_step: the optimizer holds a tensor that is not "
                                     "one of the model's parameters")
            if ps:
                self.opts.append(_Opt(kind, g, [by_id[id(p)] for p in ps], ps))
        self.consts = lower.Constants()
        self.fn = None
        self.key = None
        self.counted = {}        # buffer index -> increments per step (num_batches_tracked)
        self.steps = 0
        self.traces = 0          # times the step function ran in Python (traced)
        self.guards = None       # what the trace assumed about data (guard.Guards)
        self.retraces = 0        # traces made again because a guard failed
        self._error = None
        self._cb = STEP_FN(self._step_fn)
        _LIVE[id(model)] = self
        for p in self.ptensors:
            _IN_LAZYC[id(p)] = self

    # -- tracing ----------------------------------------------------------
    def _trace(self, x, y):
        np_ = len(self.ptensors)
        model, loss_fn, names = self.model, self.loss_fn, self.pnames + self.bnames

        def f(tensors, x, y):
            with lower.TracingMode():
                return loss_fn(functional_call(model, dict(zip(names, tensors)), (x,)), y)

        ins = [p.detach().requires_grad_(p.requires_grad) for p in self.ptensors] + \
              [b.detach().clone() for b in self.btensors]
        # the model's own tensors, restored after tracing: functional_call
        # swaps them for the trace's and a model that re-ties weights while
        # running (HF T5) could keep a traced one
        saved = [(m, dict(m._parameters), dict(m._buffers)) for m in model.modules()]
        try:
            gm = lower.trace(f, ins, x, y)
        finally:
            for m, ps, bs in saved:
                m._parameters.update(ps)
                m._buffers.update(bs)
        self.guards = guard.Guards(gm, np_, [ins, x, y])
        bad = lower.unsupported_ops(gm)
        if bad:
            raise lower.Unsupported("lazyc.torch.train_step: lazyc has no lowering for %s" % ", ".join(bad))
        out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        if isinstance(out, (list, tuple)) and len(out) != 1:
            raise ValueError("lazyc.torch.train_step: loss_fn must return one tensor")
        lower.prepare_constants(gm, self.consts)
        self.np = np_
        return gm

    def _on_buffer_update(self, index, node):
        i = index - self.np
        if 0 <= i < len(self.btensors) and self.btensors[i].dtype == torch.int64 \
                and node.target in (lower.aten.add_.Tensor, lower.aten.add_.Scalar) \
                and isinstance(node.args[1], int):
            # num_batches_tracked += 1: an integer count, kept on the host and written by sync()
            self._pending[i] = self._pending.get(i, 0) + node.args[1]
            return
        raise lower.Unsupported("lazyc.torch: %s on the buffer %s" % (lower._name(node.target),
                                                                       (self.pnames + self.bnames)[index]))

    def _step_fn(self, ctx, ins, outs):
        try:
            self.traces += 1
            for o in self.opts:
                o.zero_grad()
            self._pending = {}
            k = self.accumulate
            losses = []
            for i in range(k):
                # micro-batch i: forward and backward of loss / k, the
                # gradients adding up in the leaves, as loss.backward() per
                # micro-batch does in torch
                with self.consts.scope():
                    xs, ys = ins[0], ins[1]
                    if k > 1:
                        b = self.micro
                        xs = lib.lz_slice(ins[0], 0, i * b, (i + 1) * b)
                        ys = lib.lz_slice(ins[1], 0, i * b, (i + 1) * b)
                    loss = lower.run_graph(self.gm, self.handles + [xs, ys], self.consts,
                                           self._on_buffer_update)
                    if isinstance(loss, (list, tuple)):
                        loss = loss[0]
                    lib.lz_keep(loss)
                seed = lib.lz_scale(loss, ctypes.c_float(1.0 / k)) if k > 1 else loss
                if lib.lz_backward(seed) != 0:
                    raise error("lazyc.torch: backward")
                if k > 1:
                    lib.lz_free(seed)
                losses.append(loss)
            if k > 1:
                lib.lz_no_grad_begin()
                total = losses[0]
                for extra in losses[1:]:
                    total = lib.lz_add(total, extra)
                loss = lib.lz_scale(total, ctypes.c_float(1.0 / k))
                lib.lz_no_grad_end()
            if self.clip is not None:
                ps = [h for o in self.opts for h in o.handles]
                norm = lib.lz_clip_grad_norm((ctypes.c_void_p * len(ps))(*ps), len(ps),
                                             ctypes.c_float(self.clip))
                if not norm:
                    raise error("lazyc.torch: clip_grad_norm")
                outs[1] = norm
            for o in self.opts:
                if o.step() != 0:
                    raise error("lazyc.torch: optimizer step")
            self.counted = self._pending
            outs[0] = loss
            return 0
        except BaseException as e:  # noqa: B902 - a C callback must not raise
            self._error = e
            lib.lz_set_error(b"%s", str(e).encode()[:400])
            return -1

    # -- calls ------------------------------------------------------------
    def _micro(self, t, i):
        return t[i * self.micro:(i + 1) * self.micro] if self.accumulate > 1 else t

    def __call__(self, x, y):
        ac = _autocast_dtype()
        key = (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype, ac)
        if self.accumulate > 1 and (x.shape[0] % self.accumulate or y.shape[0] != x.shape[0]):
            raise ValueError("lazyc.torch: accumulate=%d needs a batch that splits into equal micro-batches "
                             "(x %s, y %s)" % (self.accumulate, tuple(x.shape), tuple(y.shape)))
        self.micro = x.shape[0] // self.accumulate
        if key == self.key and self.guards and not all(
                self.guards.hold(self._micro(x, i), self._micro(y, i), self.btensors)
                for i in range(self.accumulate)):
            self.key = None      # the batch takes another branch of the model's Python: trace it
            self.retraces += 1
        if key != self.key:
            if self.fn:
                lib.lz_fn_free(self.fn)
                self.fn = None
            with torch.autocast("cpu", enabled=False):
                # the graph stays float32; lazyc's autocast region (below)
                # makes the products bf16
                self.gm = self._trace(self._micro(x, 0), self._micro(y, 0))
            self.fn = lib.lz_capture(self._cb, None, 2, self.n_out)
            if not self.fn:
                raise error("lz_capture")
            self.key = key
        for o in self.opts:
            o.set_lr_if_changed()
        hx, hy = _to_lazyc(x), _to_lazyc(y)
        ins = (ctypes.c_void_p * 2)(hx, hy)
        out = (ctypes.c_void_p * self.n_out)()
        self._error = None
        if ac is not None and lib.lz_autocast_begin(BF16) != 0:
            raise error("lazyc.torch: autocast")
        try:
            rc = lib.lz_call(self.fn, ins, out)
        finally:
            if ac is not None:
                lib.lz_autocast_end()
        lib.lz_free(hx)
        lib.lz_free(hy)
        if rc != 0:
            e, self._error = self._error, None
            if e is not None:
                raise e
            raise error("lazyc.torch: the step")
        loss = lib.lz_item(out[0])
        lib.lz_free(out[0])
        if self._norm:
            lib.lz_free(self._norm)
        self._norm = out[1] if self.n_out > 1 else None
        self.steps += 1
        # torch's schedulers check that optimizer.step ran before them
        self.optimizer._opt_called = True
        for i, n in self.counted.items():
            with torch.no_grad():
                self.btensors[i].add_(n)   # the torch buffer counts as torch would
        return float(loss)

    # -- write back -------------------------------------------------------
    def sync(self):
        for t, h in zip(self.ptensors + self.btensors, self.handles):
            if t.dtype == torch.int64 and t.dim() == 0 and any(
                    t is self.btensors[i] for i in self.counted):
                continue     # counted on the host already
            _to_torch(h, t)
        for o in self.opts:
            ps, st = o.state()
            try:
                for i, p in enumerate(o.params):
                    s = self.optimizer.state[p]
                    if o.kind == "sgd":
                        if (i, "momentum_buffer") in st and self.steps:
                            buf = s.get("momentum_buffer")
                            if buf is None:
                                buf = s["momentum_buffer"] = torch.empty_like(p)
                            _to_torch(st[(i, "momentum_buffer")], buf)
                    elif self.steps:
                        for name in ("exp_avg", "exp_avg_sq"):
                            if name not in s:
                                s[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
                            _to_torch(st[(i, name)], s[name])
                        if "step" not in s:
                            s["step"] = torch.tensor(0.0)
                        _to_torch(st[(i, "step")], s["step"])
            finally:
                lib.lz_params_free(ps)

    @property
    def n_out(self):
        return 1 if self.clip is None else 2

    def grad_norm(self):
        """The total gradient norm of the last step before clipping (as
        torch.nn.utils.clip_grad_norm_ returns it); read from lazyc on
        request, so a step that does not ask copies back only its loss."""
        if self.clip is None:
            raise ValueError("lazyc.torch: grad_norm() needs train_step(..., clip_grad_norm=MAX)")
        if not self._norm:
            raise ValueError("lazyc.torch: no step has run yet")
        return float(lib.lz_item(self._norm))

    def close(self):
        if self._norm:
            lib.lz_free(self._norm)
            self._norm = None
        for p in self.ptensors:
            if _IN_LAZYC.get(id(p)) is self:
                del _IN_LAZYC[id(p)]
        if self.fn:
            lib.lz_fn_free(self.fn)
            self.fn = None
        for o in self.opts:
            o.free()
        self.opts = []
        for h in self.handles:
            lib.lz_free(h)
        self.handles = []
        self.consts.free()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _autocast_dtype():
    """torch.autocast("cpu", torch.bfloat16) around the call: lazyc's
    autocast (lz_autocast_begin: products in bf16, accumulated and returned
    in f32; the rest f32). None outside autocast."""
    if not torch.is_autocast_enabled("cpu"):
        return None
    dt = torch.get_autocast_dtype("cpu")
    if dt != torch.bfloat16:
        raise lower.Unsupported("lazyc.torch: torch.autocast to %s (lazyc's autocast is bfloat16)" % dt)
    return dt


def train_step(model, optimizer, loss_fn, clip_grad_norm=None, accumulate=1):
    """step(x, y) -> float: forward, loss_fn(output, y), backward and the
    optimizer's update as one lazyc execution. lazyc holds the parameters,
    buffers and optimizer state from here on; sync(model, optimizer) writes
    them back into the torch objects. clip_grad_norm=MAX clips the
    gradients' total norm to MAX between backward and the update, in the
    same execution, as torch.nn.utils.clip_grad_norm_(params, MAX) does
    there; step.grad_norm() reads the norm before clipping. accumulate=K
    splits each batch into K equal micro-batches along axis 0 and adds up
    their gradients (of loss / K) before the one update, all in the one
    execution; the loss returned is the micro-batches' mean. Called under
    torch.autocast("cpu", dtype=torch.bfloat16), the step runs in lazyc's
    bf16 autocast (products in bf16, f32 elsewhere)."""
    return TrainStep(model, optimizer, loss_fn, clip_grad_norm, accumulate)


_warned_clip = set()


def _wrap_clip(name, original):
    def clip(parameters, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)
        if name not in _warned_clip and any(id(p) in _IN_LAZYC for p in parameters):
            _warned_clip.add(name)
            warnings.warn("lazyc.torch: torch.nn.utils.%s on parameters whose training step runs in lazyc "
                          "clips nothing: their gradients live in lazyc, not in .grad. Pass "
                          "clip_grad_norm=MAX to lazyc.torch.train_step to clip inside the step, and "
                          "read the norm with step.grad_norm()" % name, stacklevel=2)
        return original(parameters, *args, **kwargs)
    clip.__wrapped__ = original
    clip.__doc__ = original.__doc__
    return clip


def install_clip_warnings():
    """Wraps torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (where
    training recipes call them) so that a call on a model whose step runs
    in lazyc warns once instead of silently clipping nothing."""
    import torch.nn.utils as U
    import torch.nn.utils.clip_grad as C
    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"):
        orig = getattr(U, name, None)
        if orig is None or hasattr(orig, "__wrapped__") and getattr(orig, "_lazyc", False):
            continue
        w = _wrap_clip(name, orig)
        w._lazyc = True
        setattr(U, name, w)
        if getattr(C, name, None) is orig:
            setattr(C, name, w)


def sync(model, optimizer=None):
    """Writes lazyc's parameters, buffers and (given the optimizer) its
    state back into the torch model and optimizer."""
    st = _LIVE.get(id(model))
    if st is None:
        raise ValueError("lazyc.torch.sync: no train_step was made for this model")
    if optimizer is not None and optimizer is not st.optimizer:
        raise ValueError("lazyc.torch.sync: this optimizer is not the one given to train_step")
    st.sync()
