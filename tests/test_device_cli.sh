#!/usr/bin/env bash
# --device NAME on `lazyc bench`, `train` and `grads` (issue 44): a device
# lazyc cannot use is a usage error (exit 2) naming the library it looked
# for, before any work; --device guarded runs the command on the guarded
# test backend, and grads there writes the same bytes as on the CPU (the
# same kernels, every value moved through the backend contract); `lazyc
# env` lists LZ_DEVICE.
# usage: test_device_cli.sh LAZYC
set -uo pipefail
lazyc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for cmd in "bench --size smoke --models alexnet" "train --data fashion-mnist" \
           "grads --model alexnet --inputs $tmp/none --out $tmp/g.safetensors"; do
  # shellcheck disable=SC2086
  msg=$("$lazyc" $cmd --device nonesuch 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 2 ] || fail "lazyc $cmd --device nonesuch exited $rc, not 2 ($msg)"
  grep -q "^lazyc ${cmd%% *}: --device nonesuch: .*liblazyc_nonesuch.so not found" <<<"$msg" ||
    fail "lazyc $cmd --device nonesuch said: $msg"
done
echo "ok: an unknown --device is a usage error on bench, train and grads"

"$lazyc" bench --size smoke --models alexnet --modes captured --steps 1 --warmup 1 \
  --out "$tmp/out" --device guarded > "$tmp/bench.out" 2> "$tmp/bench.err" ||
  { cat "$tmp/bench.err"; fail "lazyc bench --device guarded failed"; }
grep -q "1 models on guarded" "$tmp/bench.err" || { cat "$tmp/bench.err"; fail "bench did not run on guarded"; }
echo "ok: lazyc bench --device guarded"

# a batch for grads: x [2, 3, 64, 64] and y [2] in a safetensors file
python3 - "$tmp/in.safetensors" <<'PY' || fail "could not write the inputs file"
import json, struct, sys
x = [((i * 37) % 101) / 101.0 - 0.5 for i in range(2 * 3 * 64 * 64)]
y = [3, 7]
xb = struct.pack("<%df" % len(x), *x)
yb = struct.pack("<2q", *y)
head = {"x": {"dtype": "F32", "shape": [2, 3, 64, 64], "data_offsets": [0, len(xb)]},
        "y": {"dtype": "I64", "shape": [2], "data_offsets": [len(xb), len(xb) + len(yb)]}}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + xb + yb)
PY
for dev in cpu guarded; do
  "$lazyc" grads --model alexnet --size smoke --inputs "$tmp/in.safetensors" --out "$tmp/g_$dev.safetensors" \
    --device $dev > "$tmp/grads_$dev.out" 2>&1 || { cat "$tmp/grads_$dev.out"; fail "lazyc grads --device $dev failed"; }
done
cmp -s "$tmp/g_cpu.safetensors" "$tmp/g_guarded.safetensors" ||
  fail "lazyc grads wrote other bytes on guarded than on cpu"
echo "ok: lazyc grads --device guarded writes the CPU's bytes"

env_out=$("$lazyc" env)
grep -q '^LZ_DEVICE  *cpu ' <<<"$env_out" || fail "lazyc env does not list LZ_DEVICE (cpu)"
env_out=$(LZ_DEVICE=guarded "$lazyc" env)
grep -q '^LZ_DEVICE  *guarded \*' <<<"$env_out" || fail "lazyc env does not show LZ_DEVICE=guarded"
echo "ok: lazyc env lists LZ_DEVICE"
