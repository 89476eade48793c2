"""lazyc from Python: ctypes over liblazyc.so (found through LAZYC_LIB, the
repository's build tree, or the installed library). `lazyc.torch` is the
PyTorch bridge."""
from ._lib import lib, metrics, metrics_reset, LazycNotFound  # noqa: F401

__version__ = lib.lz_version().decode()
