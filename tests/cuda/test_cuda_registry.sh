#!/usr/bin/env bash
# The CUDA backend as a device of the registry (issue 46), on any machine:
#  - liblazyc.so and the lazyc program depend on no CUDA library (readelf);
#  - when built, liblazyc_cuda.so sits beside liblazyc, exports
#    lz_backend_open alone and needs no driver library to load (the CUDA
#    runtime is linked in statically and opens the driver itself);
#  - with no GPU, `--device cuda` is a usage error saying "no CUDA device:
#    <the runtime's reason>"; with one, lazyc bench runs on it;
#  - a lazyc that has no liblazyc_cuda.so beside it says it was built
#    without the CUDA backend.
# usage: test_cuda_registry.sh BUILD_DIR BUILT(0|1)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build=$1
built=$2
. "$here/../check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cuda_libs='libcuda\.|libcudart|libcublas|libcudnn|libnvrtc|libnccl'
for f in "$build/liblazyc.so" "$build/lazyc"; do
  needed=$(readelf -d "$f" | grep NEEDED)
  check "$(basename "$f") needs no CUDA library" '! grep -Eq "$cuda_libs" <<<"$needed"'
done

if [ "$built" = 1 ]; then
  so="$build/liblazyc_cuda.so"
  check "liblazyc_cuda.so is built beside liblazyc" '[ -f "$so" ]'
  needed=$(readelf -d "$so" | grep NEEDED)
  check "liblazyc_cuda.so links the driver through the runtime, not directly" \
    '! grep -q "libcuda\.so" <<<"$needed" && grep -q libcudnn <<<"$needed" && grep -q libcublasLt <<<"$needed"'
  exported=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sort | tr '\n' ' ')
  check "liblazyc_cuda.so exports lz_backend_open alone (exports: $exported)" '[ "$exported" = "lz_backend_open " ]'
  msg=$("$build/lazyc" bench --size smoke --models alexnet --modes captured --steps 1 --warmup 1 \
        --out "$tmp/out" --device cuda 2>&1 >/dev/null)
  rc=$?
  if [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    check "with a GPU, lazyc bench --device cuda runs there ($msg)" '[ $rc -eq 0 ] && grep -q "1 models on cuda" <<<"$msg"'
  else
    check "without a GPU, --device cuda is a usage error (rc $rc)" '[ $rc -eq 2 ]'
    check "... saying no CUDA device and why ($msg)" \
      'grep -q "^lazyc bench: --device cuda: lz_device_use: backend .cuda. refused to start: no CUDA device: ." <<<"$msg"'
  fi
fi

# a lazyc with no liblazyc_cuda.so beside it (nor on the loader's path;
# run from its own folder: an empty entry in its RUNPATH, which the MPI
# link leaves, is the current directory)
cp "$build/lazyc" "$tmp/lazyc"
msg=$(cd "$tmp" && env -u LD_LIBRARY_PATH ./lazyc bench --size smoke --models alexnet --device cuda 2>&1 >/dev/null)
rc=$?
check "without the library, --device cuda is a usage error (rc $rc)" '[ $rc -eq 2 ]'
check "... saying lazyc was built without the CUDA backend ($msg)" \
  'grep -q "lazyc was built without the CUDA backend: liblazyc_cuda.so not found" <<<"$msg"'
check_done
