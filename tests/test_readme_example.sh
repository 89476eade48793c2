#!/usr/bin/env bash
# The README's training example, from the README's own text: its first C block must
# be examples/train_fmnist.c verbatim; the block is compiled with -Wall -Wextra
# -Werror against the built library and run on 2,048 Fashion-MNIST images:
# one epoch, then a second run that resumes from the checkpoint. Each epoch
# must run one execution per step and score far above chance (10%).
# usage: test_readme_example.sh README.md EXAMPLE.c INCLUDE_DIR LIBLAZYC.so
set -u
readme=$1 example=$2 include=$3
lib=$(cd "$(dirname "$4")" && pwd)/$(basename "$4")   # absolute: the rpath and the run are elsewhere
cc=${CC:-cc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the README's first C block: the lines between its ```c and the next ```
awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on' "$readme" > "$tmp/readme_example.c"
[ -s "$tmp/readme_example.c" ] || { echo "FAIL: no \`\`\`c block in $readme"; exit 1; }
if ! diff "$tmp/readme_example.c" "$example"; then
    echo "FAIL: the C block of $readme differs from $example (diff above: README < > example)"
    exit 1
fi
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror -I"$include" "$tmp/readme_example.c" "$lib" \
    -Wl,-rpath,"$(dirname "$lib")" -o "$tmp/train_fmnist" \
    || { echo "FAIL: the README's example does not compile"; exit 1; }

. "$(dirname "$0")/require_fmnist.sh" test_readme_example
cd "$tmp" || exit 1
failed=0
check() { if eval "$2"; then echo "ok: $1"; else failed=1; echo "FAIL: $1"; fi; }
env -u OMP_WAIT_POLICY ./train_fmnist "$data" 2048 1 > run1.log 2>&1
check "the first run exits 0" '[ $? -eq 0 ]'
env -u OMP_WAIT_POLICY ./train_fmnist "$data" 2048 2 > run2.log 2>&1
check "the resumed run exits 0" '[ $? -eq 0 ]'
cat run1.log run2.log
check "the first run trains epoch 1 in 32 steps, one execution each" \
    'grep -q "^epoch 1: .*(32 steps, 32 executions)$" run1.log'
check "it writes the checkpoint" '[ -s fmnist.safetensors ]'
check "the second run resumes after epoch 1 and trains epoch 2 alone" \
    'grep -q "^resumed from fmnist.safetensors after epoch 1$" run2.log &&
     ! grep -q "^epoch 1:" run2.log && grep -q "^epoch 2: .*(32 steps, 32 executions)$" run2.log'
acc=$(sed -n 's/^epoch 2: .*test accuracy \([0-9.]*\) .*/\1/p' run2.log)
check "test accuracy after epoch 2 ($acc) is above 0.6" 'awk -v a="$acc" "BEGIN { exit !(a > 0.6) }"'
exit $failed
