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

import torch

from .._lib import lib, error, shape_arg, int_arg, Conv2dOpts, Pool2dOpts, F32, I64, I32

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


def _dtype_of(t):
    return {torch.float32: F32, torch.int64: I64, torch.int32: I32}.get(t)


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

    def tensor(self, key, value):
        """A data tensor holding value (a torch tensor), made once per key."""
        h = self.by_key.get(key)
        if h is None:
            t = value.detach().contiguous()
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


def lowers(*ops):
    def reg(fn):
        for op in ops:
            LOWER[op] = fn
        return fn
    return reg


class Handle(int):
    """A lazyc tensor handle (an lz_tensor pointer), told apart from the
    Python numbers an aten op also takes."""


def _tensor_or_scalar(cx, v):
    if type(v) in (int, float, bool):
        return cx.consts.scalar(v)
    return v


def _int_scalar(cx, v, other):
    """v as a 0-d i64 constant when the other operand is an i64 tensor."""
    if type(v) is int and type(other) is Handle and lib.lz_tensor_dtype(other) == I64:
        return Handle(cx.consts.tensor(("i64", v), torch.tensor(v, dtype=torch.int64)))
    return v


def _binary(fn_name):
    def lower(cx, node, a, b, alpha=1):
        a, b = _int_scalar(cx, a, b), _int_scalar(cx, b, a)
        a = _tensor_or_scalar(cx, a)
        b = _tensor_or_scalar(cx, b)
        if alpha != 1:
            b = cx.op("lz_mul", b, cx.consts.scalar(alpha))
        return cx.op(fn_name, a, b)
    lower.binary = True      # its number operands become scalars (prepare_constants)
    return lower


for _op, _fn in [(aten.add, "lz_add"), (aten.sub, "lz_sub"), (aten.mul, "lz_mul"),
                 (aten.div, "lz_div"), (aten.maximum, "lz_maximum"), (aten.gt, "lz_gt"),
                 (aten.lt, "lz_lt"), (aten.ge, "lz_ge"), (aten.le, "lz_le"), (aten.eq, "lz_eq")]:
    for _ov in ("Tensor", "Scalar"):
        if hasattr(_op, _ov):
            LOWER[getattr(_op, _ov)] = _binary(_fn)
for _inplace in ("add_", "sub_", "mul_", "div_"):
    for _ov in ("Tensor", "Scalar"):
        _packet = getattr(aten, _inplace)
        if hasattr(_packet, _ov):
            LOWER[getattr(_packet, _ov)] = _binary("lz_" + _inplace[:-1])

for _op, _fn in [(aten.neg, "lz_neg"), (aten.exp, "lz_exp"), (aten.log, "lz_log"),
                 (aten.sqrt, "lz_sqrt"), (aten.rsqrt, "lz_rsqrt"), (aten.tanh, "lz_tanh"),
                 (aten.sigmoid, "lz_sigmoid"), (aten.relu, "lz_relu"), (aten.relu_, "lz_relu")]:
    LOWER[_op.default] = (lambda fn: lambda cx, node, x: cx.op(fn, x))(_fn)


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(cx, node, a, b, alpha=1):
    a, b = _tensor_or_scalar(cx, a), _tensor_or_scalar(cx, b)
    if alpha != 1:
        a = cx.op("lz_mul", a, cx.consts.scalar(alpha))
    return cx.op("lz_sub", b, a)


@lowers(aten.gelu.default, aten.gelu_.default)
def _gelu(cx, node, x, approximate="none"):
    if approximate == "none":
        return cx.op("lz_gelu", x)
    # tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    s = cx.consts.scalar
    inner = cx.op("lz_mul", s(math.sqrt(2 / math.pi)),
                  cx.op("lz_add", x, cx.op("lz_mul", s(0.044715), cx.op("lz_pow", x, ctypes.c_float(3.0)))))
    return cx.op("lz_mul", cx.op("lz_mul", s(0.5), x), cx.op("lz_add", s(1.0), cx.op("lz_tanh", inner)))


@lowers(aten.hardtanh.default, aten.hardtanh_.default)
def _hardtanh(cx, node, x, lo=-1.0, hi=1.0):
    return cx.op("lz_hardtanh", x, ctypes.c_float(lo), ctypes.c_float(hi))


@lowers(aten.clamp_min.default, aten.clamp_min_.default)
def _clamp_min(cx, node, x, lo):
    if lo == 0:
        return cx.op("lz_relu", x)
    return cx.op("lz_maximum", x, cx.consts.scalar(lo))


@lowers(aten.abs.default)
def _abs(cx, node, x):
    return cx.op("lz_maximum", x, cx.op("lz_neg", x))


@lowers(aten.threshold_backward.default)
def _threshold_backward(cx, node, grad, x, threshold):
    # relu's backward (aot_autograd's backward graphs): grad where x > threshold, else 0
    return cx.op("lz_where", cx.op("lz_le", x, cx.consts.scalar(threshold)), cx.consts.scalar(0.0), grad)


@lowers(aten.pow.Tensor_Scalar)
def _pow(cx, node, x, e):
    return cx.op("lz_pow", x, ctypes.c_float(e))


@lowers(aten.where.self)
def _where(cx, node, c, a, b):
    return cx.op("lz_where", c, _tensor_or_scalar(cx, a), _tensor_or_scalar(cx, b))


@lowers(aten.masked_fill.Scalar, aten.masked_fill_.Scalar)
def _masked_fill(cx, node, x, mask, v):
    return cx.op("lz_where", mask, cx.consts.scalar(v), x)


# ---- views and shapes -------------------------------------------------------

def _reshape_to(cx, node, x):
    shape = _shape(node)
    return cx.op("lz_reshape", x, len(shape), shape_arg(shape))


for _op in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
            aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
            aten.flatten.using_ints, aten.alias.default, aten.clone.default,
            aten.contiguous.default, aten.lift_fresh_copy.default):
    LOWER[_op] = lambda cx, node, x, *a, **k: _reshape_to(cx, node, x)


@lowers(aten.detach.default)
def _detach(cx, node, x):
    lib.lz_no_grad_begin()
    try:
        return _reshape_to(cx, node, x)
    finally:
        lib.lz_no_grad_end()


@lowers(aten._to_copy.default)
def _to_copy(cx, node, x, dtype=None, **kw):
    want = _dtype_of(node.meta["val"].dtype)
    if want is None:
        raise Unsupported("aten._to_copy to %s" % node.meta["val"].dtype)
    if lib.lz_tensor_dtype(x) == want:
        return _reshape_to(cx, node, x)
    return cx.op("lz_cast", x, want)


@lowers(aten.t.default)
def _t(cx, node, x):
    if lib.lz_ndim(x) < 2:
        return _reshape_to(cx, node, x)
    return cx.op("lz_transpose", x, 0, 1)


@lowers(aten.transpose.int)
def _transpose(cx, node, x, a, b):
    return cx.op("lz_transpose", x, a, b)


@lowers(aten.permute.default)
def _permute(cx, node, x, perm):
    n = lib.lz_ndim(x)
    return cx.op("lz_permute", x, int_arg([p % n for p in perm]))


@lowers(aten.expand.default)
def _expand(cx, node, x, size, implicit=False):
    shape = _shape(node)
    return cx.op("lz_expand", x, len(shape), shape_arg(shape))


@lowers(aten.slice.Tensor)
def _slice(cx, node, x, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise Unsupported("aten.slice.Tensor with step %d" % step)
    n = lib.lz_dim(x, dim)
    start = 0 if start is None else max(-n, min(start, n))
    end = n if end is None else max(-n, min(end, n))
    start, end = start % n if start < 0 else start, end % n if end < 0 else end
    if start == 0 and end >= n:
        return _reshape_to(cx, node, x)
    return cx.op("lz_slice", x, dim, start, end)


@lowers(aten.select.int)
def _select(cx, node, x, dim, index):
    n = lib.lz_dim(x, dim)
    index = index % n
    s = cx.op("lz_slice", x, dim, index, index + 1)
    return _reshape_to(cx, node, s)


@lowers(aten.cat.default)
def _cat(cx, node, xs, dim=0):
    arr = (ctypes.c_void_p * len(xs))(*xs)
    nd = lib.lz_ndim(xs[0])
    return cx.op("lz_cat", arr, len(xs), dim % nd)


@lowers(aten.split.Tensor, aten.split_with_sizes.default)
def _split(cx, node, x, sizes, dim=0):
    n = lib.lz_dim(x, dim)
    if isinstance(sizes, int):
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
    out, start = [], 0
    for s in sizes:
        out.append(cx.op("lz_slice", x, dim, start, start + s))
        start += s
    return out


@lowers(aten.unbind.int)
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


LOWER[aten.sum.dim_IntList] = _axes_call("lz_sum_axes")
LOWER[aten.mean.dim] = _axes_call("lz_mean_axes")
LOWER[aten.amax.default] = lambda cx, node, x, dims=(), keepdim=False: \
    cx.op("lz_max_axes", x, len(dims), int_arg(sorted(d % lib.lz_ndim(x) for d in dims)), int(keepdim))
LOWER[aten.sum.default] = lambda cx, node, x, dtype=None: cx.op("lz_sum", x)
LOWER[aten.mean.default] = lambda cx, node, x, dtype=None: cx.op("lz_mean", x)


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


@lowers(aten.addmm.default)
def _addmm(cx, node, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported("aten.addmm with beta/alpha != 1")
    w = _transposed_weight(cx, node.args[2])
    if w is not None and lib.lz_ndim(bias) == 1:
        return cx.op("lz_linear", a, w, bias)
    return cx.op("lz_add", cx.op("lz_matmul", a, b), bias)


@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(cx, node, a, b):
    w = _transposed_weight(cx, node.args[1])
    if w is not None and node.target == aten.mm.default:
        return cx.op("lz_linear", a, w, None)
    return cx.op("lz_matmul", a, b)


@lowers(aten.linear.default)
def _linear(cx, node, x, w, b=None):
    return cx.op("lz_linear", x, w, b)


# ---- neural-network ops -----------------------------------------------------

def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


@lowers(aten.convolution.default)
def _conv(cx, node, x, w, b, stride, padding, dilation, transposed, output_padding, groups):

    if transposed or lib.lz_ndim(x) != 4:
        raise Unsupported("aten.convolution (only 2-d, not transposed)")
    o = Conv2dOpts()
    o.stride[:] = _pair(stride)
    o.padding[:] = _pair(padding)
    o.dilation[:] = _pair(dilation)
    o.groups = groups
    return cx.op("lz_conv2d", x, w, b, o)


def _pool_opts(kernel, stride, padding, ceil_mode, count_include_pad=True):
    o = Pool2dOpts()
    o.kernel[:] = _pair(kernel)
    o.stride[:] = _pair(stride) if stride else _pair(kernel)
    o.padding[:] = _pair(padding)
    o.ceil_mode = int(bool(ceil_mode))
    o.count_include_pad = int(bool(count_include_pad))
    return o


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool2d.default)
def _max_pool(cx, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if _pair(dilation) != [1, 1]:
        raise Unsupported("%s with dilation" % _name(node.target))
    y = cx.op("lz_max_pool2d", x, _pool_opts(kernel, stride, padding, ceil_mode))
    return (y, None) if node.target == aten.max_pool2d_with_indices.default else y


@lowers(aten.avg_pool2d.default)
def _avg_pool(cx, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    if divisor_override is not None:
        raise Unsupported("aten.avg_pool2d with divisor_override")
    return cx.op("lz_avg_pool2d", x, _pool_opts(kernel, stride, padding, ceil_mode, count_include_pad))


@lowers(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive(cx, node, x, size):
    h, w = _pair(size)
    return cx.op("lz_adaptive_avg_pool2d", x, h, w)


@lowers(aten._softmax.default, aten.softmax.int)
def _softmax(cx, node, x, dim, half=False):
    return cx.op("lz_softmax", x, dim % lib.lz_ndim(x))


@lowers(aten._log_softmax.default, aten.log_softmax.int)
def _log_softmax(cx, node, x, dim, half=False):
    return cx.op("lz_log_softmax", x, dim % lib.lz_ndim(x))


def _batch_norm(cx, node, x, w, b, rm, rv, training, momentum, eps):
    if training and rm is not None and node.args[3].op != "placeholder":
        raise Unsupported("batch norm whose running statistics are not the module's buffers")
    y = cx.op("lz_batch_norm", x, w, b, rm, rv, int(bool(training)), ctypes.c_float(momentum),
              ctypes.c_float(eps))
    return y


@lowers(aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
        aten._native_batch_norm_legit_functional.default)
def _native_bn(cx, node, x, w, b, rm, rv, training, momentum, eps):
    y = _batch_norm(cx, node, x, w, b, rm, rv, training, momentum, eps)
    if node.target == aten._native_batch_norm_legit_functional.default:
        return (y, None, None, rm, rv)      # the buffers themselves hold the new statistics
    return (y, None, None)


@lowers(aten._native_batch_norm_legit_no_training.default)
def _bn_eval(cx, node, x, w, b, rm, rv, momentum, eps):
    return (cx.op("lz_batch_norm", x, w, b, rm, rv, 0, ctypes.c_float(momentum), ctypes.c_float(eps)),
            None, None)


@lowers(aten._native_batch_norm_legit.no_stats)
def _bn_nostats(cx, node, x, w, b, training, momentum, eps):
    return (cx.op("lz_batch_norm", x, w, b, None, None, int(bool(training)), ctypes.c_float(momentum),
                  ctypes.c_float(eps)), None, None)


@lowers(aten.native_layer_norm.default)
def _layer_norm(cx, node, x, shape, w, b, eps):
    return (cx.op("lz_layer_norm", x, len(shape), w, b, ctypes.c_float(eps)), None, None)


@lowers(aten.embedding.default)
def _embedding(cx, node, w, idx, padding_idx=-1, scale_grad=False, sparse=False):
    y = cx.op("lz_embedding", w, idx)
    if padding_idx is not None and padding_idx >= 0:
        # torch gives the padding row no gradient; its weight row starts at 0
        # and so stays 0, so zeroing the rows picked by padding_idx is equal
        pad = cx.consts.scalar(padding_idx)
        keep = cx.op("lz_sub", cx.consts.scalar(1.0),
                     cx.op("lz_eq", cx.op("lz_cast", idx, F32), pad))
        shape = list(_shape(node))
        keep = cx.op("lz_reshape", keep, len(shape), shape_arg(shape[:-1] + [1]))
        y = cx.op("lz_mul", y, keep)
    return y


@lowers(aten.native_dropout.default)
def _dropout(cx, node, x, p, train):
    if not train or p == 0:
        return (x, None)
    return (cx.op("lz_dropout", x, ctypes.c_float(p), 1), None)


@lowers(aten.nll_loss_forward.default)
def _nll(cx, node, logp, target, weight, reduction, ignore_index):
    src = node.args[0]
    if weight is None and reduction == 1 and isinstance(src, torch.fx.Node) \
            and src.target == aten._log_softmax.default and len(src.meta["val"].shape) == 2 \
            and src.args[1] in (1, -1):
        return (cx.op("lz_cross_entropy", cx.env[src.args[0]], target), None)
    raise Unsupported("aten.nll_loss_forward (lowered only as cross entropy: log_softmax over the "
                      "classes of [N, C] logits, mean reduction, no class weights)")


@lowers(aten.mse_loss.default)
def _mse(cx, node, a, b, reduction=1):
    d = cx.op("lz_sub", a, b)
    sq = cx.op("lz_mul", d, d)
    if reduction == 1:
        return cx.op("lz_mean", sq)
    if reduction == 2:
        return cx.op("lz_sum", sq)
    return sq


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_cpu(cx, node, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    if dropout_p or is_causal:
        raise Unsupported("scaled dot product attention with dropout or is_causal")
    out = cx.op("lz_attention", q, k, v, attn_mask, ctypes.c_float(scale or 0.0))
    return (out, None)


@lowers(aten.scaled_dot_product_attention.default, aten._scaled_dot_product_attention_math.default)
def _sdpa(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if dropout_p or is_causal:
        raise Unsupported("scaled dot product attention with dropout or is_causal")
    out = cx.op("lz_attention", q, k, v, attn_mask, ctypes.c_float(scale or 0.0))
    return out if node.target == aten.scaled_dot_product_attention.default else (out, None)


# ---- tensors made from nothing: constants ----------------------------------

FACTORIES = (aten.arange.default, aten.arange.start, aten.arange.start_step, aten.zeros.default,
             aten.ones.default, aten.full.default, aten.scalar_tensor.default, aten.zeros_like.default,
             aten.ones_like.default, aten.full_like.default)


def _factory_value(node):
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
    LOWER[_op] = _factory


# ---- decompositions applied while tracing ----------------------------------

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
        return func(*args, **kwargs)


# ---- the interpreter --------------------------------------------------------

IN_PLACE = {aten.add_.Tensor, aten.add_.Scalar, aten.sub_.Tensor, aten.mul_.Tensor, aten.mul_.Scalar,
            aten.div_.Tensor, aten.relu_.default, aten.hardtanh_.default, aten.gelu_.default,
            aten.clamp_min_.default, aten.masked_fill_.Scalar}


class _Missing:
    def __init__(self, what):
        self.what = what


class Context:
    """One run of a graph: env maps fx nodes to lazyc handles (or tuples,
    lists and Python values)."""

    def __init__(self, consts):
        self.consts = consts
        self.env = {}

    def op(self, fn, *args):
        h = getattr(lib, fn)(*args)
        if not h:
            raise error("%s (lowering %s)" % (fn, self.current))
        return Handle(h)


BINARY = {t for t, f in LOWER.items() if getattr(f, "binary", False)}


def prepare_constants(gm, consts):
    """Makes, before any capture, the scalars the lowering of gm will read."""
    s = consts.scalar
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        nums = [a for a in list(n.args) + list(n.kwargs.values())
                if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if n.target in BINARY or n.target in (aten.where.self, aten.masked_fill.Scalar,
                                              aten.masked_fill_.Scalar, aten.clamp_min.default,
                                              aten.rsub.Scalar, aten.rsub.Tensor):
            for v in nums:
                s(v)
        if n.target in (aten.gelu.default, aten.gelu_.default):
            for v in (math.sqrt(2 / math.pi), 0.044715, 0.5, 1.0):
                s(v)
        if n.target == aten.threshold_backward.default:
            s(n.args[2])
            s(0.0)
        if n.target in FACTORIES:
            consts.tensor(n, _factory_value(n))
        if n.target == aten.embedding.default:
            s(1.0)
            for v in nums:
                s(v)


def _dead(n):
    """A node whose value nothing reads and that changes nothing."""
    if n.users or n.target in IN_PLACE or n.target == aten.copy_.default:
        return False
    schema = getattr(n.target, "_schema", None)
    return not (schema is not None and schema.is_mutable)


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
    """The ops of gm that have no lowering, by name (an op whose output the
    graph uses and the lowering does not compute counts too)."""
    bad = []
    for n in gm.graph.nodes:
        if n.target is operator.getitem and n.users and isinstance(n.args[0], torch.fx.Node) \
                and n.args[0].target in COMPUTED and n.args[1] not in COMPUTED[n.args[0].target]:
            bad.append("%s (output %d)" % (_name(n.args[0].target), n.args[1]))
        if n.op == "call_function" and n.target is not operator.getitem and n.target not in LOWER \
                and not _dead(n):
            bad.append(_name(n.target))
    return sorted(set(bad))


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

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            return load(n.args[0])
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
        v = fn(cx, n, *load(n.args), **load(n.kwargs))
        cx.env[n] = v
        if n.target in IN_PLACE:
            cx.env[n.args[0]] = v
    raise ValueError("graph has no output")
