#!/usr/bin/python3
"""The PyTorch side of `lazyc bench`: times one model's training step in
PyTorch eager, the way the C side times lazyc's.

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_reference.py \\
        --model resnet50 --size smoke --input 2x3x64x64 --target 2 \\
        --classes 10 --steps 3 --warmup 2

`lazyc bench` runs it once per model (popen) with the shapes of the lazyc
model's spec, so both sides train the same architecture on the same batch
and input size: torchvision 0.14 definitions for the CNNs, torchvision's
VisionTransformer (ViT-S/16) for timm_vision_transformer, and the reference
BERT of tests/reference/bert_ref.py for BERT_pytorch. A step is
zero_grad (set_to_none, PyTorch's faster form), forward, cross-entropy
(mean over every target), backward and SGD (lr 0.01, momentum 0.9), on two
threads; warm-up steps first, then the median of the timed steps.

Prints exactly one JSON line on stdout:

    {"model": M, "torch_ms": F, "steps_ms": [F, ...], "peak_bytes": N, "params": N,
     "blas": PATH, "blas_gflops": F, "build_ms": F, "first_ms": F}

build_ms is the model's construction (parameter initialisation) and the
optimizer's, first_ms the first training step (warm-up or not): PyTorch's
side of the time to first step.

peak_bytes is the resident-set growth of the training: VmHWM after the
last step minus VmRSS before the model was built (the high-water mark is
reset first through /proc/self/clear_refs when the kernel allows it), so it
counts parameters, gradients, momentum, activations and allocator slack.
blas is the BLAS library torch's matmuls reached (from /proc/self/maps) and
blas_gflops its speed on a 512^3 sgemm, measured after the steps: Debian's
torch takes whatever libblas.so.3 the alternatives system names, and
without libopenblas0 that is the reference BLAS, which slows PyTorch's
linear layers (BERT, ViT, the alexnet/vgg classifiers) 20-60x.
When torch or torchvision cannot be imported the line is
{"model": M, "unavailable": REASON}; on any other failure
{"model": M, "error": REASON}. Progress goes to stderr. Exit status 0
unless the arguments are wrong (2).
"""
import argparse
import json
import os
import sys
import time
import traceback

# Mirrors models/zoo: the layer counts are the only part of the
# architecture the spec's shapes do not give.
VIT_LAYERS = {"smoke": 2, "bench": 12, "gpu": 12}
BERT_LAYERS = {"smoke": 2, "bench": 12, "gpu": 12}
IMAGE_MODELS = ("resnet50", "resnet18", "resnext50_32x4d", "alexnet", "mobilenet_v2",
                "mnasnet1_0", "vgg16", "squeezenet1_1")
LR, MOMENTUM = 0.01, 0.9


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_hwm():
    # "5" resets the peak resident set size (Linux >= 4.0); without it the
    # high-water mark may still hold import-time peaks, which are far below
    # a training step's, so the figure stays usable.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def blas_probe(torch):
    """Which BLAS torch's matmuls reached, and its speed on a 512^3 sgemm.

    Debian's torch calls the system libblas.so.3, which is whatever the
    alternatives system points at: OpenBLAS when libopenblas0 is installed,
    else the reference BLAS (about 6 GFLOP/s here, 20-60x slower), which
    cripples PyTorch's linear layers but not its convolutions (oneDNN)."""
    path = ""
    with open("/proc/self/maps") as f:
        for line in f:
            name = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in os.path.basename(name):
                path = name
                break
    a, b = torch.rand(512, 512), torch.rand(512, 512)
    torch.mm(a, b)
    t0 = time.perf_counter()
    torch.mm(a, b)
    dt = time.perf_counter() - t0
    return path, 2 * 512 ** 3 / dt / 1e9


def shape_arg(text):
    try:
        dims = [int(d) for d in text.split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a shape like 2x3x64x64")
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"'{text}' is not a shape like 2x3x64x64")
    return dims


def build_bert(layers):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tests", "reference"))
    from bert_ref import make_bert  # the zoo's parity reference
    return make_bert(layers)


def build_model(name, size, x_shape, classes):
    import torchvision
    if name in IMAGE_MODELS:
        return getattr(torchvision.models, name)(num_classes=classes)
    if name == "timm_vision_transformer":
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=x_shape[2], patch_size=16, num_layers=VIT_LAYERS[size],
                                 num_heads=6, hidden_dim=384, mlp_dim=1536, num_classes=classes)
    if name == "BERT_pytorch":
        return build_bert(BERT_LAYERS[size])
    raise RuntimeError(f"no PyTorch definition for model '{name}'")


def run(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(2)
    torch.manual_seed(0)
    tokens = args.model == "BERT_pytorch"
    if tokens:
        x = torch.randint(0, args.classes, args.input, dtype=torch.int64)
    else:
        x = torch.rand(args.input) * 2 - 1
    y = torch.randint(0, args.classes, args.target, dtype=torch.int64)

    reset_hwm()
    rss_before = status_kib("VmRSS")
    t_build = time.perf_counter()
    model = build_model(args.model, args.size, args.input, args.classes)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    build_ms = (time.perf_counter() - t_build) * 1e3

    import contextlib
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.autocast == "bf16" \
        else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():   # forward and loss, as lazyc bench --dtype bf16
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    times, first_ms = [], None
    for i in range(args.warmup + args.steps):
        timed = i >= args.warmup
        print(f"  torch {args.model}: {'step' if timed else 'warm-up'} "
              f"{i - args.warmup + 1 if timed else i + 1}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        loss = step()
        t1 = time.perf_counter()
        if first_ms is None:
            first_ms = (t1 - t0) * 1e3
        if timed:
            times.append((t1 - t0) * 1e3)
    if not torch.isfinite(loss).item():
        raise RuntimeError(f"loss is not finite: {loss.item()}")
    peak = max(0, status_kib("VmHWM") - rss_before) * 1024
    ordered = sorted(times)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    blas, blas_gflops = blas_probe(torch)
    return {"model": args.model, "torch_ms": median, "steps_ms": times, "peak_bytes": peak,
            "params": sum(p.numel() for p in params), "blas": blas, "blas_gflops": blas_gflops,
            "build_ms": build_ms, "first_ms": first_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--size", choices=("smoke", "bench", "gpu"), required=True)
    ap.add_argument("--input", type=shape_arg, required=True, help="input shape, e.g. 2x3x64x64")
    ap.add_argument("--target", type=shape_arg, required=True, help="target shape, e.g. 2")
    ap.add_argument("--classes", type=int, required=True, help="logits width (vocabulary for BERT)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', bfloat16)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.classes < 1:
        ap.error("--steps must be >= 1, --warmup >= 0, --classes >= 1")
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        emit({"model": args.model, "unavailable": f"cannot import torch/torchvision: {e}"})
        return 0
    try:
        emit(run(args))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        emit({"model": args.model, "error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
