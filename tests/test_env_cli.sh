#!/usr/bin/env bash
# `lazyc env` lists the settings table: every variable, the value set in the
# environment (marked *), exit 1 naming a variable set to a value it does
# not accept; then this CPU's product peaks and what autocast does with
# products here. And no code outside the table reads an LZ_* variable itself.
# usage: test_env_cli.sh LAZYC SOURCE_DIR
set -uo pipefail
lazyc=$1 src=$2
fail() { echo "FAIL: $*"; exit 1; }
# the peaks are measured once, into a cache of this test's own
XDG_CACHE_HOME=$(mktemp -d /tmp/lz_env_cli_XXXXXX) || fail "mktemp"
export XDG_CACHE_HOME
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT

out=$("$lazyc" env) || fail "lazyc env exited $?"
n=$(grep -c '^LZ_' <<<"$out")
[ "$n" -ge 12 ] || fail "lazyc env listed $n variables"
grep -q '^LZ_CACHE_CAPACITY  *512  ' <<<"$out" || fail "no default 512 for LZ_CACHE_CAPACITY: $out"

# every variable, set to an accepted value, shows it marked as set
while read -r name good; do
  out=$(env "$name=$good" "$lazyc" env) || fail "$name=$good: lazyc env exited $?"
  grep -q "^$name  *$good \*" <<<"$out" || fail "$name=$good not shown as set: $(grep "^$name " <<<"$out")"
done <<'LIST'
LZ_EAGER 1
LZ_FUSION 0
LZ_BLOCKED 0
LZ_WINOGRAD 0
LZ_DNNL_CONV tune
LZ_CACHE_CAPACITY 7
LZ_POOL_MIB 0
LZ_HUGE_PAGES 1
LZ_FAULT_ALLOC 5
LZ_FAULT_KERNEL 5
LZ_TORCH_PYTHON /opt/py
LZ_BENCH_TORCH_SCRIPT /opt/ref.py
LZ_TORCH_OMP_WAIT_POLICY active
LZ_AUTOCAST_PRODUCTS rule
LIST

# the CPU's peaks and autocast's products
out=$("$lazyc" env) || fail "lazyc env exited $?"
# without AVX512_BF16 (make check-avx2's cap) oneDNN has no bf16 peak to time
grep -qE '^product peaks \(2048\^3, best of 4\): float32 sgemm [0-9.]+ GFLOP/s, bf16 matmul( [0-9.]+ GFLOP/s|: none \()' <<<"$out" ||
  fail "no peaks: $out"
grep -q '^autocast (LZ_AUTOCAST_PRODUCTS=measure): ' <<<"$out" || fail "no autocast line: $out"
grep -q "^product shapes measured on this machine: 0, 0 of them kept float32 ($XDG_CACHE_HOME/lazyc/product-choices-" <<<"$out" ||
  fail "no measured shapes line: $out"
# the kept peaks are the best seen: a pair measured under load (here 1
# GFLOP/s) is raised by the next measurement, a better one (1e6) stays
file=$(ls "$XDG_CACHE_HOME"/lazyc/product-choices-*.txt 2>/dev/null | head -1)
if grep -q '^-1 1 ' "$file" 2>/dev/null; then   # a bf16 peak (none under the AVX2 cap)
  for kept in 1000 1000000000; do
    sed -i -E "s/^(-1 [01]( 0)+) [0-9]+\$/\\1 $kept/" "$file"
    out=$("$lazyc" env) || fail "lazyc env exited $?"
    sgemm=$(sed -nE 's/^product peaks .*float32 sgemm ([0-9]+)\.[0-9] GFLOP.*/\1/p' <<<"$out")
    stored=$(sed -nE 's/^-1 0( 0)+ ([0-9]+)$/\2/p' "$file")
    if [ "$kept" = 1000 ]; then
      [ "${sgemm:-0}" -gt 1 ] && [ "${stored:-0}" -gt 1000 ] ||
        fail "a peak measured under load stood: printed $sgemm GFLOP/s, kept $stored MFLOP/s"
    else
      [ "$sgemm" = 1000000 ] && [ "$stored" = "$kept" ] ||
        fail "the best peak seen was replaced: printed $sgemm GFLOP/s, kept $stored MFLOP/s"
    fi
  done
fi
out=$(LZ_AUTOCAST_PRODUCTS=f32 "$lazyc" env) || fail "lazyc env exited $?"
grep -q '^autocast (LZ_AUTOCAST_PRODUCTS=f32): every product float32' <<<"$out" || fail "f32: $out"

# refused values: exit 1, a message naming the variable, the default shown
err=$(LZ_POOL_MIB=lots "$lazyc" env 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "LZ_POOL_MIB=lots: exit $rc, expected 1"
grep -q "LZ_POOL_MIB='lots' is not accepted" <<<"$err" || fail "no message naming LZ_POOL_MIB: $err"
out=$(LZ_EAGER=true "$lazyc" env 2>/dev/null)
grep -q '^LZ_EAGER  *0  ' <<<"$out" || fail "LZ_EAGER=true should show the default 0: $(grep '^LZ_EAGER' <<<"$out")"

"$lazyc" env --help | grep -q 'usage: lazyc env' || fail "lazyc env --help"
"$lazyc" env extra >/dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "lazyc env extra: exit $rc, expected 2"
help=$("$lazyc" --help)   # exit 2: no command ran
grep -q '^  env ' <<<"$help" || fail "lazyc --help does not list env"

# the table is the only reader of LZ_* variables
direct=$(grep -rnE 'getenv\("LZ_' "$src/src" "$src/tools" "$src/models" "$src/examples" 2>/dev/null)
[ -z "$direct" ] || fail "LZ_* read outside the settings table: $direct"
echo "test_env_cli: ok"
