#!/usr/bin/env bash
# The PyTorch bridge (python/): the package's Python part installed with
# pip into a temporary folder (without building the C library: that is
# test_package), then python/tests/test_bridge.py with the pinned PyTorch
# 2.9 environment of scripts/pyenv.sh (made on first use: a multi-GB
# download) and the library given by LAZYC_LIB. The installed copy's entry
# point is what names the backend "lazyc" for torch.compile.
# Without that environment (no network): a failure under CI=true, else a
# skip (77) with the reason.
# usage: test_bridge.sh LIBLAZYC_SO [--all]
set -uo pipefail
lib=$1
shift
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
if ! py="$("$repo/scripts/pyenv.sh" torch)"; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: the PyTorch environment could not be made (scripts/pyenv.sh torch, above); CI needs it" >&2
        exit 1
    fi
    echo "SKIPPED: test_bridge: no PyTorch 2.9 environment (scripts/pyenv.sh torch failed, above: it needs the network once)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The package installs with pip and works from outside the repository,
# finding the library through LAZYC_LIB; torch.compile finds the backend
# through the entry point. wheel.cmake=false: scikit-build-core copies the
# Python files without building the C library (test_package does that).
# It builds in a temporary folder: a test run writes nothing into the
# checkout.
"$py" -m pip install -q --no-deps --disable-pip-version-check --target "$tmp/site" \
    --config-settings=wheel.cmake=false "$repo/python" \
    > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; echo "FAIL: pip install ./python"; exit 1; }
(cd "$tmp" && LAZYC_LIB="$lib" PYTHONPATH="$tmp/site" "$py" -c '
import lazyc, lazyc.torch as lzt, torch
assert lazyc.__file__.startswith("'"$tmp"'/site"), lazyc.__file__
assert "liblazyc" not in open("/proc/self/maps").read(), "import lazyc loaded the library"
assert "lazyc" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
assert lazyc.library_path() == "'"$lib"'", lazyc.library_path()
assert lazyc.lib.lz_version().decode() == lazyc.__version__, (lazyc.lib.lz_version(), lazyc.__version__)
print("installed lazyc", lazyc.__version__, "metrics:", sorted(lzt.metrics())[:3], "...")
') || { echo "FAIL: the installed package"; exit 1; }

# test_autocast_bf16 checks that autocast's products run bf16: whatever this
# CPU runs faster (LZ_AUTOCAST_PRODUCTS, docs/env.md), they all do here
export LZ_AUTOCAST_PRODUCTS="${LZ_AUTOCAST_PRODUCTS:-bf16}"
# the checkout's package (python/tests/parity.py puts python/ first); the
# installed copy's entry point names the backend
cd "$repo/python/tests" && LAZYC_LIB="$lib" PYTHONPATH="$tmp/site" OMP_NUM_THREADS=2 "$py" test_bridge.py "$@"
