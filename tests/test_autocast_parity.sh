#!/usr/bin/env bash
# Autocast parity (issue 21): `lazyc grads --dtype bf16` against PyTorch's
# torch.autocast("cpu", bfloat16) and float64 on a few zoo models at smoke
# size (tests/reference/autocast_parity.py says what is compared). The
# models are the quick ones whose products cover linear, attention and
# convolution without batch norm (vgg16: also the 3x3 layers autocast keeps
# float32 on an AVX512_BF16 CPU); the ten were measured once (figures in
# docs/benchmark.md, autocast, with why squeezenet1_1 is not among them).
# With --eval (ctest test_autocast_parity_eval) the batch-norm models that
# meet the criteria in eval mode: in train mode over a batch of 2 they are
# not measurable, PyTorch's own autocast gradients included (same page);
# means over 8 draws (--draws 8), since one draw of resnet50's gradients
# moves by more than the margin (autocast_parity.py says how).
# Skipped without PyTorch except under CI=true.
#
#   test_autocast_parity.sh BUILD_DIR [MODEL,MODEL,...] [OPTIONS of autocast_parity.py]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: test_autocast_parity.sh BUILD_DIR [MODELS]}"
py="${LZ_TORCH_PYTHON:-/usr/bin/python3}"
if ! "$py" -c 'import torch, torchvision' >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: PyTorch/torchvision are not importable by $py, and CI=true requires them" >&2
        exit 1
    fi
    echo "SKIPPED: test_autocast_parity: PyTorch/torchvision are not importable by $py"
    exit 77
fi
exec "$py" "$here/reference/autocast_parity.py" --lazyc "$build/lazyc" \
    --models "${2:-BERT_pytorch,timm_vision_transformer,alexnet,vgg16}" "${@:3}"
