#!/usr/bin/env bash
# The committed parity fixtures (tests/fixtures) must be exactly what the
# generators in tests/reference/ write: regenerate them into a temporary
# directory with Debian's PyTorch and compare byte for byte.
#
# Without PyTorch the test is skipped (exit 77, ctest's SKIP_RETURN_CODE),
# except under CI=true, where the reference must be installed and a missing
# torch is a failure.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
py="${LZ_TORCH_PYTHON:-/usr/bin/python3}"

if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: PyTorch is not importable by $py, and CI=true requires the reference" >&2
        echo "        (install python3-torch: scripts/setup.sh)" >&2
        exit 1
    fi
    echo "************************************************************************"
    echo "SKIPPED: test_fixtures_fresh: PyTorch is not importable by $py;"
    echo "SKIPPED: cannot check that tests/fixtures come from gen_fixtures.py"
    echo "SKIPPED: (install python3-torch: scripts/setup.sh)"
    echo "************************************************************************"
    exit 77
fi

# gen_fixtures.py writes tests/fixtures/*; every other generator
# tests/reference/gen_NAME.py writes its own folder tests/fixtures/NAME/.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
cases=0
for gen in "$here"/reference/gen_*.py; do
    name="$(basename "$gen" .py)"
    name="${name#gen_}"
    if [ "$name" = fixtures ]; then
        ref="$here/fixtures"; out="$tmp/fixtures"; excl=()
        for d in "$here"/fixtures/*/; do [ -d "$d" ] && excl+=(--exclude "$(basename "$d")"); done
    else
        ref="$here/fixtures/$name"; out="$tmp/$name"; excl=()
    fi
    mkdir -p "$out"
    if ! "$py" "$gen" "$out"; then
        echo "FAILED: $(basename "$gen") did not run" >&2
        status=1
        continue
    fi
    if ! diff -r "${excl[@]}" "$ref" "$out" >"$tmp/diff" 2>&1; then
        echo "FAILED: $ref differs from what $(basename "$gen") writes:" >&2
        head -40 "$tmp/diff" >&2
        echo "Regenerate them: /usr/bin/python3 tests/reference/$(basename "$gen")" >&2
        status=1
        continue
    fi
    cases=$((cases + $(find "$out" -name '*.lzf' | wc -l)))
done
[ "$status" = 0 ] && echo "fixtures fresh: $cases cases byte-identical to their generators' output"
exit "$status"
