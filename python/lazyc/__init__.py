"""lazyc from Python: ctypes over liblazyc.so (found through LAZYC_LIB, the
repository's build tree, or the installed library). `lazyc.torch` is the
PyTorch bridge. LZ_DEVICE (or lazyc.use_device before the first tensor)
chooses the device; lazyc.device() names it."""
from ._lib import lib, metrics, metrics_reset, device, use_device, LazycNotFound  # noqa: F401

__version__ = lib.lz_version().decode()
