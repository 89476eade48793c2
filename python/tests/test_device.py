"""The package honours LZ_DEVICE (issue 44): with LZ_DEVICE=guarded every
tensor lives on the guarded test backend (liblazyc_guarded.so beside the
library), whose memory the host cannot touch, and values still come back
right; a device lazyc cannot use fails the import, naming why. Plain
python3 and ctypes only (no PyTorch): ctest test_python_device.

usage: LAZYC_LIB=build/liblazyc.so PYTHONPATH=python python3 test_device.py
"""
import os
import subprocess
import sys

CHILD = r'''
import ctypes, lazyc
from lazyc._lib import lib, shape_arg
assert lazyc.device() == "guarded", lazyc.device()
x = (ctypes.c_float * 4)(1, 2, 3, 4)
t = lib.lz_from_host(x, 0, 1, shape_arg([4]))
s = lib.lz_sum(lib.lz_mul(t, t))
assert lib.lz_item(s) == 30.0, lib.lz_item(s)
m = lazyc.metrics()
assert m["bytes_to_device"] == 16 and m["bytes_from_device"] == 4, m
print("guarded from LZ_DEVICE: ok")
'''


def run(device, code):
    env = dict(os.environ, LZ_DEVICE=device)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def main():
    p = run("guarded", CHILD)
    print(p.stdout + p.stderr, end="")
    ok = p.returncode == 0
    p = run("nonesuch", "import lazyc")
    last = (p.stderr.strip().splitlines() or [""])[-1]
    refused = p.returncode != 0 and "liblazyc_nonesuch.so not found" in last
    print("LZ_DEVICE=nonesuch refused at import: %s (%s)" % ("ok" if refused else "FAILED", last))
    return 0 if ok and refused else 1


if __name__ == "__main__":
    sys.exit(main())
