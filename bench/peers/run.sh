#!/usr/bin/env bash
# The peers' benchmark in one command: `lazyc bench --json` on the zoo models
# asked for, then every peer runner (bench/peers/run_peers.py: each cell in
# its own process with a time limit), then the merged table
# (bench/peers/table.py) on stdout and in OUT/peers.md and OUT/merged.json.
#
#   bench/peers/run.sh [--size smoke|bench] [--models a,b] [--systems a,b]
#                      [--timeout S] [--budget S] [--steps N] [--warmup N]
#                      [--lazyc PATH] [--out DIR]
#
# Defaults: a 300 s limit per cell and a 2100 s budget for the peers (no
# cell starts after it), so a run ends within about 45 minutes on 2 cores
# (lazyc bench at smoke size is a few minutes); --budget 0 means no budget.
# --lazyc: the lazyc binary (default build/lazyc, else the first
# build*/lazyc); "none" skips lazyc's side. The Python environments come
# from scripts/pyenv.sh (made once, several GB). Exit status: the merge's
# (0 when the table was written, failed cells included), 2 on a usage error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
size=smoke models="" systems="" timeout=300 budget=2100 steps=3 warmup=2 lazyc="" out=bench-out/peers
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "run.sh: $1 needs a value (see the top of $0)" >&2; exit 2; }
  case "$1" in
    --size) size="$2" ;;
    --models) models="$2" ;;
    --systems) systems="$2" ;;
    --timeout) timeout="$2" ;;
    --budget) budget="$2" ;;
    --steps) steps="$2" ;;
    --warmup) warmup="$2" ;;
    --lazyc) lazyc="$2" ;;
    --out) out="$2" ;;
    *) echo "run.sh: unknown option '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
if [ -z "$lazyc" ]; then
  for c in "$root"/build/lazyc "$root"/build*/lazyc; do
    [ -x "$c" ] && { lazyc="$c"; break; }
  done
fi
mkdir -p "$out"
peer_args=(--size "$size" --timeout "$timeout" --budget "$budget" --steps "$steps"
           --warmup "$warmup" --out "$out")
[ -n "$models" ] && peer_args+=(--models "$models")
[ -n "$systems" ] && peer_args+=(--systems "$systems")
# usage errors before the long part
python3 "$here/run_peers.py" "${peer_args[@]}" --check-args

merge=(--peers "$out/peers.json" --md "$out/peers.md" --json "$out/merged.json")
if [ -n "$lazyc" ] && [ "$lazyc" != none ]; then
  # lazyc's rows: the zoo models of the list (mlp is not one)
  zoo=$(echo "${models:-$(python3 "$here/run_peers.py" --list-models)}" | tr ',' '\n' | grep -vx mlp | paste -sd, || true)
  if [ -n "$zoo" ]; then
    echo "run.sh: $lazyc bench --size $size --models $zoo" >&2
    "$lazyc" bench --size "$size" --models "$zoo" --steps "$steps" --warmup "$warmup" --json \
      --out "$out/lazyc" >"$out/lazyc.json" 2>"$out/lazyc.log" ||
      echo "run.sh: lazyc bench exited with $? (its log: $out/lazyc.log)" >&2
    merge+=(--lazyc "$out/lazyc.json" --lazyc-log "$out/lazyc.log")
  fi
else
  echo "run.sh: no lazyc binary (build it, or --lazyc PATH): lazyc's columns are n/a" >&2
fi
python3 "$here/run_peers.py" "${peer_args[@]}"
python3 "$here/table.py" "${merge[@]}"
