"""lazyc from Python: ctypes over liblazyc.so. `lazyc.torch` is the PyTorch
bridge. LZ_DEVICE (or lazyc.use_device before the first tensor) chooses the
device; lazyc.device() names it.

Importing the package loads nothing: liblazyc.so is loaded on first use
(`lazyc.lib.lz_...`, `lazyc.library_path()`, any op of `lazyc.torch`), from
LAZYC_LIB when set, else the copy the wheel carries (lazyc/lib/), else a
source checkout's build*/ folder or the dynamic loader's liblazyc.so."""
import os as _os
import re as _re

from ._lib import (lib, load, library_path, metrics, metrics_reset, device, use_device,  # noqa: F401
                   LazycNotFound)


def _version():
    """include/lazyc.h's version, without loading the library: written into
    the wheel as lazyc/_version.py (python/pyproject.toml), read from the
    header itself in a source checkout."""
    try:
        from ._version import __version__ as v
        return v
    except ImportError:
        pass
    repo = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
    try:
        with open(_os.path.join(repo, "include", "lazyc.h"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "0+unknown"
    parts = [_re.search(r"^#define LZ_VERSION_%s (\d+)$" % p, text, _re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "0+unknown"


__version__ = _version()
