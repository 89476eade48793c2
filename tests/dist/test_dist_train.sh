#!/usr/bin/env bash
# lazyc train under mpirun: 2 ranks learn with one execution per step and
# one voice (rank 0 prints and writes the summary and checkpoints); a
# 2-rank run stopped and resumed on 2 ranks equals the uninterrupted one
# bit for bit; its checkpoint resumes on 4 ranks and in one process alone;
# a global batch that the ranks cannot share equally is a usage error.
set -u
lazyc="$1"
. "$(dirname "$0")/../require_fmnist.sh" test_dist_train
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
# Under AddressSanitizer (make check-asan), Open MPI's own allocations still
# held at exit are reported as leaks (none is lazyc's); lazyc's leaks are
# the other tests' business (test_leaks, test_shutdown).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"
# mpirun passes the sanitizer's options on to every rank
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && root+=(-x "$v"); done
mpi() { local np=$1; shift; timeout 300 mpirun "${root[@]}" --oversubscribe -np "$np" -x OMP_NUM_THREADS=1 "$lazyc" "$@"; }
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1" >&2; fi; }

small=(train --data fashion-mnist --train-limit 1024 --test-limit 200 --batch 128)
mpi 2 "${small[@]}" --epochs 2 --save "$tmp/a.st" --summary "$tmp/a.json" >"$tmp/a.log" 2>&1
check "2 ranks: exit 0" '[ $? -eq 0 ]'
check "2 ranks: rank 0 alone prints" '[ $(grep -c "^epoch 2:" "$tmp/a.log") -eq 1 ] && grep -q "data-parallel: 2 ranks, each on 64 of every 128" "$tmp/a.log"'
check "2 ranks: one execution per step" 'grep -q "\"steps\": 16, \"executions\": 16," "$tmp/a.json"'
acc=$(sed -n 's/.*"test_accuracy": \([0-9.]*\), "wall_s".*/\1/p' "$tmp/a.json")
check "2 ranks learn: accuracy $acc > 0.5" 'awk -v a="$acc" "BEGIN { exit !(a > 0.5) }"'

mpi 2 "${small[@]}" --epochs 1 --schedule-epochs 2 --save "$tmp/b1.st" --summary "$tmp/b1.json" >/dev/null 2>&1
mpi 2 "${small[@]}" --epochs 2 --resume "$tmp/b1.st" --save "$tmp/b2.st" --summary "$tmp/b2.json" >"$tmp/b2.log" 2>&1
check "2 ranks: stopped and resumed equals uninterrupted, bit for bit" 'cmp -s "$tmp/a.st" "$tmp/b2.st"'

mpi 4 "${small[@]}" --epochs 2 --resume "$tmp/b1.st" --summary "$tmp/c.json" >"$tmp/c.log" 2>&1
check "the 2-rank checkpoint resumes on 4 ranks" '[ $? -eq 0 ] && grep -q "\"status\": \"done\"" "$tmp/c.json" && grep -q "each on 32 of every 128" "$tmp/c.log"'
"$lazyc" "${small[@]}" --epochs 2 --resume "$tmp/b1.st" --summary "$tmp/d.json" >/dev/null 2>&1
check "and in one process alone" '[ $? -eq 0 ] && grep -q "\"status\": \"done\"" "$tmp/d.json"'

mpi 3 "${small[@]}" --epochs 1 --summary "$tmp/e.json" >"$tmp/e.log" 2>&1
check "3 ranks cannot share a batch of 128: usage error" '[ $? -ne 0 ] && grep -q "not a multiple of the 3 ranks" "$tmp/e.log" && [ ! -e "$tmp/e.json" ]'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
