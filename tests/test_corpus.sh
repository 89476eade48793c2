#!/usr/bin/env bash
# The conformance corpus's fast subset (python/corpus/run.py --fast: a
# nanoGPT, HF GPT-2, Llama, BERT, T5 and ViT at a small width, torchvision's
# mobilenet_v3_small): parity of 4 SGD and AdamW steps with eager torch and
# 1 execution per step. The whole corpus is `make corpus`. Skips (77)
# without the PyTorch environment, as test_bridge.sh does.
# usage: test_corpus.sh LIBLAZYC_SO
set -uo pipefail
lib=$1
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
if ! py="$("$repo/scripts/pyenv.sh" torch)"; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: the PyTorch environment could not be made (scripts/pyenv.sh torch, above); CI needs it" >&2
        exit 1
    fi
    echo "SKIPPED: test_corpus: no PyTorch environment (scripts/pyenv.sh torch failed, above)"
    exit 77
fi
cd "$repo" && LAZYC_LIB="$lib" OMP_NUM_THREADS=2 "$py" python/corpus/run.py --fast --no-time
