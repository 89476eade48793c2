#!/usr/bin/env bash
# The committed parity fixtures (tests/fixtures) must be exactly what
# tests/reference/gen_fixtures.py writes: regenerate them into a temporary
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

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! "$py" "$here/reference/gen_fixtures.py" "$tmp"; then
    echo "FAILED: gen_fixtures.py did not run" >&2
    exit 1
fi
if ! diff -r "$here/fixtures" "$tmp" >"$tmp.diff" 2>&1; then
    echo "FAILED: tests/fixtures differ from what gen_fixtures.py writes:" >&2
    head -40 "$tmp.diff" >&2
    echo "Regenerate them: /usr/bin/python3 tests/reference/gen_fixtures.py" >&2
    rm -f "$tmp.diff"
    exit 1
fi
rm -f "$tmp.diff"
echo "fixtures fresh: $(wc -l <"$here/fixtures/INDEX") cases byte-identical to gen_fixtures.py output"
exit 0
