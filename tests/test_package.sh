#!/usr/bin/env bash
# `pip install ./python` from scratch, as a user runs it: a new virtual
# environment, where pip builds the C library through CMake
# (scikit-build-core, python/pyproject.toml) into the wheel. Then, from
# outside the repository with LAZYC_LIB unset: `import lazyc` loads nothing,
# the version is include/lazyc.h's, the wheel holds the package and
# lazyc/lib/liblazyc.so and nothing else built, the first use loads that
# library and a tensor op runs; LAZYC_LIB overrides it, and a LAZYC_LIB
# that names nothing is an error naming it; torch.compile(model,
# backend="lazyc") finds the backend through the entry point alone (the
# pinned PyTorch environment's packages made visible to the new one).
# pip needs PyPI for scikit-build-core (and CMake or Ninja where the system
# has none): without network, skipped (77), or failed under CI=true.
# About a minute on 2 cores; JOBS sets the build's parallel jobs (2).
# usage: test_package.sh LIBLAZYC_SO
set -uo pipefail
lib=$1
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
skip() {
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: $1; CI needs it" >&2
        exit 1
    fi
    echo "SKIPPED: test_package: $1"
    exit 77
}
torchpy="$("$repo/scripts/pyenv.sh" torch)" ||
    skip "no PyTorch environment (scripts/pyenv.sh torch failed, above: it needs the network once)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)

# the Python of the PyTorch environment, so that its packages fit the new one
"$torchpy" -m venv "$tmp/venv" || { echo "FAIL: python -m venv"; exit 1; }
py="$tmp/venv/bin/python"
cd "$tmp"
if ! env -u LAZYC_LIB CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" \
        "$py" -m pip install --disable-pip-version-check "$repo/python" > "$tmp/pip.log" 2>&1; then
    if grep -qiE 'connection|resolve|network|timed out|no matching distribution' "$tmp/pip.log"; then
        tail -5 "$tmp/pip.log"
        skip "pip install ./python could not reach PyPI (its build backend, scikit-build-core, comes from there)"
    fi
    cat "$tmp/pip.log"
    echo "FAIL: pip install ./python"
    exit 1
fi
echo "pip install ./python: $(( $(date +%s) - t0 )) s"

version=$(sed -n 's/^#define LZ_VERSION_STRING "\(.*\)"$/\1/p' "$repo/include/lazyc.h")
checks=0
run() {   # run NAME [VAR=VALUE ...] -- PYTHON-CODE: the new environment's python, outside the repository
    local name=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    if (cd "$tmp" && env -u LAZYC_LIB -u PYTHONPATH "${envs[@]}" OMP_NUM_THREADS=2 VENV="$tmp/venv" \
            VERSION="$version" "$py" -c "$1"); then
        echo "ok   $name"
        checks=$((checks + 1))
    else
        echo "FAIL $name"
        exit 1
    fi
}

run "the installed package, its bundled library and a tensor op" -- '
import ctypes, importlib.metadata as md, os
import lazyc
maps = lambda: open("/proc/self/maps").read()
assert lazyc.__file__.startswith(os.environ["VENV"] + "/"), lazyc.__file__
assert "liblazyc" not in maps(), "import lazyc loaded the library"
assert lazyc.__version__ == os.environ["VERSION"] == md.version("lazyc"), (lazyc.__version__, md.version("lazyc"))
built = sorted(str(f) for f in md.files("lazyc") if not str(f).endswith(".py")
               and "__pycache__" not in str(f) and ".dist-info/" not in str(f))
assert built == ["lazyc/lib/liblazyc.so"], built
eps = {e.name: e.value for e in md.entry_points(group="torch_dynamo_backends")}
assert eps.get("lazyc") == "lazyc.torch.dynamo:lazyc_backend", eps
L = lazyc.lib
x = L.lz_from_host((ctypes.c_float * 4)(1, 2, 3, 4), 0, 1, (ctypes.c_int64 * 1)(4))
y = L.lz_add(x, x)
out = (ctypes.c_float * 4)()
assert L.lz_to_host(y, out, ctypes.sizeof(out)) == 0, L.lz_last_error()
assert list(out) == [2, 4, 6, 8], list(out)
L.lz_free(x); L.lz_free(y)
bundled = os.path.join(os.path.dirname(lazyc.__file__), "lib", "liblazyc.so")
assert lazyc.library_path() == bundled, lazyc.library_path()
assert bundled in maps()
assert L.lz_version().decode() == lazyc.__version__
print("lazyc", lazyc.__version__, "from", lazyc.library_path())
'

run "LAZYC_LIB overrides the bundled library" LAZYC_LIB="$lib" -- '
import os, lazyc
assert lazyc.library_path() == os.environ["LAZYC_LIB"], lazyc.library_path()
'

run "a LAZYC_LIB that names nothing is an error naming it (on first use)" LAZYC_LIB="$tmp/none/liblazyc.so" -- '
import os, lazyc
try:
    lazyc.lib.lz_version()
except lazyc.LazycNotFound as e:
    assert os.environ["LAZYC_LIB"] in str(e) and "LAZYC_LIB" in str(e), e
else:
    raise AssertionError("no error")
'

# torch, torchvision and the rest of the pinned environment, after the new
# environment's own packages (its lazyc first)
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$torchpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/lazyc-test-torch.pth"
run "torch.compile(model, backend=\"lazyc\") through the entry point" -- '
import os, torch, lazyc, lazyc.torch as lzt
from torch._dynamo.backends import registry
assert "lazyc" not in registry._COMPILER_FNS, "importing lazyc.torch registered the backend"
assert "lazyc" in torch._dynamo.list_backends()
assert isinstance(registry._BACKENDS["lazyc"], registry.EntryPoint), registry._BACKENDS["lazyc"]
assert lazyc.__file__.startswith(os.environ["VENV"] + "/"), lazyc.__file__
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
ref = m(x)
ref.sum().backward()
gref = m[0].weight.grad.clone()
m.zero_grad()
lzt.metrics_reset()
out = torch.compile(m, backend="lazyc")(x)
out.sum().backward()
assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
assert torch.allclose(m[0].weight.grad, gref, atol=1e-5)
assert lzt.metrics()["executions"] >= 2, lzt.metrics()
assert lazyc.library_path() == os.path.join(os.path.dirname(lazyc.__file__), "lib", "liblazyc.so")
print("torch.compile: %d lazyc executions" % lzt.metrics()["executions"])
'
echo "$checks checks passed ($(( $(date +%s) - t0 )) s)"
