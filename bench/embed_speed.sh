#!/bin/bash
# A program that links lazyc runs as fast with no environment variable as
# with OMP_WAIT_POLICY=passive (what the lazyc CLI used to re-execute itself
# with): bench_mlp (a program linking liblazyc) is run both ways, runs
# interleaved, alone and while another process spins on one core, and the
# median lazy and captured step of each is printed with the ratio.
#
#   bench/embed_speed.sh [BUILD_DIR] [REPS] [-- bench_mlp options]
#
# BUILD_DIR defaults to build, REPS to 5; the default MLP is 784-256-10,
# batch 64 (its matmuls run as OpenMP parallel regions).
set -u
build=${1:-build}
reps=${2:-5}
shift $(( $# >= 2 ? 2 : $# ))
[ "${1:-}" = "--" ] && shift
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--steps 200 --warmup 10)
prog="$build/bench_mlp"
[ -x "$prog" ] || { echo "embed_speed: no $prog (build it first)" >&2; exit 2; }

median() { sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# one run: "lazy_us captured_us"
run() {
    "$@" "$prog" --modes 6 --torch 0 "${opts[@]}" |
        awk '$1 == "lazy" && l == "" {l = $2} $1 == "captured" && c == "" {c = $2} END {print l, c}'
}

spinner=
cleanup() { [ -n "$spinner" ] && kill "$spinner" 2>/dev/null; }
trap cleanup EXIT

echo "bench_mlp ${opts[*]}; $reps runs per setting, interleaved; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %-9s %12s %12s\n' "other load" "policy" "lazy us" "captured us"
for load in none spinner; do
    if [ $load = spinner ]; then
        (while :; do :; done) &
        spinner=$!
    fi
    : > /tmp/embed_speed.$$.unset
    : > /tmp/embed_speed.$$.passive
    for ((r = 0; r < reps; r++)); do
        run env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT >> /tmp/embed_speed.$$.unset
        run env OMP_WAIT_POLICY=passive >> /tmp/embed_speed.$$.passive
    done
    for pol in unset passive; do
        f=/tmp/embed_speed.$$.$pol
        printf '%-22s %-9s %12s %12s\n' "$([ $load = none ] && echo none || echo 'one spinning process')" \
            "$pol" "$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f2 "$f" | median)"
    done
    for k in 1 2; do
        u=$(cut -d' ' -f$k /tmp/embed_speed.$$.unset | median)
        p=$(cut -d' ' -f$k /tmp/embed_speed.$$.passive | median)
        echo "  $([ $k = 1 ] && echo lazy || echo captured): unset / passive = $(awk -v u="$u" -v p="$p" 'BEGIN {printf "%.2f", u / p}')"
    done
    rm -f /tmp/embed_speed.$$.unset /tmp/embed_speed.$$.passive
    cleanup
    spinner=
done
