#!/usr/bin/python3
"""Writes the state_dict listings of the zoo's models at smoke size.

    /usr/bin/python3 tests/reference/gen_model_names.py [OUTDIR]

OUTDIR defaults to tests/fixtures/model_names (committed); the freshness
test (test_fixtures_fresh.sh) reruns this into a temporary folder and
compares byte for byte. One file per model, NAME.txt:

    lazyc-model-names 1 NAME
    param NAME DTYPE NDIM D0 D1 ...     a trainable parameter
    buffer NAME DTYPE NDIM D0 D1 ...    a buffer (running statistics, counters)

in state_dict order. The test that reads them (test_cnn_small.c and the
other model tests) checks that lz_model_params holds exactly these names,
shapes, dtypes and trainable flags, in this order.

Models are listed at the zoo's smoke size: 10 classes for the image
models (the only thing the size changes in a CNN's state_dict), 32x32
images and 2 layers for the vision transformer, 2 layers for BERT.
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_ref  # noqa: E402  (the BERT reference definition, next to this script)
import fmnist_ref  # noqa: E402  (lazyc train's 1x28x28 resnet18)

SMOKE_CLASSES = 10
DTYPE_NAME = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32"}

# name -> constructor of the smoke-size PyTorch definition. The models
# whose listing depends on more than the class count say so here.
MODELS = {
    "resnet50": lambda: torchvision.models.resnet50(num_classes=SMOKE_CLASSES),
    "resnet18": lambda: torchvision.models.resnet18(num_classes=SMOKE_CLASSES),
    "resnext50_32x4d": lambda: torchvision.models.resnext50_32x4d(num_classes=SMOKE_CLASSES),
    "alexnet": lambda: torchvision.models.alexnet(num_classes=SMOKE_CLASSES),
    "mobilenet_v2": lambda: torchvision.models.mobilenet_v2(num_classes=SMOKE_CLASSES),
    "mnasnet1_0": lambda: torchvision.models.mnasnet1_0(num_classes=SMOKE_CLASSES),
    "vgg16": lambda: torchvision.models.vgg16(num_classes=SMOKE_CLASSES),
    "squeezenet1_1": lambda: torchvision.models.squeezenet1_1(num_classes=SMOKE_CLASSES),
    # smoke: 32x32 images (the position embedding's length) and 2 layers
    "timm_vision_transformer": lambda: torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=6, hidden_dim=384, mlp_dim=1536,
        num_classes=SMOKE_CLASSES),
    # smoke: 2 layers; the vocabulary is the class count at both sizes
    "BERT_pytorch": lambda: bert_ref.make_bert(2),
    # not a reference model: `lazyc train --model resnet18`, 1x28x28 input
    "resnet18_fmnist": fmnist_ref.make_resnet18_fmnist,
}


def listing(name, model):
    params = {n for n, _ in model.named_parameters()}
    lines = [f"lazyc-model-names 1 {name}"]
    for key, t in model.state_dict().items():
        kind = "param" if key in params else "buffer"
        dims = " ".join(str(d) for d in t.shape)
        lines.append(f"{kind} {key} {DTYPE_NAME[t.dtype]} {t.dim()}" + (f" {dims}" if dims else ""))
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "model_names")
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    for name, make in MODELS.items():
        with open(os.path.join(outdir, name + ".txt"), "w") as f:
            f.write(listing(name, make()))


if __name__ == "__main__":
    main()
