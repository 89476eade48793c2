#!/usr/bin/env bash
# The convolution models' captured step with the rules' choices (the
# default, LZ_DNNL_CONV=1) against the choices LZ_DNNL_CONV=tune timed once
# and read back from its file (conv_choices.c), at the ISA oneDNN picks and
# capped to AVX2. One process per cell, the two configurations alternating
# (A B, then B A on the next round) so that a change in the machine's load
# falls on both. The choices are timed first, by one tune process per model
# and ISA, into a private cache directory (never the user's).
#
# usage: bench/conv_choices_ab.sh LAZYC_BINARY [ROUNDS] [MODELS] [SIZE] [STEPS] > table.csv
# prints CSV rows: model,isa,config,round,captured_ms (and on stderr, the
# number of choices each ISA's file holds after the first pass)
set -u
lazyc="${1:?usage: conv_choices_ab.sh LAZYC_BINARY [ROUNDS] [MODELS] [SIZE]}"
rounds="${2:-2}"
models="${3:-resnet18,resnet50,resnext50_32x4d,alexnet,mobilenet_v2,mnasnet1_0,vgg16,squeezenet1_1}"
size="${4:-bench}"
steps="${5:-3}"
cache="$(mktemp -d /tmp/lz_conv_choices_ab.XXXXXX)"
out="$(mktemp -d /tmp/lz_conv_choices_out.XXXXXX)"
trap 'rm -rf "$cache" "$out"' EXIT

# one cell: prints the captured step's median in ms
cell() {   # isa config model
    local env=(XDG_CACHE_HOME="$cache")
    [ "$1" = avx2 ] && env+=(DNNL_MAX_CPU_ISA=AVX2)
    [ "$2" = tuned ] && env+=(LZ_DNNL_CONV=tune)
    env "${env[@]}" "$lazyc" bench --size "$size" --models "$3" --modes captured --steps "$steps" --out "$out" \
        >/dev/null 2>&1 || { echo "nan"; return; }
    awk -F, -v m="$3" '$1 == m { print $6 }' "$out/bench.csv"
}

echo "model,isa,config,round,captured_ms"
IFS=, read -r -a list <<< "$models"
for isa in native avx2; do
    for m in "${list[@]}"; do   # time the choices once: later processes read them
        cell "$isa" tuned "$m" >/dev/null
    done
done
for f in "$cache"/lazyc/conv-choices-*.txt; do
    echo "$(sed -n 2p "$f"): $(($(wc -l < "$f") - 2)) choices" >&2
done
for r in $(seq 1 "$rounds"); do
    for isa in native avx2; do
        for m in "${list[@]}"; do
            if [ $((r % 2)) = 1 ]; then order="default tuned"; else order="tuned default"; fi
            for c in $order; do echo "$m,$isa,$c,$r,$(cell "$isa" "$c" "$m")"; done
        done
    done
done
