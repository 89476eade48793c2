"""What every peer runner shares: the models and their shapes, the command
line, the timing loop, the peak memory and the one JSON object a runner
prints.

A runner (xla_lazy.py, inductor.py, jax_step.py, ...) parses its arguments
with parse_args() BEFORE importing torch or jax, so a wrong name fails fast
(exit status 2, a message naming the bad value) with any interpreter, and
then calls run_cell(), which turns any exception into a cell that says why
instead of a traceback without a result.

The shapes are lazyc's zoo (`lazyc models`; tests/test_peers.py checks
them against it): the same batch, input size and number of classes as
`lazyc bench --size smoke|bench`. "mlp" is bench/bench_mlp.c's MLP at
its default size (not a `lazyc bench` row: the per-step overhead of each
system, where the kernels are negligible).
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
# torch_reference imports torch only inside its functions: importing it is
# cheap and safe with any interpreter.
import torch_reference as ref  # noqa: E402

ZOO = ("resnet50", "resnet18", "BERT_pytorch", "resnext50_32x4d", "alexnet", "mobilenet_v2",
       "mnasnet1_0", "vgg16", "timm_vision_transformer", "squeezenet1_1")
MODELS = ("mlp",) + ZOO
SIZES = ("smoke", "bench", "gpu")
# bench/bench_mlp.c's defaults (batch 16, 24 inputs, one hidden layer of
# 32, 6 classes, no bias)
MLP = {"batch": 16, "in": 24, "hidden": 32, "depth": 1, "classes": 6}
LR, MOMENTUM = ref.LR, ref.MOMENTUM


def shapes(model, size):
    """(input shape, target shape, classes, input is tokens) as lazyc's zoo
    builds them (models/zoo.c lz_zoo_image_spec, bert.c, vit.c)."""
    bench = size in ("bench", "gpu")
    gpu = size == "gpu"   # a batch that fills one GPU (lazyc bench --size gpu)
    if model == "mlp":
        return [MLP["batch"], MLP["in"]], [MLP["batch"]], MLP["classes"], False
    if model == "BERT_pytorch":
        b, s = (16, 128) if gpu else (4, 128) if bench else (2, 16)
        return [b, s], [b, s], 30522, True
    batch = 64 if gpu else 8 if bench else 2
    side = 224 if gpu else 128 if bench else (32 if model == "timm_vision_transformer" else 64)
    return [batch, 3, side, side], [batch], 1000 if bench else 10, False


def parse_args(system, models=MODELS, argv=None):
    """The runners' common command line; exits with status 2 and a message
    naming the bad value on a usage error."""
    ap = argparse.ArgumentParser(prog=f"{system}.py",
                                 description=f"Times the training step of one model under {system}.")
    ap.add_argument("--model", required=True, help="one of: " + ", ".join(models))
    ap.add_argument("--size", default="smoke", help="smoke (default), bench or gpu")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="steps before timing (compiles happen here)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="also write the JSON object to this file")
    a = ap.parse_args(argv)
    if a.model not in models:
        ap.error(f"unknown model '{a.model}' for {system} (known: {', '.join(models)})")
    if a.size not in SIZES:
        ap.error(f"--size is smoke, bench or gpu, not '{a.size}'")
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--steps must be >= 1, --warmup >= 0, --threads >= 1")
    a.system = system
    a.input, a.target, a.classes, a.tokens = shapes(a.model, a.size)
    return a


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def rss_kib(field):
    return ref.status_kib(field)


class Cell:
    """Collects one (system, model) measurement."""

    def __init__(self, args):
        self.args = args
        self.d = {"system": args.system, "model": args.model, "size": args.size,
                  "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
                  "input": args.input, "classes": args.classes}
        ref.reset_hwm()
        self.rss_before = rss_kib("VmRSS")

    def time_steps(self, step, sync, counters, loss_value):
        """Runs warm-up then timed steps. step() records/runs one training
        step and returns the loss (any type); sync() waits until it is done;
        counters() returns a dict of cumulative counts; loss_value(loss) a
        float. Counts over the timed steps are divided by their number."""
        a = self.args
        losses, times = [], []
        start = counters()  # set-up (weights, batch) is not the steps'
        t_start = time.perf_counter()
        for i in range(a.warmup + a.steps):
            if i == a.warmup:
                before = counters()
                self.d["warmup_s"] = time.perf_counter() - t_start
            timed = i >= a.warmup
            print(f"  {a.system} {a.model}: {'step' if timed else 'warm-up'} "
                  f"{i - a.warmup + 1 if timed else i + 1}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            loss = step()
            sync()
            t1 = time.perf_counter()
            if timed:
                times.append((t1 - t0) * 1e3)
            losses.append(loss)
        after = counters()
        self.d["losses"] = [loss_value(x) for x in losses]
        self.d["first_loss"] = self.d["losses"][0]
        if not all(math.isfinite(x) for x in self.d["losses"]):
            raise RuntimeError(f"loss is not finite: {self.d['losses']}")
        self.d["steps_ms"] = times
        self.d["ms"] = median(times)
        self.d["counters_warmup"] = {k: before.get(k, 0) - start.get(k, 0) for k in before}
        self.d["counters_timed"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        self.d["per_step"] = {k: v / a.steps for k, v in self.d["counters_timed"].items()}
        self.d["peak_bytes"] = max(0, rss_kib("VmHWM") - self.rss_before) * 1024

    def finish(self, executions_key, compiles_keys, notes=()):
        """executions_per_step / compiles_per_step from the timed counters;
        compiles (all, warm-up included) from warm-up plus timed."""
        ps, w, t = self.d["per_step"], self.d["counters_warmup"], self.d["counters_timed"]
        self.d["executions_per_step"] = ps.get(executions_key) if executions_key else None
        self.d["compiles_per_step"] = sum(ps.get(k, 0) for k in compiles_keys)
        self.d["compiles"] = sum(w.get(k, 0) + t.get(k, 0) for k in compiles_keys)
        if notes:
            self.d["note"] = "; ".join(notes)
        return self.d


def emit(args, obj):
    line = json.dumps(obj)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


def short_reason(e):
    """The first line of an exception, trimmed: what a table cell can show."""
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:200]


def run_cell(args, body, versions):
    """body(args) returns the cell dict; versions() the systems' versions.
    Exit status 0 whenever a JSON object was printed."""
    try:
        v = versions()
    except Exception as e:  # the system is not installed in this interpreter
        emit(args, {"system": args.system, "model": args.model, "size": args.size,
                    "unavailable": short_reason(e), "python": sys.executable})
        return 0
    try:
        d = body(args)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        d = {"system": args.system, "model": args.model, "size": args.size,
             "error": short_reason(e)}
    d["versions"] = v
    emit(args, d)
    return 0
