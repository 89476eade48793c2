"""Lowering of an aten-level torch.fx graph (from make_fx or aot_autograd) to
lazyc ops through ctypes.

Each aten op maps to the lazyc ops that compute it; shapes come from the
nodes' metadata (every make_fx node carries its value's fake tensor), so a
view, reshape, unsqueeze or flatten is one lz_reshape to the recorded shape.
Running the lowering records lazy IR; inside lz_capture it is traced once and
replayed without Python. An op with no lowering raises Unsupported naming it.
"""
import contextlib
import ctypes
import math
import operator
from typing import Optional

import torch

from .._lib import (lib, error, shape_arg, int_arg, Conv2dOpts, Pool2dOpts, CrossEntropyOpts,
                    AttentionOpts, F32, I64, I32)

aten = torch.ops.aten


class Unsupported(NotImplementedError):
    """An aten op (or a form of one) lazyc has no lowering for."""


def _name(target):
    return str(target) if not hasattr(target, "name") else target.name()


def _chk(h, what):
    if not h:
        raise error(what)
    return h


def _shape(node):
    return tuple(int(s) for s in node.meta["val"].shape)


# torch dtype -> lazyc dtype. A torch.bool value is held as an f32 tensor of
# 0 and 1, which is what lazyc's comparisons give (lz_eq, lz_ne, ...): masks
# stay exact and lz_where reads them as conditions.
LZ_DTYPES = {torch.float32: F32, torch.int64: I64, torch.int32: I32, torch.bool: F32}


def _dtype_of(t):
    return LZ_DTYPES.get(t)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is_bool(node):
    v = _val(node)
    return isinstance(v, torch.Tensor) and v.dtype == torch.bool


class Constants:
    """0-d f32 scalars and other data tensors the lowered graph reads, made
    once and alive across calls, so a capture binds them instead of freezing
    host data made while tracing."""

    def __init__(self):
        self.scalars = {}
        self.tensors = []
        self.by_key = {}
        # set while a scope is open (lz_call's trace, a compiled graph's
        # run): a constant made then is kept through a retained handle (in
        # no scope), so the scope's end frees only the creation handle and
        # the constant lives on for later calls
        self.in_scope = False

    @contextlib.contextmanager
    def scope(self):
        """An lz scope around a run of the lowered graph: the tensors made
        in it are freed at its end (but those lz_keep keeps), and the
        constants made in it stay alive for later calls."""
        lib.lz_scope_begin()
        self.in_scope = True
        try:
            yield
        finally:
            self.in_scope = False
            lib.lz_scope_end()

    def _own(self, h):
        if self.in_scope:
            return _chk(lib.lz_retain(h), "lz_retain")
        return h

    def scalar(self, v):
        key = float(v)
        h = self.scalars.get(key)
        if h is None:
            h = self._own(_chk(lib.lz_scalar(ctypes.c_float(key)), "lz_scalar"))
            self.scalars[key] = h
        return h

    def const(self, v, dtype):
        """A 0-d constant v of lazyc dtype `dtype` (F32, I64 or I32)."""
        if dtype == F32:
            return self.scalar(float(v))
        tdt = torch.int64 if dtype == I64 else torch.int32
        return self.tensor(("const", dtype, int(v)), torch.tensor(int(v), dtype=tdt))

    def tensor(self, key, value):
        """A data tensor holding value (a torch tensor), made once per key."""
        h = self.by_key.get(key)
        if h is None:
            if _is_fake(value):
                raise Unsupported("a constant that is a fake tensor (no data): %s" % (key,))
            t = value.detach().contiguous()
            if t.dtype == torch.bool:
                t = t.float()
            dt = _dtype_of(t.dtype)
            if dt is None:
                raise Unsupported("a constant of dtype %s" % t.dtype)
            shape = tuple(t.shape)
            h = self._own(_chk(lib.lz_from_host(ctypes.c_void_p(t.data_ptr()), dt, len(shape),
                                                shape_arg(shape)), "lz_from_host"))
            self.by_key[key] = h
            self.tensors.append(h)
        return h

    def free(self):
        self.by_key = {}
        for h in list(self.scalars.values()) + self.tensors:
            lib.lz_free(h)
        self.scalars.clear()
        self.tensors.clear()


# ---- lowering table ---------------------------------------------------------

LOWER = {}
# op -> the names of the arguments its lowering implements, or ALL. Any
# other argument must hold its schema's default: unsupported_ops names the
# op and the argument otherwise, before anything runs, and run_graph
# refuses it too. No argument is ever dropped silently.
ARGS = {}
ALL = "all"
# op -> check(node): why this use of the op cannot be lowered, or None
CHECKS = {}


def lowers(*ops, args, check=None):
    def reg(fn):
        for op in ops:
            LOWER[op] = fn
            ARGS[op] = args
            if check is not None:
                CHECKS[op] = check
        return fn
    return reg


def _register(op, fn, args=ALL, check=None):
    LOWER[op] = fn
    ARGS[op] = args
    if check is not None:
        CHECKS[op] = check


def _bound(node):
    """(schema argument, value) for every argument of node's op, defaults filled."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    out, pos = [], list(node.args)
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only and i < len(pos):
            v = pos[i]
        elif a.name in node.kwargs:
            v = node.kwargs[a.name]
        else:
            v = a.default_value if a.has_default_value() else None
        out.append((a, v))
    return out


def _same(v, d):
    if isinstance(v, torch.fx.Node) or isinstance(d, torch.fx.Node):
        return False
    if isinstance(v, (list, tuple)) and isinstance(d, (list, tuple)):
        return list(v) == list(d)
    return v == d or (v is None and d is None)


def _bound_value(node, name):
    for a, v in _bound(node):
        if a.name == name:
            return v
    return None


def _cpu_only(node):
    dev = _bound_value(node, "device")
    if dev is not None and torch.device(dev).type != "cpu":
        return "device=%s (lazyc runs on the CPU)" % dev
    return None


def arg_problems(node):
    """The reasons node cannot be lowered as it is: arguments its lowering
    does not implement set to a value other than the default, the op's
    own check, dtypes lazyc does not hold."""
    probs = []
    impl = ARGS.get(node.target, ALL)
    if impl != ALL:
        for a, v in _bound(node):
            if a.name in impl:
                continue
            # a required argument the lowering leaves out is a flag it does
            # not implement (softmax's half_to_float): it must be off
            d = a.default_value if a.has_default_value() else (False if isinstance(v, bool) else None)
            if not _same(v, d):
                shown = ("a tensor" if isinstance(v, torch.fx.Node) else repr(v))
                probs.append("%s: %s=%s is not supported" % (_name(node.target), a.name, shown))
    chk = CHECKS.get(node.target)
    if chk is not None:
        why = chk(node)
        if why:
            probs.append("%s: %s" % (_name(node.target), why))
    vals = node.meta.get("val")
    for v in (vals if isinstance(vals, (list, tuple)) else [vals]):
        if isinstance(v, torch.Tensor) and v.dtype not in LZ_DTYPES:
            probs.append("%s: dtype %s is not supported (float32, int64, int32, bool)"
                         % (_name(node.target), v.dtype))
            break
    return probs


class Handle(int):
    """A lazyc tensor handle (an lz_tensor pointer), told apart from the
    Python numbers an aten op also takes."""


def _tensor_or_scalar(cx, v, dtype=F32):
    if type(v) in (int, float, bool):
        return Handle(cx.consts.const(v, dtype))
    return v


def _lz_dtype(h):
    return lib.lz_tensor_dtype(h)


def _as(cx, h, dtype):
    """Handle h as lazyc dtype `dtype` (a cast when it differs)."""
    if type(h) in (int, float, bool):
        return Handle(cx.consts.const(h, dtype))
    if _lz_dtype(h) == dtype:
        return h
    return cx.op("lz_cast", h, dtype)


def _arg_dtype(a):
    """The torch dtype an operand of a binary op computes in (torch's type
    promotion: a Python number takes the tensor's kind)."""
    v = _val(a)
    if isinstance(v, torch.Tensor):
        return v.dtype
    return {bool: torch.bool, int: torch.int64, float: torch.float32}.get(type(a), torch.float32)


def _compute_dtype(node, a, b):
    """torch's result type of a and b (node.args of a binary op)."""
    ta, tb = _val(a), _val(b)
    if isinstance(ta, torch.Tensor) and isinstance(tb, torch.Tensor):
        return torch.promote_types(ta.dtype, tb.dtype) if (ta.dim() > 0) == (tb.dim() > 0) else \
            torch.result_type(torch.empty((1,) * ta.dim(), dtype=ta.dtype),
                              torch.empty((1,) * tb.dim(), dtype=tb.dtype))
    t = ta if isinstance(ta, torch.Tensor) else tb
    other = b if t is ta else a
    if not isinstance(t, torch.Tensor):
        return node.meta["val"].dtype
    return torch.result_type(torch.empty((), dtype=t.dtype) if t.dim() == 0 else
                             torch.empty((1,), dtype=t.dtype), other)


COMPARE = {"lz_gt", "lz_lt", "lz_ge", "lz_le", "lz_eq", "lz_ne"}


def _binary(fn_name):
    def lower(cx, node, a, b, alpha=1):
        out = node.meta["val"].dtype
        if fn_name in COMPARE:
            ct = _compute_dtype(node, node.args[0], node.args[1])
        else:
            ct = out
            if out == torch.bool and fn_name not in ("lz_mul", "lz_maximum", "lz_minimum"):
                raise Unsupported("%s on bool tensors" % _name(node.target))
        dt = _dtype_of(ct)
        if dt is None:
            raise Unsupported("%s in dtype %s" % (_name(node.target), ct))
        a, b = _as(cx, a, dt), _as(cx, b, dt)
        if alpha != 1:
            b = cx.op("lz_mul", b, _as(cx, alpha, dt))
        return cx.op(fn_name, a, b)
    lower.binary = True      # its number operands become constants (prepare_constants)
    lower.fn_name = fn_name
    return lower


def _no_int_div(node):
    if node.target in (aten.div.Tensor, aten.div.Scalar, aten.div_.Tensor, aten.div_.Scalar) and \
            not node.meta["val"].dtype.is_floating_point:
        return "integer division"
    return None


for _op, _fn in [(aten.add, "lz_add"), (aten.sub, "lz_sub"), (aten.mul, "lz_mul"),
                 (aten.div, "lz_div"), (aten.maximum, "lz_maximum"), (aten.minimum, "lz_minimum"),
                 (aten.gt, "lz_gt"), (aten.lt, "lz_lt"), (aten.ge, "lz_ge"), (aten.le, "lz_le"),
                 (aten.eq, "lz_eq"), (aten.ne, "lz_ne")]:
    for _ov in ("Tensor", "Scalar", "default"):
        if hasattr(_op, _ov):
            _register(getattr(_op, _ov), _binary(_fn), check=_no_int_div)
for _inplace in ("add_", "sub_", "mul_", "div_"):
    for _ov in ("Tensor", "Scalar"):
        _packet = getattr(aten, _inplace)
        if hasattr(_packet, _ov):
            _register(getattr(_packet, _ov), _binary("lz_" + _inplace[:-1]), check=_no_int_div)


def _unary_f32(fn):
    def lower(cx, node, x):
        return cx.op(fn, _as(cx, x, F32))
    return lower


for _op, _fn in [(aten.exp, "lz_exp"), (aten.log, "lz_log"),
                 (aten.sqrt, "lz_sqrt"), (aten.rsqrt, "lz_rsqrt"), (aten.tanh, "lz_tanh"),
                 (aten.sigmoid, "lz_sigmoid"), (aten.relu, "lz_relu"), (aten.relu_, "lz_relu"),
                 (aten.silu, "lz_silu"), (aten.silu_, "lz_silu"), (aten.sin, "lz_sin"),
                 (aten.cos, "lz_cos")]:
    _register(_op.default, _unary_f32(_fn))


@lowers(aten.neg.default, args=ALL)
def _neg(cx, node, x):
    if _is_bool(node):
        raise Unsupported("aten.neg on a bool tensor")
    return cx.op("lz_neg", x)


@lowers(aten.rsub.Scalar, aten.rsub.Tensor, args=ALL)
def _rsub(cx, node, a, b, alpha=1):
    dt = _dtype_of(node.meta["val"].dtype)
    a, b = _as(cx, a, dt), _as(cx, b, dt)
    if alpha != 1:
        a = cx.op("lz_mul", a, _as(cx, alpha, dt))
    return cx.op("lz_sub", b, a)


@lowers(aten.gelu.default, aten.gelu_.default, args=ALL)
def _gelu(cx, node, x, approximate="none"):
    if approximate == "none":
        return cx.op("lz_gelu", x)
    # tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    s = cx.consts.scalar
    inner = cx.op("lz_mul", s(math.sqrt(2 / math.pi)),
                  cx.op("lz_add", x, cx.op("lz_mul", s(0.044715), cx.op("lz_pow", x, ctypes.c_float(3.0)))))
    return cx.op("lz_mul", cx.op("lz_mul", s(0.5), x), cx.op("lz_add", s(1.0), cx.op("lz_tanh", inner)))


@lowers(aten.hardtanh.default, aten.hardtanh_.default, args=ALL)
def _hardtanh(cx, node, x, lo=-1.0, hi=1.0):
    return cx.op("lz_hardtanh", x, ctypes.c_float(lo), ctypes.c_float(hi))


def _clamp_value(cx, x, lo, hi):
    """torch.clamp: x where lo <= x <= hi (NaN passes), the bound outside;
    the gradient reaches x exactly where it is kept, as torch's does."""
    dt = _lz_dtype(x)
    y = x
    if lo is not None:
        lo_h = _as(cx, lo, dt)
        y = cx.op("lz_where", cx.op("lz_lt", y, lo_h), lo_h, y)
    if hi is not None:
        hi_h = _as(cx, hi, dt)
        y = cx.op("lz_where", cx.op("lz_gt", y, hi_h), hi_h, y)
    return y


@lowers(aten.clamp_min.default, aten.clamp_min_.default, aten.clamp_max.default, aten.clamp_max_.default,
        aten.clamp.default, aten.clamp_.default, aten.clamp.Tensor, aten.clamp_min.Tensor,
        aten.clamp_max.Tensor, args=ALL)
def _clamp(cx, node, x, *bounds):
    name = node.target.name()
    if "clamp_min" in name:
        lo, hi = bounds[0], None
    elif "clamp_max" in name:
        lo, hi = None, bounds[0]
    else:
        lo, hi = (list(bounds) + [None, None])[:2]
    return _clamp_value(cx, x, lo, hi)


@lowers(aten.abs.default, args=ALL)
def _abs(cx, node, x):
    return cx.op("lz_maximum", x, cx.op("lz_neg", x))


@lowers(aten.threshold_backward.default, args=ALL)
def _threshold_backward(cx, node, grad, x, threshold):
    # relu's backward (aot_autograd's backward graphs): grad where x > threshold, else 0
    return cx.op("lz_where", cx.op("lz_le", x, cx.consts.scalar(threshold)), cx.consts.scalar(0.0), grad)


@lowers(aten.pow.Tensor_Scalar, args=ALL)
def _pow(cx, node, x, e):
    if not node.meta["val"].dtype.is_floating_point:
        raise Unsupported("aten.pow on integers")
    return cx.op("lz_pow", _as(cx, x, F32), ctypes.c_float(e))


@lowers(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar, args=ALL)
def _where(cx, node, c, a, b):
    dt = _dtype_of(node.meta["val"].dtype)
    return cx.op("lz_where", c, _as(cx, a, dt), _as(cx, b, dt))


@lowers(aten.masked_fill.Scalar, aten.masked_fill_.Scalar, aten.masked_fill.Tensor,
        aten.masked_fill_.Tensor, args=ALL)
def _masked_fill(cx, node, x, mask, v):
    return cx.op("lz_where", mask, _as(cx, v, _lz_dtype(x)), x)


# ---- logical ops: bool tensors are f32 masks of 0 and 1 ----------------------

def _mask_of(cx, node_arg, h):
    """h as a 0/1 mask: itself when its node is bool, else h != 0."""
    if _is_bool(node_arg):
        return h
    return cx.op("lz_ne", h, _as(cx, 0, _lz_dtype(h)))


def _logical(kind):
    def lower(cx, node, a, b=None):
        if kind != "not" and not all(_is_bool(n) for n in node.args[:2]) and \
                node.target.name().startswith("aten::bitwise"):
            raise Unsupported("%s on integers (bitwise)" % _name(node.target))
        ma = _mask_of(cx, node.args[0], a)
        if kind == "not":
            if not _is_bool(node.args[0]) and node.target.name().startswith("aten::bitwise"):
                raise Unsupported("%s on integers (bitwise)" % _name(node.target))
            return cx.op("lz_eq", ma, cx.consts.scalar(0.0))
        mb = _mask_of(cx, node.args[1], b) if isinstance(b, Handle) else \
            Handle(cx.consts.scalar(1.0 if b else 0.0))
        if kind == "and":
            return cx.op("lz_mul", ma, mb)
        if kind == "or":
            return cx.op("lz_maximum", ma, mb)
        return cx.op("lz_ne", ma, mb)
    return lower


for _names, _kind in [(("logical_and", "bitwise_and"), "and"), (("logical_or", "bitwise_or"), "or"),
                      (("logical_xor", "bitwise_xor"), "xor"), (("logical_not", "bitwise_not"), "not")]:
    for _n in _names:
        for _nm in (_n, _n + "_"):
            _packet = getattr(aten, _nm, None)
            for _ov in ("default", "Tensor", "Scalar"):
                if _packet is not None and hasattr(_packet, _ov):
                    _register(getattr(_packet, _ov), _logical(_kind))


# ---- views and shapes -------------------------------------------------------

_SAME_SHAPE_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)

def _reshape_to(cx, node, x):
    shape = _shape(node)
    return cx.op("lz_reshape", x, len(shape), shape_arg(shape))


for _op in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
            aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
            aten.flatten.using_ints, aten.alias.default, aten.clone.default,
            aten.contiguous.default, aten.lift_fresh_copy.default):
    # the shape comes from the node; memory_format is layout only
    _register(_op, lambda cx, node, x, *a, **k: _reshape_to(cx, node, x))


def _view_or_elided(cx, node, x, *a, **k):
    if isinstance(node.args[0], torch.fx.Node) and node.args[0] in cx.elided:
        cx.elided[node] = cx.elided[node.args[0]]   # a view of an elided expand (_expand)
        return x
    return _reshape_to(cx, node, x)


for _op in _SAME_SHAPE_VIEWS:
    _register(_op, _view_or_elided)


@lowers(aten.detach.default, args=ALL)
def _detach(cx, node, x):
    lib.lz_no_grad_begin()
    try:
        return _reshape_to(cx, node, x)
    finally:
        lib.lz_no_grad_end()


@lowers(aten._to_copy.default, args=("self", "dtype", "layout", "device", "pin_memory", "non_blocking",
                                     "memory_format"), check=lambda n: _cpu_only(n))
def _to_copy(cx, node, x, dtype=None, **kw):
    want = _dtype_of(node.meta["val"].dtype)
    if want is None:
        raise Unsupported("aten._to_copy to %s" % node.meta["val"].dtype)
    if lib.lz_tensor_dtype(x) == want:
        return _reshape_to(cx, node, x)
    return cx.op("lz_cast", x, want)


@lowers(aten.t.default, args=ALL)
def _t(cx, node, x):
    if lib.lz_ndim(x) < 2:
        return _reshape_to(cx, node, x)
    return cx.op("lz_transpose", x, 0, 1)


@lowers(aten.transpose.int, args=ALL)
def _transpose(cx, node, x, a, b):
    return cx.op("lz_transpose", x, a, b)


@lowers(aten.permute.default, args=ALL)
def _permute(cx, node, x, perm):
    n = lib.lz_ndim(x)
    return cx.op("lz_permute", x, int_arg([p % n for p in perm]))


@lowers(aten.expand.default, args=ALL)
def _expand(cx, node, x, size, implicit=False):
    matrix = _broadcast_matrix_shape(node)
    if matrix is not None and _only_bmm_weight(node):
        cx.elided[node] = matrix   # its bmm reads the matrix itself (_mm)
        return x
    shape = _shape(node)
    return cx.op("lz_expand", x, len(shape), shape_arg(shape))


@lowers(aten.select.int, args=ALL)
def _select(cx, node, x, dim, index):
    n = lib.lz_dim(x, dim)
    index = index % n
    s = cx.op("lz_slice", x, dim, index, index + 1)
    return _reshape_to(cx, node, s)


@lowers(aten.cat.default, args=ALL)
def _cat(cx, node, xs, dim=0):
    # torch skips 1-d empty operands (a cache's empty start, HF's
    # DynamicCache): so does the lowering
    nd = len(_shape(node))
    xs = [x for x, n in zip(xs, node.args[0]) if not (len(_val(n).shape) == 1 and _val(n).numel() == 0
                                                       and nd != 1)]
    if len(xs) == 1:
        return _reshape_to(cx, node, xs[0])
    arr = (ctypes.c_void_p * len(xs))(*xs)
    return cx.op("lz_cat", arr, len(xs), dim % nd)


@lowers(aten.split.Tensor, aten.split_with_sizes.default, args=ALL)
def _split(cx, node, x, sizes, dim=0):
    n = lib.lz_dim(x, dim)
    if isinstance(sizes, int):
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
    out, start = [], 0
    for s in sizes:
        out.append(cx.op("lz_slice", x, dim, start, start + s))
        start += s
    return out


@lowers(aten.unbind.int, args=ALL)
def _unbind(cx, node, x, dim=0):
    outs = []
    for i, v in enumerate(node.meta["val"]):
        s = cx.op("lz_slice", x, dim, i, i + 1)
        shape = tuple(int(d) for d in v.shape)
        outs.append(cx.op("lz_reshape", s, len(shape), shape_arg(shape)))
    return outs


# ---- reductions -------------------------------------------------------------

def _axes_call(fn):
    def lower(cx, node, x, dims=None, keepdim=False, dtype=None):
        if not dims:
            if keepdim:
                raise Unsupported("%s over every axis with keepdim" % _name(node.target))
            return cx.op(fn.replace("_axes", ""), x)
        nd = lib.lz_ndim(x)
        dims = sorted(d % nd for d in dims)
        return cx.op(fn, x, len(dims), int_arg(dims), 1 if keepdim else 0)
    return lower


def _reduce_input(cx, node, x):
    """x in the dtype the reduction computes in: torch sums bool and int32
    to int64 (bool masks are f32 here, counted exactly below 2^24 each),
    and dtype= says the rest."""
    want = _dtype_of(node.meta["val"].dtype)
    if _is_bool(node.args[0]):
        return x
    return _as(cx, x, want) if want is not None else x


def _reduced(cx, node, y):
    want = _dtype_of(node.meta["val"].dtype)
    return _as(cx, y, want) if want is not None and _lz_dtype(y) != want else y


def _sum_mean(fn):
    inner = _axes_call(fn)

    def lower(cx, node, x, dims=None, keepdim=False, dtype=None):
        if "mean" in fn and not node.meta["val"].dtype.is_floating_point:
            raise Unsupported("mean of integers")
        return _reduced(cx, node, inner(cx, node, _reduce_input(cx, node, x), dims, keepdim))
    return lower


_register(aten.sum.dim_IntList, _sum_mean("lz_sum_axes"))
_register(aten.mean.dim, _sum_mean("lz_mean_axes"))
_register(aten.amax.default, lambda cx, node, x, dims=(), keepdim=False:
          cx.op("lz_max_axes", x, len(dims), int_arg(sorted(d % lib.lz_ndim(x) for d in dims)), int(keepdim))
          if dims else cx.op("lz_max_axes", x, 0, int_arg([]), int(keepdim)))
_register(aten.sum.default, lambda cx, node, x, dtype=None:
          _reduced(cx, node, cx.op("lz_sum", _reduce_input(cx, node, x))))
_register(aten.mean.default, lambda cx, node, x, dtype=None:
          _reduced(cx, node, cx.op("lz_mean", _reduce_input(cx, node, x))))



@lowers(aten.linalg_vector_norm.default, args=ALL)
def _vector_norm(cx, node, x, ord=2, dims=None, keepdim=False, dtype=None):
    """F.normalize's and swin v2's cosine attention's norm. ord 2 as
    where(s > 0, sqrt(where(s > 0, s, 1)), 0) of s = sum(x^2): torch's
    value, and its gradient at a zero vector (0, where sqrt's would be
    NaN); ord 1 and inf through abs."""
    if not node.meta["val"].dtype.is_floating_point or (dtype is not None and dtype != torch.float32):
        raise Unsupported("linalg_vector_norm other than float32")
    nd = lib.lz_ndim(x)
    dims = sorted(d % nd for d in dims) if dims else list(range(nd))

    def reduce(fn, y):
        if fn == "lz_sum_axes" and not keepdim and len(dims) == nd:
            return cx.op("lz_sum", y)
        return cx.op(fn, y, len(dims), int_arg(dims), 1 if keepdim else 0)
    if ord in (1, float("inf")):
        a = cx.op("lz_maximum", x, cx.op("lz_neg", x))
        return reduce("lz_sum_axes" if ord == 1 else "lz_max_axes", a)
    if ord != 2:
        raise Unsupported("linalg_vector_norm with ord=%r (1, 2 and inf are lowered)" % (ord,))
    sq = reduce("lz_sum_axes", cx.op("lz_mul", x, x))
    pos = cx.op("lz_gt", sq, cx.consts.scalar(0.0))
    safe = cx.op("lz_where", pos, sq, cx.consts.scalar(1.0))
    return cx.op("lz_where", pos, cx.op("lz_sqrt", safe), cx.consts.scalar(0.0))


# ---- linear algebra ---------------------------------------------------------

def _transposed_weight(cx, arg_node):
    """The weight W when arg_node is W.t() (nn.Linear's trace), else None."""
    if isinstance(arg_node, torch.fx.Node) and arg_node.target in (aten.t.default,) \
            and len(arg_node.meta["val"].shape) == 2:
        return cx.env[arg_node.args[0]]
    if isinstance(arg_node, torch.fx.Node) and arg_node.target == aten.permute.default \
            and list(arg_node.args[1]) == [1, 0]:
        return cx.env[arg_node.args[0]]
    return None


@lowers(aten.addmm.default, args=ALL)
def _addmm(cx, node, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        mm = cx.op("lz_matmul", a, b)
        if alpha != 1:
            mm = cx.op("lz_mul", mm, cx.consts.scalar(alpha))
        if beta == 0:
            return mm
        return cx.op("lz_add", mm, cx.op("lz_mul", bias, cx.consts.scalar(beta)) if beta != 1 else bias)
    w = _transposed_weight(cx, node.args[2])
    if w is not None and lib.lz_ndim(bias) == 1:
        return cx.op("lz_linear", a, w, bias)
    return cx.op("lz_add", cx.op("lz_matmul", a, b), bias)


def _only_bmm_weight(node):
    """node (an expand, or a view of one to its own shape) is read only as
    bmm's second operand, directly or through such views."""
    return bool(node.users) and all(
        (u.target == aten.bmm.default and u.args[1] is node and u.args[0] is not node)
        or (u.target in _SAME_SHAPE_VIEWS and _shape(u) == _shape(node) and _only_bmm_weight(u))
        for u in node.users)


def _broadcast_matrix_shape(node):
    """M's 2-d shape when node expands a matrix M (or M as [1, K, N]) over
    a batch, else None. torch's matmul of a [B, M, K] input that is not
    contiguous (nn.MultiheadAttention's sequence-first projections)
    decomposes to bmm(x, W.expand(B, K, N)): B copies of the weight, and a
    gradient of B products summed."""
    src = node.args[0]
    if not isinstance(src, torch.fx.Node) or "val" not in src.meta:
        return None
    shape = [int(d) for d in src.meta["val"].shape]
    if len(shape) == 3 and shape[0] == 1:
        shape = shape[1:]
    return shape if len(shape) == 2 and len(_shape(node)) == 3 else None


@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default, args=ALL)
def _mm(cx, node, a, b):
    if node.target == aten.bmm.default and node.args[1] in cx.elided:
        # one [B*M, K] x [K, N] product: the weight read once, its gradient
        # one product (b is the matrix itself: _expand elided the copies)
        bsz, rows, k = (int(d) for d in node.args[0].meta["val"].shape)
        m = cx.op("lz_reshape", b, 2, shape_arg(cx.elided[node.args[1]]))
        flat = cx.op("lz_matmul", cx.op("lz_reshape", a, 2, shape_arg([bsz * rows, k])), m)
        return cx.op("lz_reshape", flat, 3, shape_arg(_shape(node)))
    w = _transposed_weight(cx, node.args[1])
    if w is not None and node.target == aten.mm.default:
        return cx.op("lz_linear", a, w, None)
    return cx.op("lz_matmul", a, b)


@lowers(aten.linear.default, args=ALL)
def _linear(cx, node, x, w, b=None):
    return cx.op("lz_linear", x, w, b)


# ---- neural-network ops -----------------------------------------------------

def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


def _conv_check(n):
    if len(_val(n).shape) != 4:
        return "only 2-d convolutions"
    if _bound_value(n, "transposed") and any(
            p >= s for p, s in zip(_pair(_bound_value(n, "output_padding")), _pair(_bound_value(n, "stride")))):
        return "a transposed convolution's output padding at or above its stride (torch allows it below the dilation)"
    return None


@lowers(aten.convolution.default, args=("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                                        "output_padding", "groups"), check=_conv_check)
def _conv(cx, node, x, w, b, stride, padding, dilation, transposed, output_padding, groups):

    if lib.lz_ndim(x) != 4:
        raise Unsupported("aten.convolution (only 2-d)")   # arg_problems says so first
    o = Conv2dOpts()
    o.stride[:] = _pair(stride)
    o.padding[:] = _pair(padding)
    o.dilation[:] = _pair(dilation)
    o.groups = groups
    if transposed:
        return cx.op("lz_conv_transpose2d", x, w, b, o, int_arg(_pair(output_padding)))
    return cx.op("lz_conv2d", x, w, b, o)


def _pool_opts(kernel, stride, padding, ceil_mode, count_include_pad=True):
    o = Pool2dOpts()
    o.kernel[:] = _pair(kernel)
    o.stride[:] = _pair(stride) if stride else _pair(kernel)
    o.padding[:] = _pair(padding)
    o.ceil_mode = int(bool(ceil_mode))
    o.count_include_pad = int(bool(count_include_pad))
    return o


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool2d.default,
        args=("self", "kernel_size", "stride", "padding", "ceil_mode"),
        check=lambda n: None if _pair(_bound_value(n, "dilation")) == [1, 1] else "dilation is not supported")
def _max_pool(cx, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if _pair(dilation) != [1, 1]:
        raise Unsupported("%s with dilation" % _name(node.target))
    y = cx.op("lz_max_pool2d", x, _pool_opts(kernel, stride, padding, ceil_mode))
    return (y, None) if node.target == aten.max_pool2d_with_indices.default else y


@lowers(aten.avg_pool2d.default, args=("self", "kernel_size", "stride", "padding", "ceil_mode",
                                      "count_include_pad"))
def _avg_pool(cx, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    if divisor_override is not None:
        raise Unsupported("aten.avg_pool2d with divisor_override")
    return cx.op("lz_avg_pool2d", x, _pool_opts(kernel, stride, padding, ceil_mode, count_include_pad))


@lowers(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default, args=ALL)
def _adaptive(cx, node, x, size):
    h, w = _pair(size)
    return cx.op("lz_adaptive_avg_pool2d", x, h, w)


@lowers(aten._softmax.default, aten.softmax.int, args=("self", "dim"))
def _softmax(cx, node, x, dim, half=False):
    return cx.op("lz_softmax", x, dim % lib.lz_ndim(x))


@lowers(aten._log_softmax.default, aten.log_softmax.int, args=("self", "dim"))
def _log_softmax(cx, node, x, dim, half=False):
    return cx.op("lz_log_softmax", x, dim % lib.lz_ndim(x))


def _batch_norm(cx, node, x, w, b, rm, rv, training, momentum, eps):
    if training and rm is not None and node.args[3].op != "placeholder":
        raise Unsupported("batch norm whose running statistics are not the module's buffers")
    y = cx.op("lz_batch_norm", x, w, b, rm, rv, int(bool(training)), ctypes.c_float(momentum),
              ctypes.c_float(eps))
    return y


@lowers(aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
        aten._native_batch_norm_legit_functional.default, args=ALL)
def _native_bn(cx, node, x, w, b, rm, rv, training, momentum, eps):
    y = _batch_norm(cx, node, x, w, b, rm, rv, training, momentum, eps)
    if node.target == aten._native_batch_norm_legit_functional.default:
        return (y, None, None, rm, rv)      # the buffers themselves hold the new statistics
    return (y, None, None)


@lowers(aten._native_batch_norm_legit_no_training.default, args=ALL)
def _bn_eval(cx, node, x, w, b, rm, rv, momentum, eps):
    return (cx.op("lz_batch_norm", x, w, b, rm, rv, 0, ctypes.c_float(momentum), ctypes.c_float(eps)),
            None, None)


@lowers(aten._native_batch_norm_legit.no_stats, args=ALL)
def _bn_nostats(cx, node, x, w, b, training, momentum, eps):
    return (cx.op("lz_batch_norm", x, w, b, None, None, int(bool(training)), ctypes.c_float(momentum),
                  ctypes.c_float(eps)), None, None)


@lowers(aten.native_layer_norm.default, args=ALL)
def _layer_norm(cx, node, x, shape, w, b, eps):
    return (cx.op("lz_layer_norm", x, len(shape), w, b, ctypes.c_float(eps)), None, None)


@lowers(aten.embedding.default, args=("weight", "indices", "padding_idx", "sparse"))
def _embedding(cx, node, w, idx, padding_idx=-1, scale_grad=False, sparse=False):
    y = cx.op("lz_embedding", w, idx)
    if padding_idx is not None and padding_idx >= 0:
        # torch reads the padding row like any other and gives it no
        # gradient: the rows picked by padding_idx come from a detached
        # lookup, the others from the tracked one (same values either way)
        lib.lz_no_grad_begin()
        try:
            frozen = cx.op("lz_embedding", w, idx)
        finally:
            lib.lz_no_grad_end()
        shape = list(_shape(node))
        pad = cx.op("lz_eq", idx, _as(cx, padding_idx, _lz_dtype(idx)))
        pad = cx.op("lz_reshape", pad, len(shape), shape_arg(shape[:-1] + [1]))
        y = cx.op("lz_where", pad, frozen, y)
    return y


@lowers(aten.native_dropout.default, args=ALL)
def _dropout(cx, node, x, p, train):
    if not train or p == 0:
        return (x, None)
    return (cx.op("lz_dropout", x, ctypes.c_float(p), 1), None)


def _log_softmax_source(node):
    """The logits x when node (nll_loss's input) is log_softmax(x, 1) of
    [N, C] (F.cross_entropy's trace), else None."""
    src = node.args[0]
    if isinstance(src, torch.fx.Node) and src.target in (aten._log_softmax.default, aten.log_softmax.int) \
            and len(src.meta["val"].shape) == 2 and src.args[1] in (1, -1):
        return src.args[0]
    return None


def _nll_check(node):
    if len(_val(node.args[0]).shape) != 2:
        return "only [N, C] inputs (not [N, C, d...])"
    return None


@lowers(aten.nll_loss_forward.default, args=ALL, check=_nll_check)
def _nll(cx, node, logp, target, weight=None, reduction=1, ignore_index=-100):
    src = _log_softmax_source(node)
    if src is not None:
        # F.cross_entropy: one fused op from the logits
        o = CrossEntropyOpts(weight=weight, ignore_index=int(ignore_index), use_ignore_index=1,
                             label_smoothing=0.0, reduction={0: 2, 1: 0, 2: 1}[int(reduction)])
        return (cx.op("lz_cross_entropy_ex", cx.env[src], target, ctypes.byref(o)), None)
    # nll_loss of any log-probabilities: -logp[i, t_i] * w[t_i], rows whose
    # target is ignore_index left out (and of the mean's denominator)
    n = lib.lz_dim(logp, 0)
    dt = _lz_dtype(target)
    valid = cx.op("lz_ne", target, _as(cx, ignore_index, dt))
    safe = cx.op("lz_where", valid, target, _as(cx, 0, dt))
    picked = cx.op("lz_gather", logp, 1, cx.op("lz_reshape", safe, 2, shape_arg([n, 1])))
    picked = cx.op("lz_reshape", picked, 1, shape_arg([n]))
    wt = valid if weight is None else cx.op("lz_mul", cx.op("lz_index_select", weight, 0, safe), valid)
    rows = cx.op("lz_neg", cx.op("lz_mul", picked, wt))
    if reduction == 0:
        return (rows, None)
    total = cx.op("lz_sum", rows)
    if reduction == 2:
        return (total, None)
    return (cx.op("lz_div", total, cx.op("lz_sum", wt)), None)


@lowers(aten.mse_loss.default, args=ALL)
def _mse(cx, node, a, b, reduction=1):
    d = cx.op("lz_sub", a, b)
    sq = cx.op("lz_mul", d, d)
    if reduction == 1:
        return cx.op("lz_mean", sq)
    if reduction == 2:
        return cx.op("lz_sum", sq)
    return sq


def _attention(cx, node, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa=False):
    mask_node = _bound_value(node, "attn_mask")
    if mask is not None and _is_bool(mask_node):
        # a bool mask keeps where True: additive 0 there, -inf elsewhere
        mask = cx.op("lz_where", mask, cx.consts.scalar(0.0), cx.consts.scalar(float("-inf")))
    o = AttentionOpts(mask=mask, scale=float(scale or 0.0), causal=int(bool(is_causal)),
                      dropout_p=float(dropout_p or 0.0), enable_gqa=int(bool(enable_gqa)))
    return cx.op("lz_attention_ex", q, k, v, ctypes.byref(o))


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default, args=ALL)
def _sdpa_cpu(cx, node, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    return (_attention(cx, node, q, k, v, attn_mask, dropout_p, is_causal, scale), None)


@lowers(aten.scaled_dot_product_attention.default, args=ALL)
def _sdpa(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _attention(cx, node, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@lowers(aten._scaled_dot_product_attention_math.default,
        args=("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"))
def _sdpa_math(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None,
               scale=None, enable_gqa=False):
    return (_attention(cx, node, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa), None)


@lowers(aten.gather.default, args=("self", "dim", "index"))
def _gather(cx, node, x, dim, idx, sparse_grad=False):
    return cx.op("lz_gather", x, dim % max(1, lib.lz_ndim(x)), idx)


# ---- more views, scatters and padding (functionalised traces) ---------------

@lowers(aten.copy.default, args=ALL)
def _copy(cx, node, dst, src, non_blocking=False):
    # functional copy: src's values in dst's shape and dtype
    shape = _shape(node)
    dt = _dtype_of(node.meta["val"].dtype)
    src = _as(cx, src, dt)
    if tuple(lib.lz_dim(src, d) for d in range(lib.lz_ndim(src))) != shape:
        src = cx.op("lz_expand", src, len(shape), shape_arg(shape))
    return cx.op("lz_cast", src, dt)


@lowers(aten.tril.default, aten.triu.default, aten.tril_.default, aten.triu_.default, args=ALL)
def _tri(cx, node, x, diagonal=0):
    upper = "triu" in node.target.name()
    return cx.op("lz_tri_mask", x, int(diagonal), int(upper), ctypes.c_float(0.0))


@lowers(aten._safe_softmax.default, args=("self", "dim"),
        check=lambda n: None if _bound_value(n, "dtype") in (None, torch.float32) else "dtype")
def _safe_softmax(cx, node, x, dim, dtype=None):
    # softmax, but a row of -inf gives 0 instead of NaN (sdpa's masked rows)
    nd = lib.lz_ndim(x)
    dim = dim % nd
    y = cx.op("lz_softmax", x, dim)
    m = cx.op("lz_max_axes", x, 1, int_arg([dim]), 1)
    dead = cx.op("lz_eq", m, cx.consts.scalar(float("-inf")))
    return cx.op("lz_where", dead, cx.consts.scalar(0.0), y)


@lowers(aten.bernoulli.p, args=("self", "p"))
def _bernoulli(cx, node, x, p=0.5, generator=None):
    # drawn from lazyc's generator in the graph (like dropout: the draws
    # differ from torch's, their distribution does not)
    shape = _shape(node)
    u = cx.op("lz_rand", len(shape), shape_arg(shape))
    return _as(cx, cx.op("lz_lt", u, cx.consts.scalar(float(p))), _dtype_of(node.meta["val"].dtype))


def _fill_value(node):
    t = node.target
    if t in (aten.new_zeros.default, aten.empty.memory_format, aten.empty_like.default,
             aten.new_empty.default, aten.empty_strided.default, aten.new_empty_strided.default):
        return 0
    if t == aten.new_ones.default:
        return 1
    if t == aten.new_full.default:
        return node.args[2]
    if t == aten.fill.Scalar:
        return node.args[1]
    if t == aten.zero.default:   # x.zero_(), functionalised
        return 0
    return None


@lowers(aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
        aten.empty.memory_format, aten.empty_like.default, aten.empty_strided.default,
        aten.new_empty_strided.default, aten.fill.Scalar, aten.zero.default, args=ALL, check=_cpu_only)
def _filled(cx, node, *args, **kwargs):
    # a tensor of one value (empty ones read as 0: nothing may read them
    # before writing): torch makes it once, lazyc binds it as data
    val = node.meta["val"]
    return Handle(cx.consts.tensor(node, torch.full(tuple(val.shape), _fill_value(node), dtype=val.dtype)))


@lowers(aten.fill.Tensor, args=ALL)
def _fill_tensor(cx, node, x, v):
    shape = _shape(node)
    v = _as(cx, v, _dtype_of(node.meta["val"].dtype))
    return cx.op("lz_cast", cx.op("lz_expand", cx.op("lz_reshape", v, 0, shape_arg([])), len(shape),
                                  shape_arg(shape)), _lz_dtype(v))


def _block(cx, node, like_shape, dim, size, value):
    shape = list(like_shape)
    shape[dim] = size
    dt = node.meta["val"].dtype
    return Handle(cx.consts.tensor(("pad", tuple(shape), float(value), dt),
                                   torch.full(shape, value, dtype=dt)))


@lowers(aten.constant_pad_nd.default, args=ALL)
def _pad(cx, node, x, pad, value=0):
    shape = list(_val(node.args[0]).shape)
    nd = len(shape)
    y = x
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo < 0 or hi < 0:
            y = cx.op("lz_slice", y, d, max(0, -lo), shape[d] - max(0, -hi))
            shape[d] -= max(0, -lo) + max(0, -hi)
            lo, hi = max(0, lo), max(0, hi)
        parts = []
        if lo:
            parts.append(_block(cx, node, shape, d, lo, value))
        parts.append(y)
        if hi:
            parts.append(_block(cx, node, shape, d, hi, value))
        if len(parts) > 1:
            y = cx.op("lz_cat", (ctypes.c_void_p * len(parts))(*parts), len(parts), d)
        shape[d] += lo + hi
    return y if y is not x else _reshape_to(cx, node, x)


@lowers(aten.roll.default, args=ALL)
def _roll(cx, node, x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = list(dims) if dims else []
    y = x
    if not dims:
        n = lib.lz_numel(x)
        y = cx.op("lz_reshape", x, 1, shape_arg([n]))
        dims = [0]
    for s, d in zip(shifts, dims):
        d = d % lib.lz_ndim(y)
        n = lib.lz_dim(y, d)
        s = s % n if n else 0
        if s:
            parts = [cx.op("lz_slice", y, d, n - s, n), cx.op("lz_slice", y, d, 0, n - s)]
            y = cx.op("lz_cat", (ctypes.c_void_p * 2)(*parts), 2, d)
    return _reshape_to(cx, node, y)


def _index_const(cx, key, values):
    return Handle(cx.consts.tensor(key, torch.as_tensor(values, dtype=torch.int64)))


def _strided_slice(cx, node, x, dim, start, end, step):
    idx = list(range(start, end, step))
    return cx.op("lz_index_select", x, dim, _index_const(cx, ("slice", start, end, step), idx))


@lowers(aten.slice.Tensor, args=ALL)
def _slice(cx, node, x, dim=0, start=None, end=None, step=1):
    n = lib.lz_dim(x, dim)
    dim = dim % lib.lz_ndim(x)
    start = 0 if start is None else max(-n, min(start, n))
    end = n if end is None else max(-n, min(end, n))
    start, end = start % n if start < 0 else start, end % n if end < 0 else end
    if step != 1:
        return _strided_slice(cx, node, x, dim, start, max(start, end), step)
    if start == 0 and end >= n:
        return _reshape_to(cx, node, x)
    return cx.op("lz_slice", x, dim, start, end)


@lowers(aten.slice_scatter.default, args=ALL)
def _slice_scatter(cx, node, base, src, dim=0, start=None, end=None, step=1):
    shape = list(_val(node.args[0]).shape)
    dim = dim % len(shape)
    n = shape[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    dt = _lz_dtype(base)
    src = _as(cx, src, dt)
    if step == 1:
        parts = ([cx.op("lz_slice", base, dim, 0, start)] if start > 0 else []) + [src] + \
                ([cx.op("lz_slice", base, dim, end, n)] if end < n else [])
        if len(parts) == 1:
            return _reshape_to(cx, node, src)
        return cx.op("lz_cat", (ctypes.c_void_p * len(parts))(*parts), len(parts), dim)
    # every position reads base, or src where the strided slice writes it:
    # a gather from cat(base, src) along dim
    pos = list(range(n))
    for k, j in enumerate(range(start, end, step)):
        pos[j] = n + k
    both = cx.op("lz_cat", (ctypes.c_void_p * 2)(base, src), 2, dim)
    return cx.op("lz_index_select", both, dim, _index_const(cx, ("scatter", n, start, end, step), pos))


@lowers(aten.select_scatter.default, args=ALL)
def _select_scatter(cx, node, base, src, dim, index):
    shape = list(_val(node.args[0]).shape)
    dim = dim % len(shape)
    index = index % shape[dim]
    s = list(shape)
    s[dim] = 1
    src = cx.op("lz_reshape", _as(cx, src, _lz_dtype(base)), len(s), shape_arg(s))
    parts = ([cx.op("lz_slice", base, dim, 0, index)] if index > 0 else []) + [src] + \
            ([cx.op("lz_slice", base, dim, index + 1, shape[dim])] if index + 1 < shape[dim] else [])
    if len(parts) == 1:
        return _reshape_to(cx, node, src)
    return cx.op("lz_cat", (ctypes.c_void_p * len(parts))(*parts), len(parts), dim)


def _storage_map(t):
    """Per element of t (a real tensor's layout): its offset in storage."""
    base = torch.arange(t.storage_offset() + max(1, sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1))
    return torch.as_strided(base, t.shape, t.stride(), t.storage_offset()).reshape(-1)


def _as_strided_index(node):
    src = _val(node.args[0])
    size, stride = list(node.args[1]), list(node.args[2])
    offset = node.args[3] if len(node.args) > 3 and node.args[3] is not None else src.storage_offset()
    offs = _storage_map(src)
    inv = torch.full((int(offs.max()) + 1 if offs.numel() else 1,), -1, dtype=torch.int64)
    inv[offs] = torch.arange(offs.numel())
    need = max(1, offset + sum((s - 1) * st for s, st in zip(size, stride)) + 1)
    if need > inv.numel():
        return None
    want = torch.as_strided(torch.arange(need), size, stride, offset).reshape(-1)
    idx = inv[want]
    return None if (idx < 0).any() else idx


@lowers(aten.as_strided.default, aten.as_strided_.default, args=ALL,
        check=lambda n: None if _as_strided_index(n) is not None else
        "a view reaching memory outside its input")
def _as_strided(cx, node, x, size, stride, offset=None):
    # the elements the view reads, found through the input's real layout
    # (the trace ran on real tensors): a reshape when they are in order,
    # else an index_select of constant indices (its gradient scatters back)
    idx = _as_strided_index(node)
    if torch.equal(idx, torch.arange(idx.numel())) and idx.numel() == lib.lz_numel(x):
        return _reshape_to(cx, node, x)
    flat = cx.op("lz_reshape", x, 1, shape_arg([lib.lz_numel(x)]))
    y = cx.op("lz_index_select", flat, 0, Handle(cx.consts.tensor(("as_strided", node.name), idx)))
    return _reshape_to(cx, node, y)


@lowers(aten.index.Tensor, args=ALL,
        check=lambda n: _index_check(n))
def _index(cx, node, x, indices):
    xs = list(_val(node.args[0]).shape)
    pos = [i for i, t in enumerate(indices) if t is not None]
    first, last = pos[0], pos[-1]
    # adjacent index tensors: one flat index into the merged axes
    flat = None
    for d in pos:
        i = _as(cx, indices[d], I64)
        n = xs[d]
        i = cx.op("lz_where", cx.op("lz_lt", i, _as(cx, 0, I64)), cx.op("lz_add", i, _as(cx, n, I64)), i)
        if flat is None:
            flat = i
        else:
            flat = cx.op("lz_add", cx.op("lz_mul", flat, _as(cx, n, I64)), i)
    merged = xs[:first] + [math.prod(xs[first:last + 1])] + xs[last + 1:]
    xm = cx.op("lz_reshape", x, len(merged), shape_arg(merged))
    nflat = lib.lz_numel(flat)
    flat1 = cx.op("lz_reshape", flat, 1, shape_arg([nflat]))
    y = cx.op("lz_index_select", xm, first, flat1)
    return _reshape_to(cx, node, y)


def _index_check(node):
    idx = node.args[1]
    pos = [i for i, t in enumerate(idx) if t is not None]
    if not pos:
        return "no index tensor"
    if pos != list(range(pos[0], pos[-1] + 1)):
        return "index tensors on axes that are not adjacent"
    for i in pos:
        v = _val(idx[i])
        if v is None or v.dtype == torch.bool:
            return "a boolean mask index (its result's shape depends on the data)"
    return None


@lowers(aten.index_select.default, args=ALL)
def _index_select(cx, node, x, dim, idx):
    return cx.op("lz_index_select", x, dim % max(1, lib.lz_ndim(x)), _as(cx, idx, I64))


@lowers(aten.cumsum.default, args=("self", "dim", "dtype"))
def _cumsum(cx, node, x, dim, dtype=None):
    want = _dtype_of(node.meta["val"].dtype)
    return cx.op("lz_cumsum", _as(cx, x, want), dim % max(1, lib.lz_ndim(x)))


@lowers(aten.argmax.default, args=ALL)
def _argmax(cx, node, x, dim=None, keepdim=False):
    if dim is None:
        x = cx.op("lz_reshape", x, 1, shape_arg([lib.lz_numel(x)]))
        return _reshape_to(cx, node, cx.op("lz_argmax", x, 0, 0))
    return cx.op("lz_argmax", x, dim % lib.lz_ndim(x), int(bool(keepdim)))


@lowers(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims,
        args=ALL)
def _any_all(cx, node, x, dim=None, keepdim=False):
    m = _mask_of(cx, node.args[0], x)
    if "all" in node.target.name():
        m = cx.op("lz_eq", m, cx.consts.scalar(0.0))    # all(x) = not any(not x)
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if dims:
        y = cx.op("lz_max_axes", m, len(dims), int_arg(sorted(d % lib.lz_ndim(m) for d in dims)),
                  int(bool(keepdim)))
    else:
        y = cx.op("lz_max_axes", m, 0, int_arg([]), 0)
    if "all" in node.target.name():
        y = cx.op("lz_eq", y, cx.consts.scalar(0.0))
    return _reshape_to(cx, node, y)


@lowers(aten.logsumexp.default, args=ALL)
def _logsumexp(cx, node, x, dims, keepdim=False):
    nd = lib.lz_ndim(x)
    dims = sorted(d % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims]))
    lib.lz_no_grad_begin()     # the shift cancels in the value and in the gradient
    try:
        m = cx.op("lz_max_axes", x, len(dims), int_arg(dims), 1)
        m = cx.op("lz_where", cx.op("lz_eq", m, cx.consts.scalar(float("-inf"))), cx.consts.scalar(0.0), m)
    finally:
        lib.lz_no_grad_end()
    s = cx.op("lz_sum_axes", cx.op("lz_exp", cx.op("lz_sub", x, m)), len(dims), int_arg(dims), 1)
    y = cx.op("lz_add", cx.op("lz_log", s), m)
    return _reshape_to(cx, node, y)


@lowers(aten.sign.default, args=ALL)
def _sign(cx, node, x):
    dt = _lz_dtype(x)
    pos = _as(cx, cx.op("lz_gt", x, _as(cx, 0, dt)), dt)
    neg = _as(cx, cx.op("lz_lt", x, _as(cx, 0, dt)), dt)
    lib.lz_no_grad_begin()
    try:
        return cx.op("lz_sub", pos, neg)
    finally:
        lib.lz_no_grad_end()


@lowers(aten.reciprocal.default, args=ALL)
def _reciprocal(cx, node, x):
    return cx.op("lz_pow", _as(cx, x, F32), ctypes.c_float(-1.0))


@lowers(aten.hardsigmoid.default, aten.hardsigmoid_.default, args=ALL)
def _hardsigmoid(cx, node, x):
    # relu6(x + 3) / 6
    return cx.op("lz_mul", cx.op("lz_hardtanh", cx.op("lz_add", x, cx.consts.scalar(3.0)),
                                 ctypes.c_float(0.0), ctypes.c_float(6.0)), cx.consts.scalar(1.0 / 6.0))


@lowers(aten.hardswish.default, aten.hardswish_.default, args=ALL)
def _hardswish(cx, node, x):
    return cx.op("lz_mul", x, _hardsigmoid(cx, node, x))


@lowers(aten.binary_cross_entropy_with_logits.default, args=ALL)
def _bce_logits(cx, node, x, y, weight=None, pos_weight=None, reduction=1):
    # max(x, 0) - x y + log(1 + exp(-|x|)), torch's stable form; with
    # pos_weight p: (1 - y) x + (1 + (p - 1) y) (log(1 + exp(-|x|)) + max(-x, 0))
    s = cx.consts.scalar
    absx = cx.op("lz_maximum", x, cx.op("lz_neg", x))
    soft = cx.op("lz_log", cx.op("lz_add", s(1.0), cx.op("lz_exp", cx.op("lz_neg", absx))))
    if pos_weight is None:
        loss = cx.op("lz_add", cx.op("lz_sub", cx.op("lz_relu", x), cx.op("lz_mul", x, y)), soft)
    else:
        lw = cx.op("lz_add", s(1.0), cx.op("lz_mul", cx.op("lz_sub", pos_weight, s(1.0)), y))
        loss = cx.op("lz_add", cx.op("lz_mul", cx.op("lz_sub", s(1.0), y), x),
                     cx.op("lz_mul", lw, cx.op("lz_add", soft, cx.op("lz_relu", cx.op("lz_neg", x)))))
    if weight is not None:
        loss = cx.op("lz_mul", loss, weight)
    return _reduce(cx, loss, reduction)


def _reduce(cx, loss, reduction):
    if reduction == 1:
        return cx.op("lz_mean", loss)
    if reduction == 2:
        return cx.op("lz_sum", loss)
    return loss


@lowers(aten.l1_loss.default, args=ALL)
def _l1(cx, node, a, b, reduction=1):
    d = cx.op("lz_sub", a, b)
    return _reduce(cx, cx.op("lz_maximum", d, cx.op("lz_neg", d)), reduction)


@lowers(aten.smooth_l1_loss.default, args=ALL)
def _smooth_l1(cx, node, a, b, reduction=1, beta=1.0):
    s = cx.consts.scalar
    d = cx.op("lz_sub", a, b)
    ad = cx.op("lz_maximum", d, cx.op("lz_neg", d))
    if beta == 0:
        return _reduce(cx, ad, reduction)
    quad = cx.op("lz_mul", cx.op("lz_mul", d, d), s(0.5 / beta))
    lin = cx.op("lz_sub", ad, s(0.5 * beta))
    return _reduce(cx, cx.op("lz_where", cx.op("lz_lt", ad, s(float(beta))), quad, lin), reduction)


def _group_norm(cx, node, x, w, b, n, c, hw, groups, eps):
    shape = [lib.lz_dim(x, d) for d in range(lib.lz_ndim(x))]
    xg = cx.op("lz_reshape", x, 3, shape_arg([n, groups, -1]))
    y = cx.op("lz_layer_norm", xg, 1, None, None, ctypes.c_float(eps))
    y = cx.op("lz_reshape", y, len(shape), shape_arg(shape))
    cshape = [1, c] + [1] * (len(shape) - 2)
    if w is not None:
        y = cx.op("lz_mul", y, cx.op("lz_reshape", w, len(cshape), shape_arg(cshape)))
    if b is not None:
        y = cx.op("lz_add", y, cx.op("lz_reshape", b, len(cshape), shape_arg(cshape)))
    return y


@lowers(aten.native_group_norm.default, args=ALL)
def _native_group_norm(cx, node, x, w, b, n, c, hw, groups, eps):
    return (_group_norm(cx, node, x, w, b, n, c, hw, groups, eps), None, None)


@lowers(aten.one_hot.default, args=ALL)
def _one_hot(cx, node, idx, num_classes=-1):
    n = _shape(node)[-1]
    classes = Handle(cx.consts.tensor(("arange", n), torch.arange(n)))
    shape = list(_shape(node))
    i = cx.op("lz_reshape", _as(cx, idx, I64), len(shape), shape_arg(shape[:-1] + [1]))
    return _as(cx, cx.op("lz_eq", i, classes), I64)


def _sdpa_custom(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
    return _attention(cx, node, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


# ---- tensors made from nothing: constants ----------------------------------

FACTORIES = (aten.arange.default, aten.arange.start, aten.arange.start_step, aten.zeros.default,
             aten.ones.default, aten.full.default, aten.scalar_tensor.default, aten.zeros_like.default,
             aten.ones_like.default, aten.full_like.default)


def _is_fake(t):
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _factory_value(node):
    """The value of a factory node, computed by torch on the host, outside
    any fake mode (torch.compile traces under one): real data to copy."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return _factory_value_real(node)


def _factory_value_real(node):
    val = node.meta["val"]
    if node.target in (aten.zeros_like.default, aten.ones_like.default, aten.full_like.default):
        fill = {aten.zeros_like.default: 0, aten.ones_like.default: 1}.get(node.target)
        fill = node.args[1] if fill is None else fill
        return torch.full(tuple(val.shape), fill, dtype=val.dtype)
    kw = dict(node.kwargs, device="cpu")
    kw.pop("pin_memory", None)
    return node.target(*node.args, **kw)


def _factory(cx, node, *args, **kwargs):
    return Handle(cx.consts.tensor(node, _factory_value(node)))


for _op in FACTORIES:
    # torch computes the value itself (on the CPU): every argument applies
    _register(_op, _factory)


# ---- decompositions applied while tracing ----------------------------------

@torch.library.custom_op("lazyc::sdpa", mutates_args=())
def _sdpa_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
             dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
             enable_gqa: bool = False) -> torch.Tensor:
    """torch's scaled_dot_product_attention as one op of the trace (its
    decomposition with dropout is bernoulli on an empty tensor and
    _safe_softmax): lowered to lz_attention_ex."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa).clone()


@_sdpa_op.register_fake
def _(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


_register(torch.ops.lazyc.sdpa.default, _sdpa_custom)

_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


class TracingMode(torch.overrides.TorchFunctionMode):
    """Active while a step is traced: dropout is recorded as one
    native_dropout, lowered to lz_dropout (lazyc's generator: its masks
    differ from torch's, their distribution does not), instead of the
    bernoulli_ on an empty tensor that its decomposition traces."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.functional.dropout, torch.dropout):
            names = ("input", "p", "training", "inplace") if func is torch.nn.functional.dropout \
                else ("input", "p", "train")
            a = dict(zip(names, args), **kwargs)
            x, p, train = a["input"], a.get("p", 0.5), a.get("training", a.get("train", True))
            return aten.native_dropout(x, p, train)[0] if train and p > 0 else x
        if func is torch.nn.functional.scaled_dot_product_attention:
            a = dict(zip(_SDPA_ARGS, args), **kwargs)
            return torch.ops.lazyc.sdpa(a["query"], a["key"], a["value"], a.get("attn_mask"),
                                        float(a.get("dropout_p", 0.0)), bool(a.get("is_causal", False)),
                                        a.get("scale"), bool(a.get("enable_gqa", False)))
        return func(*args, **kwargs)


# ---- tracing -----------------------------------------------------------------

def trace(f, *args):
    """f traced into an aten graph: with the real arguments (the first
    call's batch), so Python in a forward that reads data (HF's checks on
    masks) runs on real values instead of stopping a fake-tensor trace, and
    functionalised, so in-place writes into views (a slice's copy_, fill_)
    become explicit scatters and buffer updates become copy_ into the
    graph's inputs at its end."""
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    g = functionalize(f, remove="mutations")
    try:
        # fake tensors first: nothing computed, and code that leaves torch
        # (numpy, a tensor's data pointer) fails here instead of baking the
        # first batch's values into the graph
        return make_fx(g, tracing_mode="fake", record_stack_traces=True)(*args)
    except Unsupported:
        raise
    except Exception as e:
        if not _data_dependent(e):
            raise Untraceable("lazyc.torch: the model could not be traced%s: %s: %s"
                              % (_where_in_model(e.__traceback__), type(e).__name__,
                                 str(e).split("\n")[0])) from e
    # Python that reads tensor values: trace with the real batch, so it runs
    # on real values; each read becomes a guard (guard.py)
    try:
        return make_fx(g, tracing_mode="real", record_stack_traces=True,
                       _error_on_data_dependent_ops=False)(*args)
    except Unsupported:
        raise
    except Exception as e:
        raise Untraceable("lazyc.torch: the model could not be traced%s: %s: %s"
                          % (_where_in_model(e.__traceback__), type(e).__name__,
                             str(e).split("\n")[0])) from e


def _data_dependent(e):
    """Whether tracing with fake tensors failed on data (Python reading
    values) or on fake tensors themselves (a model mixing in real tensors
    it made): the cases a trace with the real batch handles."""
    while e is not None:
        text = type(e).__name__ + " " + str(e)
        if "DataDependent" in text or "data-dependent" in text or "_local_scalar_dense" in text or \
                "convert all Tensors to FakeTensors" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


class Untraceable(Unsupported):
    """Model code that make_fx cannot trace (named by module and line)."""


def _where_in_model(tb):
    """' in MODULE (FILE:LINE: CODE)': the innermost frame of the failing
    trace outside torch and lazyc, and the nn.Module whose code runs there."""
    import linecache
    last, module = None, None
    while tb is not None:
        fr = tb.tb_frame
        fn = fr.f_code.co_filename
        if "/torch/" not in fn and "/lazyc/" not in fn and "/functorch/" not in fn:
            last = (fn, tb.tb_lineno)
            me = fr.f_locals.get("self")
            if isinstance(me, torch.nn.Module):
                module = type(me).__name__
        tb = tb.tb_next
    if last is None:
        return ""
    code = linecache.getline(last[0], last[1]).strip()
    return " in %s (%s:%d: %s)" % (module or "the model", last[0], last[1], code)


# ---- the interpreter --------------------------------------------------------

IN_PLACE = {aten.add_.Tensor, aten.add_.Scalar, aten.sub_.Tensor, aten.sub_.Scalar, aten.mul_.Tensor,
            aten.mul_.Scalar, aten.div_.Tensor, aten.div_.Scalar, aten.relu_.default,
            aten.hardtanh_.default, aten.gelu_.default, aten.silu_.default, aten.clamp_min_.default,
            aten.clamp_max_.default, aten.clamp_.default, aten.masked_fill_.Scalar,
            aten.masked_fill_.Tensor}


class _Missing:
    def __init__(self, what):
        self.what = what


class Context:
    """One run of a graph: env maps fx nodes to lazyc handles (or tuples,
    lists and Python values)."""

    def __init__(self, consts):
        self.consts = consts
        self.env = {}
        self.elided = {}   # expand node -> its matrix's shape (_expand, _mm)

    def op(self, fn, *args):
        h = getattr(lib, fn)(*args)
        if not h:
            raise error("%s (lowering %s)" % (fn, self.current))
        return Handle(h)


BINARY = {t for t, f in LOWER.items() if getattr(f, "binary", False)}
LOGICAL = {t for t in LOWER if "logical" in _name(t) or "bitwise" in _name(t)}


def prepare_constants(gm, consts):
    """Makes, before any capture, the constants the lowering of gm will read
    (one made while a capture traces works too, but the trace warns that it
    froze host data): every number an op takes, in f32 and in the dtypes of
    the op's tensors, and the few constants lowerings add of their own."""
    s = consts.scalar
    for v in (0.0, 1.0, float("-inf")):
        s(v)
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            consts.tensor(("attr", n.target), getattr(gm, n.target))
        if n.op != "call_function":
            continue
        nums = [a for a in list(n.args) + list(n.kwargs.values())
                if isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)]
        dts = {F32}
        for t in [n] + [a for a in n.args if isinstance(a, torch.fx.Node)]:
            v = _val(t)
            if isinstance(v, torch.Tensor) and v.dtype in LZ_DTYPES:
                dts.add(LZ_DTYPES[v.dtype])
        for v in nums + ([0] if n.target in LOGICAL else []):
            for dt in dts:
                if dt == F32 or float(v).is_integer():
                    consts.const(v, dt)
        if n.target in (aten.gelu.default, aten.gelu_.default):
            for v in (math.sqrt(2 / math.pi), 0.044715, 0.5):
                s(v)
        if n.target in FACTORIES:
            consts.tensor(n, _factory_value(n))


def _dead(n):
    """A node whose value nothing reads and that changes nothing."""
    if n.users or n.target in IN_PLACE or n.target == aten.copy_.default:
        return False
    schema = getattr(n.target, "_schema", None)
    return not (schema is not None and schema.is_mutable)


def live_nodes(gm):
    """The nodes the graph's outputs and its writes into its inputs (copy_,
    in-place ops) depend on. The rest, e.g. what feeds only data-dependent
    Python (HF's checks on masks, read with .item() while tracing), is not
    lowered: TrainStep's guards evaluate it in torch instead."""
    live, stack = set(), []
    for n in gm.graph.nodes:
        if n.op == "output" or (n.op == "call_function" and n.target is not operator.getitem and
                                not n.users and not _dead(n) and
                                n.target not in (aten._local_scalar_dense.default,)):
            stack.append(n)
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


# Of the ops returning several values, the outputs the lowering computes
# (statistics and indices saved for torch's backward are not).
COMPUTED = {aten.native_batch_norm.default: {0}, aten._native_batch_norm_legit.default: {0},
            aten._native_batch_norm_legit_functional.default: {0, 3, 4},
            aten._native_batch_norm_legit_no_training.default: {0},
            aten._native_batch_norm_legit.no_stats: {0}, aten.native_layer_norm.default: {0},
            aten.max_pool2d_with_indices.default: {0}, aten.native_dropout.default: {0},
            aten.nll_loss_forward.default: {0},
            aten._scaled_dot_product_flash_attention_for_cpu.default: {0},
            aten._scaled_dot_product_attention_math.default: {0}}


def unsupported_ops(gm):
    """Why gm cannot be lowered, one entry per op or argument: ops with no
    lowering (by name), arguments a lowering does not implement, forms it
    refuses and dtypes lazyc does not hold (an op whose output the graph
    uses and the lowering does not compute counts too). Empty when every
    node lowers: the check run before anything executes."""
    bad = []
    live = live_nodes(gm)
    for n in gm.graph.nodes:
        if n not in live:
            continue
        where = _source(n)
        if n.target is operator.getitem and n.users and isinstance(n.args[0], torch.fx.Node) \
                and n.args[0].target in COMPUTED and n.args[1] not in COMPUTED[n.args[0].target]:
            bad.append("%s (output %d)%s" % (_name(n.args[0].target), n.args[1], where))
        if n.op != "call_function" or n.target is operator.getitem or _dead(n):
            continue
        if n.target == aten.copy_.default and n.args[0].op == "placeholder":
            continue
        if n.target not in LOWER:
            bad.append(_name(n.target) + where)
        else:
            bad.extend(p + where for p in arg_problems(n))
    return sorted(set(bad))


def _source(n):
    """ ' (at FILE:LINE in FUNCTION)' of the model code that made node n:
    the innermost frame of its stack outside torch itself."""
    st = n.meta.get("stack_trace") if hasattr(n, "meta") else None
    if not st:
        return ""
    frames = [l.strip() for l in st.splitlines() if l.strip().startswith("File ")]
    user = [f for f in frames if "/torch/" not in f and "/lazyc/torch/" not in f] or frames
    return " (at %s)" % user[-1][5:].replace('"', "") if user else ""


def run_graph(gm, inputs, consts, on_buffer_update=None):
    """Records gm's ops on lazyc handles; inputs follow gm's placeholders.
    In-place ops on an activation rebind it; an in-place op on an input
    (a buffer) is reported to on_buffer_update(index, node) and skipped there."""
    cx = Context(consts)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ValueError("graph has %d inputs, %d given" % (len(placeholders), len(inputs)))
    index = {}
    for i, (n, h) in enumerate(zip(placeholders, inputs)):
        cx.env[n] = Handle(h) if type(h) is int else h
        index[n] = i

    def value(n):
        v = cx.env[n]
        if isinstance(v, _Missing):
            raise Unsupported("lazyc's lowering does not compute %s" % v.what)
        return v

    def load(a):
        return torch.fx.node.map_arg(a, value)

    live = live_nodes(gm)
    for n in gm.graph.nodes:
        if n.op == "placeholder" or n not in live:
            continue
        if n.op == "output":
            return load(n.args[0])
        if n.op == "get_attr":
            # a tensor constant of the trace (real tracing keeps those it made)
            cx.env[n] = Handle(consts.tensor(("attr", n.target), getattr(gm, n.target)))
            continue
        if n.op != "call_function":
            raise Unsupported("fx node %s (%s)" % (n.op, n.target))
        cx.current = _name(n.target)
        if _dead(n):
            continue
        if n.target is operator.getitem:
            seq, i = load(n.args[0]), n.args[1]
            v = seq[i]
            if v is None:   # an output lazyc does not compute: an error only if used
                v = _Missing("output %d of %s" % (i, _name(n.args[0].target)))
            cx.env[n] = v
            continue
        if n.target in IN_PLACE and n.args[0] in index:
            if on_buffer_update is None:
                raise Unsupported("%s on a graph input" % _name(n.target))
            on_buffer_update(index[n.args[0]], n)
            cx.env[n] = cx.env[n.args[0]]
            continue
        if n.target == aten.copy_.default and n.args[0] in index:
            # a functionalised buffer update: the value is in the buffer already when it is the
            # buffer itself (batch norm's statistics), else assign it
            dst, src = cx.env[n.args[0]], cx.env[n.args[1]]
            if dst != src and lib.lz_assign(dst, src) != 0:
                raise error("lz_assign (lowering aten.copy_)")
            cx.env[n] = dst
            continue
        fn = LOWER.get(n.target)
        if fn is None:
            raise Unsupported("lazyc has no lowering for %s" % _name(n.target))
        probs = arg_problems(n)
        if probs:
            raise Unsupported("; ".join(probs) + _source(n))
        v = fn(cx, n, *load(n.args), **load(n.kwargs))
        cx.env[n] = v
        if n.target in IN_PLACE:
            cx.env[n.args[0]] = v
    raise ValueError("graph has no output")
