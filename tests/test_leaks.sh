#!/usr/bin/env bash
# Leak check under valgrind memcheck:
#  - 100 lazy and 100 captured steps of a small MLP, then lz_shutdown (the
#    soak program with a small model and its memory check off: valgrind's
#    memory is its own);
#  - test_shutdown, when given: dropout, layer norm, a convolution's
#    backward (the CPU backend's scratch memory) and captured functions,
#    each followed by lz_shutdown;
#  - test_fault, when given: every injected fault, host allocations
#    included, with its recovery (a failure path that leaks shows here).
#    Its older cases keep some handles to the end, so for it only bytes
#    definitely or indirectly lost fail (LEAK_KINDS).
#  - test_capture_oom, when given: every host allocation of a captured
#    run failing in turn, then lz_shutdown (nothing may stay reachable).
#  - test_step_oom, when given: every host allocation of the barrier
#    (engine/step.c) failing in turn, then lz_shutdown (likewise).
# Any byte definitely or indirectly lost fails, and so does any block still
# reachable at exit, except libgomp's and oneDNN's process-lifetime state
# (tests/valgrind.supp): a program that freed its handles and called
# lz_shutdown must leave nothing of lazyc's behind.
#
# Usage: test_leaks.sh SOAK_BINARY [TEST_SHUTDOWN_BINARY [TEST_FAULT_BINARY
#                      [TEST_CAPTURE_OOM_BINARY [TEST_STEP_OOM_BINARY]]]]
# Without valgrind the test is skipped (exit 77, ctest's SKIP_RETURN_CODE),
# except under CI=true, where a missing valgrind is a failure.
set -u
soak="${1:?usage: test_leaks.sh SOAK_BINARY [TEST_SHUTDOWN_BINARY [TEST_FAULT_BINARY [TEST_CAPTURE_OOM_BINARY [TEST_STEP_OOM_BINARY]]]]}"
shutdown_test="${2:-}"
fault_test="${3:-}"
capture_oom_test="${4:-}"
step_oom_test="${5:-}"
here="$(cd "$(dirname "$0")" && pwd)"

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: valgrind is not installed, and CI=true requires it (scripts/setup.sh)" >&2
        exit 1
    fi
    echo "SKIPPED: test_leaks: valgrind is not installed (scripts/setup.sh installs it)"
    exit 77
fi

# The programs would re-execute themselves to set this, and valgrind does
# not follow that exec.
export OMP_WAIT_POLICY=passive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

check() {
    echo "== valgrind $*"
    valgrind --leak-check=full --show-leak-kinds="${LEAK_KINDS:-all}" \
             --errors-for-leak-kinds="${LEAK_KINDS:-all}" \
             --error-exitcode=1 --suppressions="$here/valgrind.supp" --log-file="$log" "$@"
    local rc=$?
    grep -E "definitely lost|indirectly lost|possibly lost|still reachable|ERROR SUMMARY" "$log"
    if [ "$rc" -ne 0 ]; then
        echo "FAILED: test_leaks: $1 under valgrind exited $rc; valgrind's log:" >&2
        cat "$log" >&2
        exit 1
    fi
    # without a leak report valgrind did not check what this test means to
    if ! grep -qE "LEAK SUMMARY|All heap blocks were freed" "$log"; then
        echo "FAILED: test_leaks: no leak report in valgrind's log for $1" >&2
        cat "$log" >&2
        exit 1
    fi
}

check "$soak" --steps 100 --warmup 0 --max-growth-kib 0 --batch 8 --in 32 --hidden 16 --classes 4
if [ -n "$shutdown_test" ]; then
    # test_shutdown reads nothing from its working directory, but run it
    # where ctest runs the C tests
    (cd "$here" && check "$shutdown_test") || exit 1
fi
if [ -n "$fault_test" ]; then
    (cd "$here" && LEAK_KINDS=definite,indirect check "$fault_test") || exit 1
fi
if [ -n "$capture_oom_test" ]; then
    (cd "$here" && check "$capture_oom_test") || exit 1
fi
if [ -n "$step_oom_test" ]; then
    (cd "$here" && check "$step_oom_test") || exit 1
fi
echo "test_leaks: nothing lost, nothing of lazyc's still reachable"
