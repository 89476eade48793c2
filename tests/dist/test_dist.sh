#!/usr/bin/env bash
# Data-parallel training under mpirun (tests/dist/dist_check.c): parity with
# one process on 2 ranks, the same on 4 oversubscribed ranks, and faults
# that end the job with a clear error in bounded time instead of a hang.
set -u
check=$1
fail=0
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
# Under AddressSanitizer (make check-asan), Open MPI's own allocations still
# held at exit are reported as leaks (none is lazyc's); lazyc's leaks are
# the other tests' business (test_leaks, test_shutdown).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"
# mpirun passes the sanitizer's options on to every rank
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && root+=(-x "$v"); done
run() {  # run NP MODE [ENV=VALUE...]: mpirun's status, output in $out
  local np=$1 mode=$2
  shift 2
  local envs=()
  for e in "$@"; do envs+=(-x "$e"); done
  local t0=$SECONDS
  out=$(timeout 120 mpirun "${root[@]}" --oversubscribe -np "$np" "${envs[@]}" \
        -x OMP_NUM_THREADS=1 "$check" "$mode" 2>&1)
  status=$?
  elapsed=$((SECONDS - t0))
}
expect() {  # expect WHAT CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; echo "$out" | tail -20; fail=1; fi
}

run 2 parity
expect "2 ranks: SGD and AdamW match one process" '[ $status -eq 0 ] && [ $(grep -c "max rel err" <<<"$out") -eq 2 ]'
echo "$out" | grep "dist_check parity"
# small buckets: several all-reduces per step, started as gradients appear
run 2 parity LZ_DIST_BUCKET_KIB=1
expect "2 ranks, 1 KiB buckets" '[ $status -eq 0 ] && grep -q "sgd: 2 ranks, [2-9] bucket" <<<"$out"'
echo "$out" | grep "dist_check parity"
run 4 parity
expect "4 ranks (oversubscribed)" '[ $status -eq 0 ] && grep -q "sgd: 4 ranks" <<<"$out"'

run 2 mismatch
expect "different graphs fail the first step on every rank" \
  '[ $(grep -c "the ranks recorded different graphs" <<<"$out") -eq 2 ] && [ $elapsed -lt 60 ]'
run 2 stuck LZ_DIST_TIMEOUT=3
expect "a rank that stops communicating: the other fails after LZ_DIST_TIMEOUT" \
  '[ $status -ne 0 ] && grep -q "no answer from the other ranks within 3 s" <<<"$out" && [ $elapsed -lt 40 ]'
run 2 die
expect "a killed rank ends the job with an error" \
  '[ $status -ne 0 ] && [ $status -ne 124 ] && grep -qi "signal 9\|killed" <<<"$out" && [ $elapsed -lt 60 ]'
# one rank's step fails (an injected kernel fault): it says so and exits 1,
# and mpirun ends the other, which waits in the step's all-reduce
t0=$SECONDS
out=$(timeout 120 mpirun "${root[@]}" --oversubscribe -x OMP_NUM_THREADS=1 -x LZ_DIST_TIMEOUT=60 \
      -np 1 "$check" fail : -np 1 env LZ_FAULT_KERNEL=40 "$check" fail 2>&1)
status=$?
elapsed=$((SECONDS - t0))
expect "a rank whose step fails ends the job, before the timeout" \
  '[ $status -ne 0 ] && [ $status -ne 124 ] && grep -q "dist_check rank 1: .*injected" <<<"$out" && [ $elapsed -lt 50 ]'
exit $fail
