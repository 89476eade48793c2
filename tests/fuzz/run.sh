#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan + libFuzzer) and runs
# each for SECONDS (default 60) on a copy of its seed corpus. Fails if any
# harness reports a crash, a sanitizer error, a leak, a hang or an
# out-of-memory. Exits 77 (skip) when clang or libFuzzer is missing, except
# under CI=true, where that is a failure.
#
#   bash tests/fuzz/run.sh [SECONDS]
#   BUILD=build-fuzz JOBS=1 HARNESSES="fuzz_idx" bash tests/fuzz/run.sh 300
#
# A crash leaves its input in $BUILD/fuzz/artifacts/; replay it with
#   $BUILD/fuzz/<harness> <file>
# and add it to tests/fuzz/regressions/<harness>/ (test_fuzz_regressions
# replays every file there without clang).
set -u -o pipefail

SECONDS_EACH=${1:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build-fuzz}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
OUT="$BUILD/fuzz"
CC=${FUZZ_CC:-clang}
HARNESSES=${HARNESSES:-"fuzz_safetensors fuzz_idx fuzz_ops fuzz_capture_diff fuzz_autocast_diff"}
JOBS=${JOBS:-2}

skip() {
  echo "run.sh: $*" >&2
  if [ "${CI:-}" = true ]; then
    echo "run.sh: CI=true: a missing fuzzing toolchain is a failure" >&2
    exit 1
  fi
  echo "run.sh: skipped (install clang, libclang-rt-14-dev and libomp-dev)" >&2
  exit 77
}

command -v "$CC" > /dev/null || skip "no $CC on PATH"
mkdir -p "$OUT/obj"
probe="$OUT/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$probe"
"$CC" -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" > "$OUT/probe.log" 2>&1 ||
  skip "$CC cannot link -fsanitize=fuzzer,address,undefined (libFuzzer missing?): $(head -c 300 "$OUT/probe.log")"

# clang generates OpenMP code only for its own runtime (libomp, from
# libomp-dev); with -fopenmp=libgomp it would ignore the pragmas and fuzz a
# serial build. oneDNN keeps its libgomp; the two runtimes coexist.
echo '#include <omp.h>
int main(void) { return omp_get_max_threads() < 1; }' > "$OUT/omp.c"
"$CC" -fopenmp "$OUT/omp.c" -o "$OUT/omp" > "$OUT/omp.log" 2>&1 ||
  skip "$CC -fopenmp does not link (install libomp-dev): $(head -c 300 "$OUT/omp.log")"

SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all)
# The library is held to -Werror under clang too: clang warns about things
# gcc does not (a bitwise | in a condition, for one). Not for a loop that
# `#pragma omp simd` asks to vectorise and -O1 with sanitizers does not.
CFLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fopenmp
        -Wall -Wextra -Werror -Wno-pass-failed -I"$ROOT/include" -I"$ROOT/src")
LIBS=(-ldnnl -lz -lm -lpthread -fopenmp)

# The library, instrumented for coverage (fuzzer-no-link) and sanitizers;
# objects are rebuilt only when a source or header is newer.
echo "== building the library with $CC (ASan, UBSan, coverage) into $OUT"
newest_header=$(find "$ROOT/src" "$ROOT/include" -name '*.h' -printf '%T@\n' | sort -n | tail -1)
objs=()
pids=()
fail=0
for src in $(cd "$ROOT" && find src -name '*.c' | sort); do
  obj="$OUT/obj/$(echo "${src%.c}" | tr / _).o"
  objs+=("$obj")
  if [ -f "$obj" ] && [ "$obj" -nt "$ROOT/$src" ] &&
     awk -v o="$(stat -c %Y "$obj")" -v h="$newest_header" 'BEGIN { exit !(o >= h) }'; then
    continue
  fi
  "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link -c "$ROOT/$src" -o "$obj" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}" || fail=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail = 0 ] || { echo "run.sh: building the library failed" >&2; exit 1; }
rm -f "$OUT/liblazyc_fuzz.a"
ar rcs "$OUT/liblazyc_fuzz.a" "${objs[@]}"

for h in $HARNESSES; do
  echo "== building $h"
  "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer "$ROOT/tests/fuzz/$h.c" "$OUT/liblazyc_fuzz.a" \
    "${LIBS[@]}" -o "$OUT/$h" || { echo "run.sh: building $h failed" >&2; exit 1; }
done

# halt_on_error and abort_on_error make the first report end the run;
# detect_leaks: LSan at exit and, through libFuzzer, per input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The runtime's threads must not spin on the shared CI cores.
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

status=0
mkdir -p "$OUT/artifacts"
for h in $HARNESSES; do
  corpus="$OUT/corpus/$h"
  mkdir -p "$corpus"
  # a copy, so the run's new inputs never grow the repository
  cp -n "$ROOT/tests/fuzz/corpus/$h/"* "$corpus/" 2> /dev/null || true
  regs="$ROOT/tests/fuzz/regressions/$h"
  [ -d "$regs" ] && cp -n "$regs/"* "$corpus/" 2> /dev/null || true
  log="$OUT/$h.log"
  echo "== running $h for ${SECONDS_EACH}s (log: $log)"
  dict=()
  [ -f "$ROOT/tests/fuzz/$h.dict" ] && dict=(-dict="$ROOT/tests/fuzz/$h.dict")
  "$OUT/$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 "${dict[@]}" -artifact_prefix="$OUT/artifacts/$h-" "$corpus" > "$log" 2>&1
  rc=$?
  grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb' "$log" |
    awk '!seen[$0]++' | sed "s/^/   $h: /"
  if [ $rc -ne 0 ]; then
    echo "run.sh: $h FAILED (exit $rc); the end of its log:" >&2
    # the report: the first sanitizer or harness message and its stack
    grep -m1 -A25 -E 'ERROR: |runtime error:|^fuzz_[a-z]+: ' "$log" | grep -v 'in fuzzer::' >&2
    ls "$OUT/artifacts/$h-"* 2> /dev/null | sed 's/^/run.sh: input: /' >&2
    status=1
  fi
done
[ $status = 0 ] && echo "run.sh: every harness ran ${SECONDS_EACH}s clean"
exit $status
