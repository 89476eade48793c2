#!/usr/bin/env bash
# The CUDA backend's device check (issue 46, item 5): one command on a
# machine with one NVIDIA GPU (an H100 or H200 lent through the device
# tool), in under 8 minutes, everything it measures written to $OUT.
#
#   here, once, on a machine with libdnnl (what the GPU image lacks):
#     scripts/device_check.sh --prepare        # fills .devcarry/ (~45 MB)
#   there (the device tool: carry [".devcarry"], timeout_s 600):
#     scripts/device_check.sh [--only PHASES] [--budget SECONDS]
#
# Phases, in this order, each given what is left of the budget (default
# 450 s) up to its own cap, so the most important finish first and a
# later call can run the rest (--only bench: the build is kept on a warm
# machine):
#   build   configure (-DLZ_CUDA=ON -DLZ_CUDA_GPU_TESTS=ON, oneDNN and cuDNN
#           found or carried) and build what the check runs
#   suite   ctest -L cuda_gpu: every op family forward and backward on the
#           GPU against the CPU (the generator's draws bitwise), captured
#           steps against lazy ones, launches per step, the host's time
#           per replay, memory back after lz_shutdown, out of memory
#   parity  the ten zoo models (and resnet18_fmnist): loss, gradients and 3
#           SGD steps on the GPU against PyTorch's float64 with the parity
#           tests' tolerances (tests/test_model_parity.sh), then the same on
#           the CPU and the GPU's results against the CPU's (compare-runs)
#   bench   lazyc bench --device cuda (captured and lazy) at bench size and at
#           gpu size (f32 and bf16), and PyTorch CUDA eager and torch.compile
#           on the same models (bench/gpu/torch_cuda.py); the table and the
#           issue's targets (bench/gpu/report.py)
# Back in $OUT (the device tool returns at most 8 files): summary.txt,
# gpu_bench.md, logs.tar.gz (every log and JSON).
#
# Without a GPU it stops first, with "no CUDA device" and exit status 3,
# having built nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
carry=$root/.devcarry

prepare() {
  # what the GPU image lacks: oneDNN (Debian's libdnnl.so.2, which needs
  # libOpenCL.so.1) and its headers, zlib's headers
  local lib
  lib=$(ldconfig -p | awk '/libdnnl\.so\.2 /{print $NF; exit}')
  [ -n "$lib" ] || { echo "device_check --prepare: no libdnnl.so.2 here (apt-get install libdnnl-dev)" >&2; exit 1; }
  rm -rf "$carry"
  mkdir -p "$carry/lib" "$carry/include"
  cp -L "$lib" "$carry/lib/libdnnl.so.2"
  cp -L "$(ldconfig -p | awk '/libOpenCL\.so\.1 /{print $NF; exit}')" "$carry/lib/libOpenCL.so.1"
  cp /usr/include/dnnl*.h "$carry/include/"
  cp -r /usr/include/oneapi "$carry/include/" 2>/dev/null
  cp /usr/include/zlib.h /usr/include/zconf.h "$carry/include/" 2>/dev/null
  grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> "$(git rev-parse --git-common-dir)/info/exclude"
  echo "device_check --prepare: $(du -sh "$carry" | cut -f1) in .devcarry/ (carry it: run(carry=[\".devcarry\"]))"
  exit 0
}

budget=450
only=build,suite,parity,bench
while [ $# -gt 0 ]; do
  case $1 in
    --prepare) prepare ;;
    --only) only=$2; shift ;;
    --budget) budget=$2; shift ;;
    *) echo "usage: scripts/device_check.sh [--prepare] [--only build,suite,parity,bench] [--budget SECONDS]" >&2; exit 2 ;;
  esac
  shift
done

out=${OUT:-$root/device-out}
logs=$out/logs
mkdir -p "$logs"
summary=$out/summary.txt
: > "$summary"
t0=$(date +%s)
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - ($(date +%s) - t0))); }
# the phase's time: what is left of the budget, at most its cap
give() { local l; l=$(left); [ "$l" -gt "$1" ] && echo "$1" || echo "$l"; }
finish() {
  say "device_check: $(( $(date +%s) - t0 )) s in all"
  tar -C "$out" -czf "$out/logs.tar.gz" logs 2>/dev/null && rm -rf "$logs"
  exit "${1:-0}"
}
phase() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
# runs a phase step with a time limit; its output to logs/NAME.log
step() {
  local name=$1 cap=$2; shift 2
  local t; t=$(give "$cap")
  if [ "$t" -le 5 ]; then say "  $name: NOT RUN (the budget is spent)"; return 1; fi
  local s=$(date +%s)
  timeout -k 10 "$t" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  local took=$(( $(date +%s) - s ))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "  $name: TIMED OUT after ${took} s (limit $t s)"
  elif [ $rc -eq 0 ]; then say "  $name: ok (${took} s)"
  else say "  $name: FAILED, exit $rc (${took} s): $(tail -3 "$logs/$name.log" | tr '\n' ' ' | cut -c1-300)"; fi
  return $rc
}

# ---- the device, before anything is built ----
if ! command -v nvidia-smi > /dev/null 2>&1; then
  say "device_check: no CUDA device: nvidia-smi is not installed (no NVIDIA driver on this machine)"
  finish 3
fi
if ! gpus=$(nvidia-smi -L 2>&1) || [ -z "$gpus" ]; then
  say "device_check: no CUDA device: nvidia-smi -L says: $(echo "$gpus" | head -2 | tr '\n' ' ')"
  finish 3
fi
say "device_check on $(hostname): $gpus"
say "  $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
say "  nvcc: $(nvcc --version 2>/dev/null | tail -1); python3: $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
nproc_=$(nproc)

# ---- where the libraries are: the toolkit's, PyTorch's pip packages, carried ----
find_lib() {   # a file name: its path from the loader's cache, the toolkit, or site-packages
  local p
  p=$(ldconfig -p | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -z "$p" ] && for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/$1" ] && { p=$d/$1; break; }; done
  [ -z "$p" ] && p=$(python3 - "$1" <<'PY' 2>/dev/null
import glob, os, site, sys
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(base, "nvidia", "**", sys.argv[1]), recursive=True):
        print(p); raise SystemExit
PY
)
  echo "$p"
}
cudnn=$(find_lib libcudnn.so.9)
cublaslt=$(find_lib libcublasLt.so.13)
nvrtc=$(find_lib libnvrtc.so.13)
cudnn_inc=""
for d in "$(dirname "$(dirname "$cudnn")")/include" /usr/include /usr/local/cuda/include; do
  [ -e "$d/cudnn.h" ] && { cudnn_inc=$d; break; }
done
say "  cuDNN ${cudnn:-NOT FOUND} (headers ${cudnn_inc:-NOT FOUND}); cuBLASLt ${cublaslt:-NOT FOUND}; NVRTC ${nvrtc:-NOT FOUND}"
libpath=""
for f in "$cudnn" "$cublaslt" "$nvrtc"; do [ -n "$f" ] && libpath="$libpath:$(dirname "$f")"; done
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DLZ_CUDA=ON -DLZ_CUDA_GPU_TESTS=ON -DLZ_MPI=OFF)
[ -n "$cudnn" ] && cmake_args+=("-DLZ_CUDNN_LIB=$cudnn")
[ -n "$cudnn_inc" ] && cmake_args+=("-DLZ_CUDNN_INCLUDE=$cudnn_inc")
[ -n "$cublaslt" ] && cmake_args+=("-DCUDA_cublasLt_LIBRARY=$cublaslt")
[ -n "$nvrtc" ] && cmake_args+=("-DCUDA_nvrtc_LIBRARY=$nvrtc")
if ! ldconfig -p | grep -q 'libdnnl\.so\.2 '; then
  if [ ! -e "$carry/lib/libdnnl.so.2" ]; then
    say "device_check: oneDNN is neither installed nor carried (scripts/device_check.sh --prepare, then carry .devcarry)"
    finish 1
  fi
  cmake_args+=("-DDNNL_LIB=$carry/lib/libdnnl.so.2" "-DDNNL_INCLUDE=$carry/include")
  libpath="$carry/lib$libpath"
  say "  oneDNN: carried ($(ldd "$carry/lib/libdnnl.so.2" | grep -c 'not found') of its libraries missing here)"
fi
if ! echo '#include <zlib.h>' | cc -E - > /dev/null 2>&1 && [ -e "$carry/include/zlib.h" ]; then
  cmake_args+=("-DZLIB_INCLUDE_DIR=$carry/include" "-DZLIB_LIBRARY=$(ldconfig -p | awk '/libz\.so\.1 /{print $NF; exit}')")
fi
export LD_LIBRARY_PATH="${libpath#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LZ_TORCH_PYTHON=$(command -v python3) LZ_TORCH_THREADS=$nproc_ LZ_PARITY_CACHE=/tmp/lazyc-parity
build=$root/build-gpu

# ---- build ----
if phase build; then
  say "build:"
  step configure 120 cmake -S . -B "$build" "${cmake_args[@]}" || finish 1
  step compile 240 cmake --build "$build" -j"$nproc_" --target lazyc_cli lazyc_cuda gpu_suite test_models \
    test_cuda_codegen test_cuda_cache || finish 1
  (cd "$build" && ls -la liblazyc_cuda.so lazyc gpu_suite; ldd liblazyc_cuda.so) > "$logs/build_files.log" 2>&1
fi
[ -x "$build/lazyc" ] && [ -e "$build/liblazyc_cuda.so" ] || { say "device_check: nothing built in $build"; finish 1; }

# ---- suite ----
if phase suite; then
  say "suite (ctest -L cuda_gpu):"
  for part in ops capture launches replay memory oom; do
    step "suite_$part" 120 bash tests/cuda/gpu_suite.sh "$build/gpu_suite" "$part" "$logs/ops"
    grep -E "host time per captured replay|device memory free|pieces of 16 GiB|call 3:|nearest its tolerance|passed, .* failed" \
      "$logs/suite_$part.log" 2>/dev/null | tail -4 | sed 's/^/    /' | tee -a "$summary"
  done
  step registry 60 bash tests/cuda/test_cuda_registry.sh "$build" 1
fi

# ---- parity ----
if phase parity; then
  say "parity (each model against PyTorch float64; the GPU's results against the CPU's):"
  step parity_cuda 240 env LZ_DEVICE=cuda python3 tests/reference/model_parity.py run --lazyc "$build/lazyc" \
    --test-models "$build/test_models" --save-got "$logs/got_cuda"
  tail -1 "$logs/parity_cuda.log" | sed 's/^/    /' | tee -a "$summary"
  step parity_cpu 150 env LZ_DEVICE=cpu python3 tests/reference/model_parity.py run --lazyc "$build/lazyc" \
    --test-models "$build/test_models" --save-got "$logs/got_cpu"
  step gpu_vs_cpu 60 python3 tests/reference/model_parity.py compare-runs "$logs/got_cpu" "$logs/got_cuda"
  tail -1 "$logs/gpu_vs_cpu.log" | sed 's/^/    /' | tee -a "$summary"
fi

# ---- bench ----
if phase bench; then
  say "bench (lazyc bench --device cuda; PyTorch CUDA eager and torch.compile):"
  for cfg in "bench f32" "gpu f32" "gpu bf16"; do
    set -- $cfg
    step "lazyc_$1_$2" 150 env LZ_DEVICE=cuda "$build/lazyc" bench --size "$1" --dtype "$2" --modes captured,lazy \
      --steps 10 --warmup 3 --out "$out/lazyc_$1_$2" --device cuda
    cp "$out/lazyc_$1_$2/bench.json" "$logs/lazyc_$1_$2.json" 2>/dev/null
  done
  step torch_bench_f32 90 python3 bench/gpu/torch_cuda.py --size bench --systems eager --out "$out/torch_bench_f32.json"
  step torch_gpu_f32 240 python3 bench/gpu/torch_cuda.py --size gpu --systems eager,compile \
    --deadline "$(( $(give 240) - 60 ))" --out "$out/torch_gpu_f32.json"
  step torch_gpu_bf16 60 python3 bench/gpu/torch_cuda.py --size gpu --dtype bf16 --systems eager \
    --models resnet50,BERT_pytorch,timm_vision_transformer --out "$out/torch_gpu_bf16.json"
  python3 bench/gpu/report.py --dir "$out" > "$out/gpu_bench.md" 2> "$logs/report.log"
  grep -E "^- " "$out/gpu_bench.md" | sed 's/^/    /' | tee -a "$summary"
  for f in "$out"/torch_*.json; do [ -e "$f" ] && mv "$f" "$logs/"; done
  for d in "$out"/lazyc_*; do [ -d "$d" ] && mv "$d" "$logs/"; done
fi
finish 0
