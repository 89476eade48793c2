#!/usr/bin/env bash
# examples/char_lm.c on a generated text: a few AdamW steps must lower the
# loss, the sample must be printed, and bad arguments must fail cleanly.
# usage: test_char_lm.sh CHAR_LM
set -uo pipefail
bin=$1
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for i in $(seq 1 300); do
  echo "the quick brown fox jumps over the lazy dog $((i % 7)) times."
done > "$tmp/text.txt"

"$bin" "$tmp/text.txt" 30 40 > "$tmp/out.txt" || fail "char_lm exited $?: $(cat "$tmp/out.txt")"
out=$(cat "$tmp/out.txt")
echo "$out"
grep -q '^[0-9]* characters, vocabulary [0-9]*$' <<<"$out" || fail "no vocabulary line"
awk '/ loss / { v = $NF + 0; if (n == 0) first = v; last = v; n++ }
     END {
       if (n < 3) { print "FAIL: " n " loss lines"; exit 1 }
       if (!(first > 2.5 && last < 0.7 * first)) { print "FAIL: loss " first " -> " last " did not fall"; exit 1 }
       print "loss " first " -> " last
     }' <<<"$out" || exit 1
# the sample: 40 characters and a newline after "sample:" (the text has no
# colon, so the line "sample:" is the program's)
bytes=$(sed -n '/^sample:$/,$p' "$tmp/out.txt" | tail -n +2 | wc -c)
[ "$bytes" -eq 41 ] || fail "sample of $bytes bytes, expected 40 and a newline"

"$bin" >/dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "no arguments: exit $rc, expected 2"
err=$("$bin" "$tmp/missing.txt" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] && grep -q 'missing.txt: cannot open' <<<"$err" || fail "missing file: exit $rc, '$err'"
echo "short" > "$tmp/short.txt"
"$bin" "$tmp/short.txt" >/dev/null 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "short file: exit $rc, expected 1"
echo "test_char_lm: ok"
