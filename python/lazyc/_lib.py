"""ctypes bindings of liblazyc.so: the C API of include/lazyc.h that the
bridge uses, with argument and result types declared once here
(python/tests/test_sigs.py checks each against the header).

The library is loaded on first use, from the first of: LAZYC_LIB (alone,
when set); the copy the wheel carries (lazyc/lib/liblazyc.so); a source
checkout's build*/liblazyc.so; the dynamic loader's liblazyc.so."""
import ctypes
import ctypes.util
import os
import threading

F32, I64, I32, BF16 = 0, 1, 2, 3  # lz_dtype
MAX_DIMS = 8

T = ctypes.c_void_p               # lz_tensor *
i64p = ctypes.POINTER(ctypes.c_int64)
intp = ctypes.POINTER(ctypes.c_int)


class Conv2dOpts(ctypes.Structure):
    _fields_ = [("stride", ctypes.c_int * 2), ("padding", ctypes.c_int * 2),
                ("dilation", ctypes.c_int * 2), ("groups", ctypes.c_int)]


class Pool2dOpts(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_int * 2), ("stride", ctypes.c_int * 2),
                ("padding", ctypes.c_int * 2), ("ceil_mode", ctypes.c_int),
                ("count_include_pad", ctypes.c_int)]


class SgdOpts(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("momentum", ctypes.c_float),
                ("dampening", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("nesterov", ctypes.c_int)]


class AdamwOpts(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("decoupled", ctypes.c_int)]


class CrossEntropyOpts(ctypes.Structure):
    _fields_ = [("weight", T), ("ignore_index", ctypes.c_int64), ("use_ignore_index", ctypes.c_int),
                ("label_smoothing", ctypes.c_float), ("reduction", ctypes.c_int)]


class AttentionOpts(ctypes.Structure):
    _fields_ = [("mask", T), ("scale", ctypes.c_float), ("causal", ctypes.c_int),
                ("dropout_p", ctypes.c_float), ("enable_gqa", ctypes.c_int)]


class Metrics(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "mark_steps", "graphs", "executions", "compiles", "cache_hits",
        "ir_nodes", "transfers_to_device", "transfers_from_device", "host_waits",
        "capture_replays", "capture_fallbacks", "peak_bytes")] + \
        [(n, ctypes.c_double) for n in ("trace_ms", "compile_ms", "execute_ms", "wait_ms", "flops")] + \
        [(n, ctypes.c_int64) for n in ("kernels", "in_place_writes", "bytes_to_device",
                                       "bytes_from_device", "graph_launches", "kernel_launches")]


STEP_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(T), ctypes.POINTER(T))

# name: (restype, argtypes)
_SIGS = {
    "lz_version": (ctypes.c_char_p, []),
    "lz_last_error": (ctypes.c_char_p, []),
    "lz_clear_error": (None, []),
    "lz_set_error": (None, None),
    "lz_from_host": (T, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, i64p]),
    "lz_zeros": (T, [ctypes.c_int, ctypes.c_int, i64p]),
    "lz_full": (T, [ctypes.c_int, ctypes.c_int, i64p, ctypes.c_double]),
    "lz_scalar": (T, [ctypes.c_float]),
    "lz_retain": (T, [T]),
    "lz_free": (None, [T]),
    "lz_ndim": (ctypes.c_int, [T]),
    "lz_dim": (ctypes.c_int64, [T, ctypes.c_int]),
    "lz_numel": (ctypes.c_int64, [T]),
    "lz_tensor_dtype": (ctypes.c_int, [T]),
    "lz_to_host": (ctypes.c_int, [T, ctypes.c_void_p, ctypes.c_size_t]),
    "lz_item": (ctypes.c_float, [T]),
    "lz_copy_from_host": (ctypes.c_int, [T, ctypes.c_void_p, ctypes.c_size_t]),
    "lz_scope_begin": (None, []),
    "lz_scope_end": (None, []),
    "lz_keep": (T, [T]),
    "lz_neg": (T, [T]), "lz_exp": (T, [T]), "lz_log": (T, [T]), "lz_sqrt": (T, [T]),
    "lz_rsqrt": (T, [T]), "lz_tanh": (T, [T]), "lz_sigmoid": (T, [T]), "lz_relu": (T, [T]),
    "lz_gelu": (T, [T]), "lz_relu6": (T, [T]),
    "lz_pow": (T, [T, ctypes.c_float]),
    "lz_scale": (T, [T, ctypes.c_float]),
    "lz_add": (T, [T, T]), "lz_sub": (T, [T, T]), "lz_mul": (T, [T, T]), "lz_div": (T, [T, T]),
    "lz_maximum": (T, [T, T]), "lz_eq": (T, [T, T]), "lz_lt": (T, [T, T]), "lz_le": (T, [T, T]),
    "lz_gt": (T, [T, T]), "lz_ge": (T, [T, T]),
    "lz_where": (T, [T, T, T]),
    "lz_cast": (T, [T, ctypes.c_int]),
    "lz_sum": (T, [T]), "lz_mean": (T, [T]),
    "lz_sum_axes": (T, [T, ctypes.c_int, intp, ctypes.c_int]),
    "lz_mean_axes": (T, [T, ctypes.c_int, intp, ctypes.c_int]),
    "lz_max_axes": (T, [T, ctypes.c_int, intp, ctypes.c_int]),
    "lz_reshape": (T, [T, ctypes.c_int, i64p]),
    "lz_permute": (T, [T, intp]),
    "lz_transpose": (T, [T, ctypes.c_int, ctypes.c_int]),
    "lz_expand": (T, [T, ctypes.c_int, i64p]),
    "lz_slice": (T, [T, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
    "lz_cat": (T, [ctypes.POINTER(T), ctypes.c_int, ctypes.c_int]),
    "lz_matmul": (T, [T, T]),
    "lz_linear": (T, [T, T, T]),
    "lz_softmax": (T, [T, ctypes.c_int]),
    "lz_log_softmax": (T, [T, ctypes.c_int]),
    "lz_cross_entropy": (T, [T, T]),
    "lz_conv2d": (T, [T, T, T, Conv2dOpts]),
    "lz_conv_transpose2d": (T, [T, T, T, Conv2dOpts, intp]),
    "lz_max_pool2d": (T, [T, Pool2dOpts]),
    "lz_avg_pool2d": (T, [T, Pool2dOpts]),
    "lz_adaptive_avg_pool2d": (T, [T, ctypes.c_int, ctypes.c_int]),
    "lz_batch_norm": (T, [T, T, T, T, T, ctypes.c_int, ctypes.c_float, ctypes.c_float]),
    "lz_layer_norm": (T, [T, ctypes.c_int, T, T, ctypes.c_float]),
    "lz_embedding": (T, [T, T]),
    "lz_hardtanh": (T, [T, ctypes.c_float, ctypes.c_float]),
    "lz_flatten": (T, [T, ctypes.c_int]),
    "lz_attention": (T, [T, T, T, T, ctypes.c_float]),
    "lz_dropout": (T, [T, ctypes.c_float, ctypes.c_int]),
    "lz_manual_seed": (None, [ctypes.c_uint64]),
    "lz_mark_step": (None, []),
    "lz_wait": (ctypes.c_int, []),
    "lz_sync": (ctypes.c_int, [ctypes.POINTER(T), ctypes.c_int, ctypes.c_int]),
    "lz_requires_grad": (None, [T, ctypes.c_int]),
    "lz_backward": (ctypes.c_int, [T]),
    "lz_grad": (T, [T]),
    "lz_assign": (ctypes.c_int, [T, T]),
    "lz_no_grad_begin": (None, []),
    "lz_no_grad_end": (None, []),
    "lz_sgd_new": (ctypes.c_void_p, [ctypes.POINTER(T), ctypes.c_int, SgdOpts]),
    "lz_sgd_set_lr": (None, [ctypes.c_void_p, ctypes.c_float]),
    "lz_sgd_step": (ctypes.c_int, [ctypes.c_void_p]),
    "lz_sgd_zero_grad": (None, [ctypes.c_void_p]),
    "lz_sgd_free": (None, [ctypes.c_void_p]),
    "lz_adamw_new": (ctypes.c_void_p, [ctypes.POINTER(T), ctypes.c_int, AdamwOpts]),
    "lz_adamw_set_lr": (None, [ctypes.c_void_p, ctypes.c_float]),
    "lz_adamw_step": (ctypes.c_int, [ctypes.c_void_p]),
    "lz_adamw_zero_grad": (None, [ctypes.c_void_p]),
    "lz_adamw_free": (None, [ctypes.c_void_p]),
    "lz_sgd_state": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]),
    "lz_adamw_state": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]),
    "lz_params_new": (ctypes.c_void_p, []),
    "lz_params_free": (None, [ctypes.c_void_p]),
    "lz_params_count": (ctypes.c_int, [ctypes.c_void_p]),
    "lz_params_name": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int]),
    "lz_params_at": (T, [ctypes.c_void_p, ctypes.c_int]),
    "lz_capture": (ctypes.c_void_p, [STEP_FN, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]),
    "lz_call": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(T), ctypes.POINTER(T)]),
    "lz_fn_free": (None, [ctypes.c_void_p]),
    "lz_device_use": (ctypes.c_int, [ctypes.c_char_p]),
    "lz_device_name": (ctypes.c_char_p, []),
    "lz_silu": (T, [T]), "lz_sin": (T, [T]), "lz_cos": (T, [T]),
    "lz_ne": (T, [T, T]), "lz_minimum": (T, [T, T]),
    "lz_tri_mask": (T, [T, ctypes.c_int64, ctypes.c_int, ctypes.c_float]),
    "lz_cumsum": (T, [T, ctypes.c_int]),
    "lz_gather": (T, [T, ctypes.c_int, T]),
    "lz_scatter_add": (T, [T, ctypes.c_int, T, T]),
    "lz_index_select": (T, [T, ctypes.c_int, T]),
    "lz_argmax": (T, [T, ctypes.c_int, ctypes.c_int]),
    "lz_cross_entropy_ex": (T, [T, T, ctypes.c_void_p]),
    "lz_attention_ex": (T, [T, T, T, ctypes.c_void_p]),
    "lz_clip_grad_norm": (T, [ctypes.POINTER(T), ctypes.c_int, ctypes.c_float]),
    "lz_zero_grad": (None, [T]),
    "lz_rand": (T, [ctypes.c_int, i64p]),
    "lz_rms_norm": (T, [T, ctypes.c_int, T, ctypes.c_float]),
    "lz_group_norm": (T, [T, ctypes.c_int, T, T, ctypes.c_float]),
    "lz_autocast_begin": (ctypes.c_int, [ctypes.c_int]),
    "lz_autocast_end": (ctypes.c_int, []),
    "lz_metrics_get": (Metrics, []),
    "lz_metrics_reset": (None, []),
}


_HERE = os.path.dirname(os.path.abspath(__file__))
# where the wheel puts the library it built (python/pyproject.toml)
BUNDLED = os.path.join(_HERE, "lib", "liblazyc.so")


def _candidates():
    """The places to load liblazyc.so from, in order, and whether they come
    from LAZYC_LIB (which, when set, is the only one)."""
    env = os.environ.get("LAZYC_LIB")
    if env:
        return [env], True
    c = [BUNDLED]
    repo = os.path.dirname(os.path.dirname(_HERE))          # python/lazyc -> repository root
    if os.path.isfile(os.path.join(repo, "include", "lazyc.h")):
        try:
            builds = sorted(d for d in os.listdir(repo) if d.startswith("build"))
        except OSError:
            builds = []
        c += [os.path.join(repo, d, "liblazyc.so") for d in builds]
    found = ctypes.util.find_library("lazyc")
    c += [found] if found else []
    c += ["/usr/local/lib/liblazyc.so", "/usr/lib/liblazyc.so", "liblazyc.so"]
    return c, False


class LazycNotFound(ImportError):
    """No loadable liblazyc.so: raised by the first use of the library
    (importing the package loads nothing)."""


def _open():
    cands, from_env = _candidates()
    tried = []
    for path in cands:
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return cdll, path
    hint = ("LAZYC_LIB is set but does not name a loadable liblazyc.so" if from_env else
            "pip install ./python builds one into the package; or build lazyc (cmake --build build) "
            "or install it, or set LAZYC_LIB=/path/to/liblazyc.so")
    raise LazycNotFound("lazyc: liblazyc.so not found: %s; tried %s" % (hint, "; ".join(tried)))


class _Library:
    """liblazyc's functions with their declared signatures only: ctypes
    would call an undeclared one as returning a C int, cutting a tensor
    pointer to 32 bits (a crash, or another tensor, once the heap is above
    2 GiB), so a name missing from _SIGS is an AttributeError instead.

    Loaded on first use: the first attribute read (lib.lz_add, lib.path)
    opens the library and binds every function of _SIGS as an attribute
    of the object, so later reads are plain attribute reads."""

    def __init__(self):
        self.__dict__["_loaded"] = False

    def _load(self):
        with _LOCK:
            if self._loaded:
                return
            cdll, path = _open()
            fns = {}
            for name, (res, args) in _SIGS.items():
                try:
                    fn = getattr(cdll, name)
                except AttributeError:
                    raise LazycNotFound("lazyc: %s has no function %s (a library older than the "
                                        "package?)" % (path, name)) from None
                fn.restype = res
                if args is not None:
                    fn.argtypes = args
                fns[name] = fn
            self.__dict__.update(fns)
            self.__dict__["path"] = path
            self.__dict__["_loaded"] = True
            # LZ_DEVICE chooses the device as it does for any program; asked
            # for here, so a name lazyc cannot use fails at the first use,
            # naming why, not at the first tensor a bridge step makes.
            dev = os.environ.get("LZ_DEVICE")
            if dev and fns["lz_device_use"](dev.encode()) != 0:
                msg = fns["lz_last_error"]()
                raise RuntimeError("lazyc: device %s: %s" % (
                    dev, msg.decode() if msg else "unknown lazyc error"))

    def __getattr__(self, name):
        if not self._loaded and not name.startswith("__"):
            self._load()
            return getattr(self, name)
        raise AttributeError("lazyc: %s has no declared signature in lazyc/_lib.py (_SIGS)" % name)

    def __repr__(self):
        return "<lazyc library %s>" % (self.__dict__["path"] if self._loaded else "(not loaded yet)")


_LOCK = threading.Lock()
lib = _Library()


def load():
    """Loads liblazyc.so now (it is loaded on first use anyway); LazycNotFound
    names every place tried when there is none."""
    lib._load()
    return lib


def library_path():
    """The path of the liblazyc.so in use (loading it first)."""
    return load().path


def error(what):
    """A RuntimeError carrying lazyc's last error."""
    msg = lib.lz_last_error()
    return RuntimeError("%s: %s" % (what, msg.decode() if msg else "unknown lazyc error"))


def use_device(name):
    """Makes name the device lazyc's tensors live on ("cpu", or NAME for
    liblazyc_NAME.so beside the library); before the first tensor."""
    if lib.lz_device_use(name.encode()) != 0:
        raise error("lazyc: device %s" % name)


def device():
    """The device lazyc's tensors live on (or will)."""
    return lib.lz_device_name().decode()


def shape_arg(shape):
    return (ctypes.c_int64 * max(1, len(shape)))(*shape)


def int_arg(vals):
    return (ctypes.c_int * max(1, len(vals)))(*vals)


def metrics():
    m = lib.lz_metrics_get()
    return {name: getattr(m, name) for name, _ in Metrics._fields_}


def metrics_reset():
    lib.lz_metrics_reset()
