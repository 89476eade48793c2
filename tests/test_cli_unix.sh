#!/usr/bin/env bash
# lazyc behaves like a Unix tool (issue "Trust", item 7): --help exits 0 on
# stdout with the exit statuses, --version prints the version, `lazyc
# models` lists every model `lazyc train` accepts, nonsense option values
# exit 2 naming the option, and train's progress line fits 80 columns,
# shows no loss and no rate before a loss was read, and never "loss nan".
# usage: test_cli_unix.sh LAZYC
set -u
lazyc="$1"
. "$(dirname "$0")/check.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

"$lazyc" --help >out 2>err
check "lazyc --help exits 0 and prints to stdout" '[ $? -eq 0 ] && grep -q "^usage: lazyc" out && [ ! -s err ]'
check "lazyc --help lists the exit statuses" 'grep -q "^Exit status: 0 success; 1 the run failed" out && grep -q "3 lazyc train stopped at a NaN or Inf" out'
"$lazyc" --version >out 2>err
check "lazyc --version prints the version, exit 0" '[ $? -eq 0 ] && grep -Eq "^lazyc [0-9]+\.[0-9]+\.[0-9]+$" out'
"$lazyc" >out 2>err
check "lazyc alone is a usage error (exit 2, usage on stderr)" '[ $? -eq 2 ] && grep -q "^usage" err'
"$lazyc" frobnicate >out 2>err
check "an unknown command exits 2 naming it" '[ $? -eq 2 ] && grep -q "unknown command .frobnicate." err'
"$lazyc" train --help >out 2>err
check "lazyc train --help exits 0 with its exit statuses" \
    '[ $? -eq 0 ] && grep -q "^Exit status: 0 done" out && grep -q "3 a NaN or Inf loss or parameter stopped training" out'

# output lost to a full device is a failure with a message, as coreutils say
if [ -w /dev/full ]; then
    for args in "models" "--version" "--help" "env" "models --help"; do
        "$lazyc" $args >/dev/full 2>err
        rc=$?
        check "lazyc $args > /dev/full exits 1 with a write error (got $rc)" \
            '[ $rc -eq 1 ] && grep -q "write error on standard output" err'
    done
fi

# every model train accepts (from its own error message) is in `lazyc models`
"$lazyc" train --data fashion-mnist --model nosuch >out 2>err
accepted=$(sed -n "s/.*unknown --model 'nosuch' (\(.*\))/\1/p" err | sed 's/,/ /g; s/ or / /g')
check "train names the models it accepts ($accepted)" '[ -n "$accepted" ]'
"$lazyc" models --size smoke >out 2>err
check "lazyc models exits 0" '[ $? -eq 0 ]'
for m in $accepted; do
    check "lazyc models lists train's model $m" 'sed -n "/lazyc train --model/,\$p" out | grep -q "^$m  *train  *[0-9,]"'
done

# nonsense values: exit 2 and a message naming the option and the value
bad() {
    "$lazyc" train --data fashion-mnist "$@" >out 2>err
    local rc=$? opt=$1
    check "train $* exits 2 naming $opt (got $rc)" '[ $rc -eq 2 ] && grep -q -- "$opt" err && [ ! -e train-out ]'
}
bad --train-limit 0
bad --train-limit -5
bad --train-limit abc
bad --train-limit 1.5
bad --train-limit ""
bad --test-limit 0
bad --epochs 0
bad --batch 0
bad --batch 12x
bad --save-every 0
bad --max-steps -1
bad --schedule-epochs 0
bad --lr -1
bad --lr nan
bad --lr abc
bad --weight-decay inf
bad --epochs
bad --model
bad --optimizer adam
bad --schedule linear
bad --frob
bad --epochs 3 --schedule-epochs 2
check "the limit message says what is allowed" '"$lazyc" train --data fashion-mnist --train-limit 0 2>&1 | grep -q "train-limit needs an integer in \[1, "'

data=/usr/share/datasets/fashion-mnist
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
    echo "SKIPPED (part): $data is missing; the progress line is not checked"
else
    # 2 epochs of 20 steps on a terminal (script gives a pseudo-terminal)
    run=(train --data fashion-mnist --train-limit 2560 --test-limit 100 --batch 128 --epochs 2 --summary "$tmp/s.json")
    if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
        script -qec "$(printf '%q ' "$lazyc" "${run[@]}")" /dev/null >tty.out 2>&1
        check "the run on a terminal exits 0" '[ $? -eq 0 ] || { tail -3 tty.out >&2; false; }'
        tr '\r' '\n' <tty.out | sed 's/\x1b\[K//g' >lines
        check "every line on the terminal fits 80 columns ($(awk '{ if (length($0) > m) m = length($0) } END { print m }' lines) at most)" \
            '! awk "length(\$0) >= 80 { exit 1 }" lines'
        first=$(grep "^epoch 1/2 \[" lines | head -1)
        check "the first progress line shows no loss, no rate and no ETA: $first" \
            'echo "$first" | grep -q " 1/20 loss - - img/s ETA -$"'
        second=$(grep "^epoch 2/2 \[" lines | head -1)
        check "epoch 2's first line shows no loss yet but the run's rate and ETA: $second" \
            'echo "$second" | grep -Eq " 1/20 loss - [0-9]+ img/s ETA [0-9:]+$"'
        check "the terminal never shows loss nan" '! grep -Eqi "loss -?nan" lines'
        check "the bar keeps one width" '[ "$(grep -o "^epoch [12]/2 \[[#.]*\]" lines | awk "{ print length(\$3) }" | sort -u | wc -l)" -eq 1 ]'
    else
        echo "SKIPPED (part): script(1) is missing; the terminal progress line is not checked"
    fi
    "$lazyc" "${run[@]}" >log.out 2>&1
    check "the logged progress lines fit 80 columns and never show loss nan" \
        '[ $? -eq 0 ] && ! awk "length(\$0) >= 80 { exit 1 }" log.out && ! grep -Eqi "loss -?nan" log.out'
fi

check_done
