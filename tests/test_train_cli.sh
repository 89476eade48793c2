#!/usr/bin/env bash
# lazyc train on real Fashion-MNIST: a short run must learn (test accuracy
# far above the 10% of chance), a resumed run must equal an uninterrupted
# one bit for bit (cnn and resnet18), resnet18 must run one execution per
# step, and broken data must give a clear error and exit 2.
set -u
lazyc="$1"
. "$(dirname "$0")/require_fmnist.sh" test_train_cli
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check.sh"

# 1 epoch on 10,000 images, tested on 2,000: 75% cannot happen by chance
"$lazyc" train --data fashion-mnist --epochs 1 --train-limit 10000 --test-limit 2000 \
    --summary "$tmp/sum.json" >"$tmp/log" 2>&1
check "the short run exits 0" '[ $? -eq 0 ]'
acc=$(sed -n 's/.*"test_accuracy": \([0-9.]*\), "wall_s".*/\1/p' "$tmp/sum.json")
echo "test accuracy after 1 epoch on 10000 images: $acc"
check "accuracy $acc > 0.75" 'awk -v a="$acc" "BEGIN { exit !(a > 0.75) }"'
check "the summary names the model and epoch 1" 'grep -q "\"model\": \"cnn\", \"epochs\": \[{\"epoch\": 1" "$tmp/sum.json"'
check "the cnn run takes one execution per step" 'grep -q "\"steps\": 78, \"executions\": 78," "$tmp/sum.json"'

# 2 epochs in one run == 1 epoch (of a 2-epoch schedule), save, resume
small=(--data fashion-mnist --train-limit 1024 --test-limit 200 --batch 128)
"$lazyc" train "${small[@]}" --epochs 2 --save "$tmp/a.st" --summary "$tmp/a.json" >/dev/null 2>&1
"$lazyc" train "${small[@]}" --epochs 1 --schedule-epochs 2 --save "$tmp/b1.st" --summary "$tmp/b1.json" >/dev/null 2>&1
"$lazyc" train "${small[@]}" --epochs 2 --resume "$tmp/b1.st" --save "$tmp/b2.st" --summary "$tmp/b2.json" >/dev/null 2>&1
check "both checkpoints exist" '[ -s "$tmp/a.st" ] && [ -s "$tmp/b2.st" ]'
check "resumed parameters, buffers and optimizer state equal the uninterrupted run's bit for bit" \
    'cmp -s "$tmp/a.st" "$tmp/b2.st"'

# resnet18 (the 1x28x28 ResNet-18 of models/resnet.c) on a tiny subset: it
# runs captured (one execution per step) with a finite loss; its checkpoint
# holds torchvision's state_dict names (BN running statistics included) and
# resumes bit for bit
"$lazyc" train --data fashion-mnist --model resnet18 --epochs 1 --batch 32 --train-limit 256 \
    --test-limit 256 --summary "$tmp/r.json" >"$tmp/rlog" 2>&1
check "the resnet18 run exits 0" '[ $? -eq 0 ] || { tail -5 "$tmp/rlog" >&2; false; }'
rloss=$(sed -n 's/.*"train_loss": \([-0-9.einfa]*\).*/\1/p' "$tmp/r.json")
echo "resnet18, 1 epoch of 8 steps on 256 images: train loss $rloss, $(grep -o '"steps": [0-9]*, "executions": [0-9]*' "$tmp/r.json")"
check "resnet18's loss $rloss is finite" 'awk -v l="$rloss" "BEGIN { exit !(l + 0 == l && l > 0 && l < 100) }"'
check "resnet18 takes one execution per step" 'grep -q "\"model\": \"resnet18\".*\"steps\": 8, \"executions\": 8," "$tmp/r.json"'
rsmall=(--data fashion-mnist --model resnet18 --train-limit 32 --test-limit 16 --batch 16)
"$lazyc" train "${rsmall[@]}" --epochs 2 --save "$tmp/ra.st" --summary "$tmp/ra.json" >/dev/null 2>&1
"$lazyc" train "${rsmall[@]}" --epochs 1 --schedule-epochs 2 --save "$tmp/rb1.st" --summary "$tmp/rb1.json" >/dev/null 2>&1
"$lazyc" train "${rsmall[@]}" --epochs 2 --resume "$tmp/rb1.st" --save "$tmp/rb2.st" --summary "$tmp/rb2.json" >/dev/null 2>&1
check "the resnet18 checkpoint holds the 1-channel stem and BN running statistics by torchvision's names" \
    'grep -aq "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":\[64,1,3,3\]" "$tmp/ra.st" &&
     grep -aq "\"layer4.1.bn2.running_var\"" "$tmp/ra.st" && grep -aq "\"fc.weight\"" "$tmp/ra.st"'
check "a resumed resnet18 run equals the uninterrupted one bit for bit" \
    '[ -s "$tmp/ra.st" ] && cmp -s "$tmp/ra.st" "$tmp/rb2.st"'
"$lazyc" train "${small[@]}" --model resnet18 --resume "$tmp/a.st" >"$tmp/err" 2>&1
check "resuming resnet18 from a cnn checkpoint exits 2" '[ $? -eq 2 ] && grep -q "another model" "$tmp/err"'
"$lazyc" train --data fashion-mnist --model resnet50 >"$tmp/err" 2>&1
check "an unknown --model exits 2 and lists the valid ones" '[ $? -eq 2 ] && grep -q "(cnn or resnet18)" "$tmp/err"'
"$lazyc" train --data fashion-mnist --optimizer lion >"$tmp/err" 2>&1
check "an unknown --optimizer exits 2 and lists the valid ones" '[ $? -eq 2 ] && grep -q "(adamw or sgd)" "$tmp/err"'

# the optimizer's state keeps its names and order in the checkpoint (the
# file is written in that order, so a checkpoint stays byte-compatible)
opt_names() { grep -ao '"optimizer\.[a-z_]*\.\?[0-9]*"' "$1" | tr -d '"' | sed 's/^optimizer\.//' | tr '\n' ' '; }
"$lazyc" train --data fashion-mnist --optimizer sgd --epochs 1 --train-limit 256 --test-limit 100 \
    --save "$tmp/sgd.st" --summary "$tmp/sgd.json" >/dev/null 2>&1
n_bufs=$(opt_names "$tmp/sgd.st" | grep -o momentum_buffer | wc -l)
want_sgd="$(for i in $(seq 0 $((n_bufs - 1))); do printf 'momentum_buffer.%d ' "$i"; done)started "
check "sgd's checkpoint holds momentum_buffer.0..$((n_bufs - 1)) then started" \
    '[ "$n_bufs" -gt 0 ] && [ "$(opt_names "$tmp/sgd.st")" = "$want_sgd" ]'
n_adam=$(opt_names "$tmp/a.st" | grep -o "exp_avg\." | wc -l)
want_adam="$(for i in $(seq 0 $((n_adam - 1))); do printf 'exp_avg.%d exp_avg_sq.%d step.%d ' "$i" "$i" "$i"; done)"
check "adamw's checkpoint holds exp_avg, exp_avg_sq and step per parameter, in order" \
    '[ "$n_adam" -eq "$n_bufs" ] && [ "$(opt_names "$tmp/a.st")" = "$want_adam" ]'

# broken data: exit status 2 and a message naming the problem
"$lazyc" train --data fashion-mnist --data-dir "$tmp/nowhere" >"$tmp/err" 2>&1
check "a missing data directory exits 2" '[ $? -eq 2 ] && grep -q "nowhere" "$tmp/err"'
mkdir "$tmp/broken"
cp "$data"/t10k-* "$tmp/broken/"
head -c 5000 "$data/train-images-idx3-ubyte.gz" >"$tmp/broken/train-images-idx3-ubyte.gz"
cp "$data/train-labels-idx1-ubyte.gz" "$tmp/broken/"
"$lazyc" train --data fashion-mnist --data-dir "$tmp/broken" >"$tmp/err" 2>&1
check "a truncated image file exits 2" '[ $? -eq 2 ] && grep -q "train-images-idx3-ubyte.gz" "$tmp/err"'
printf 'not an idx file' | gzip >"$tmp/broken/train-images-idx3-ubyte.gz"
"$lazyc" train --data fashion-mnist --data-dir "$tmp/broken" >"$tmp/err" 2>&1
check "a corrupt image file exits 2" '[ $? -eq 2 ] && grep -q "magic" "$tmp/err"'
"$lazyc" train --data fashion-mnist --epochs 0 >"$tmp/err" 2>&1
check "a bad option exits 2" '[ $? -eq 2 ]'

check_done
