#!/usr/bin/env bash
# bench_mlp on the tiny MLP (batch 16, 24-32-6, no bias): every mode runs,
# lazy and captured run one execution per step with no compile after
# warm-up, captured launches the same 14 kernels per step every time, the
# PyTorch line is there when torch imports (with CI=true it must), and bad
# options exit 2.
# usage: test_bench_mlp.sh BENCH_MLP
set -uo pipefail
prog=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$prog" --batch 16 --in 24 --hidden 32 --classes 6 --bias 0 --steps 20 --warmup 3) ||
  fail "bench_mlp exited $?"
echo "$out"
# columns: mode, step us, pipelined, host us, ops, kernels, execs, compiles
row() { echo "$out" | awk -v m="$1" '$1 == m && !done {print; done = 1}'; }
for m in eager lazy captured; do
  [ -n "$(row $m)" ] || fail "no $m line"
done
read -r _ _ _ _ _ kern execs compiles _ <<< "$(row captured)"
[ "$execs" = 1.0 ] || fail "captured: $execs executions per step, expected 1.0"
[ "$compiles" = 0 ] || fail "captured: $compiles compiles in the timed steps"
[ "$kern" = 14.0 ] || fail "captured: $kern kernels per step, expected 14.0"
read -r _ _ _ _ _ _ execs compiles _ <<< "$(row lazy)"
[ "$execs" = 1.0 ] || fail "lazy: $execs executions per step, expected 1.0"
[ "$compiles" = 0 ] || fail "lazy: $compiles compiles in the timed steps"
if echo "$out" | grep -q '^torch .*n/a'; then
  [ "${CI:-}" = true ] && fail "CI=true but the PyTorch line says n/a"
else
  echo "$out" | grep -qE '^torch +[0-9.]+ ' || fail "no PyTorch line"
fi

"$prog" --modes 8 > /dev/null 2>&1
[ $? -eq 2 ] || fail "--modes 8 should exit 2"
"$prog" --bias 2 > /dev/null 2>&1
[ $? -eq 2 ] || fail "--bias 2 should exit 2"
echo "PASS"
