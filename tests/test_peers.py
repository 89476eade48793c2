#!/usr/bin/python3
"""bench/peers without the peers: the runners' and run_peers.py's argument
handling (a bad system, model or size is exit status 2 and a message naming
it, before any torch or jax import), run_peers.py's cells for runners that
time out, crash, are killed or cannot start (fake interpreters), and
table.py's merge of fabricated JSON (times, executions, speedups, failed
cells with their reasons). With lazyc's binary as argv[1], the runners'
shapes are checked against `lazyc models`.

    python3 tests/test_peers.py [path/to/lazyc [--shapes-only]]

Debian's python3 only; never enters the virtual environments. A few seconds.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PEERS = os.path.join(ROOT, "bench", "peers")
RUNNERS = ("torch_eager", "inductor", "xla_lazy", "xla_dynamo", "xla_compile", "jax_step")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, **kw):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=60, **kw)


def test_runner_args():
    for r in RUNNERS:
        script = os.path.join(PEERS, r + ".py")
        p = run([script, "--model", "bogus_net"])
        check(p.returncode == 2 and "unknown model 'bogus_net'" in p.stderr,
              f"{r}: unknown model -> exit 2 naming it (got {p.returncode}: {p.stderr[-200:]})")
        p = run([script, "--model", "resnet18", "--size", "huge"])
        check(p.returncode == 2 and "'huge'" in p.stderr, f"{r}: bad --size -> exit 2")
        p = run([script, "--model", "resnet18", "--steps", "0"])
        check(p.returncode == 2 and "--steps" in p.stderr, f"{r}: --steps 0 -> exit 2")
        p = run([script])
        check(p.returncode == 2 and "--model" in p.stderr, f"{r}: no --model -> exit 2")
    # a zoo model JAX has no definition for is a cell, not an error
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "c.json")
        p = run([os.path.join(PEERS, "jax_step.py"), "--model", "vgg16", "--out", out])
        cell = json.loads(p.stdout) if p.returncode == 0 else {}
        check(p.returncode == 0 and "not written in JAX" in cell.get("unsupported", ""),
              f"jax vgg16 -> unsupported cell ({p.returncode}: {p.stdout} {p.stderr[-200:]})")


def test_driver_args():
    rp = os.path.join(PEERS, "run_peers.py")
    for args, needle in ((["--systems", "xla_lazy,torch9"], "unknown system 'torch9'"),
                         (["--models", "mlp,resnet19"], "unknown model 'resnet19'"),
                         (["--size", "tiny"], "tiny"),
                         (["--timeout", "0"], "--timeout")):
        p = run([rp] + args + ["--check-args"])
        check(p.returncode == 2 and needle in p.stderr,
              f"run_peers {args} -> exit 2 with '{needle}' (got {p.returncode}: {p.stderr[-200:]})")
    p = subprocess.run(["bash", os.path.join(PEERS, "run.sh"), "--systems", "nope", "--lazyc",
                        "none"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "unknown system 'nope'" in p.stderr,
          f"run.sh bad system -> exit 2 ({p.returncode}: {p.stderr[-200:]})")
    p = subprocess.run(["bash", os.path.join(PEERS, "run.sh"), "--colour", "red"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--colour" in p.stderr, "run.sh unknown option -> exit 2")


FAKE = r'''#!/usr/bin/python3
# A stand-in interpreter: behaves by model name like a runner would.
import json, os, signal, sys, time
a = sys.argv[1:]
model, out = a[a.index("--model") + 1], a[a.index("--out") + 1]
system = os.path.basename(a[0])[:-3]
if model == "resnet18":
    print("  x resnet18: warm-up 1", file=sys.stderr, flush=True)
    time.sleep(30)
if model == "squeezenet1_1":
    print("RuntimeError: boom in the compiler", file=sys.stderr)
    sys.exit(3)
if model == "alexnet":
    os.kill(os.getpid(), signal.SIGKILL)
cell = {"system": system, "model": model, "size": "smoke", "ms": 12.5, "warmup": 1,
        "executions_per_step": 4.0, "losses": [2.3, 2.2], "first_loss": 2.3}
open(out, "w").write(json.dumps(cell) + "\n")
'''


def test_driver_cells():
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "fakepy")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        p = run([os.path.join(PEERS, "run_peers.py"), "--systems", "xla_dynamo,jax",
                 "--models", "mlp,resnet18,squeezenet1_1,alexnet", "--timeout", "1.5",
                 "--python-torch", fake, "--python-jax", os.path.join(d, "missing"),
                 "--out", d])
        check(p.returncode == 0, f"run_peers with failing cells exits 0 ({p.stderr[-300:]})")
        cells = json.load(open(os.path.join(d, "peers.json")))["cells"]
        by = {(c["system"], c["model"]): c for c in cells}
        check(len(cells) == 8, f"8 cells written, got {len(cells)}")
        check(by[("xla_dynamo", "mlp")].get("ms") == 12.5, "a good cell keeps its result")
        t = by[("xla_dynamo", "resnet18")].get("error", "")
        check(t.startswith("timeout after 2 s") and "warm-up 1" in t, f"timeout cell: '{t}'")
        e = by[("xla_dynamo", "squeezenet1_1")].get("error", "")
        check("exit status 3" in e and "boom in the compiler" in e, f"crash cell: '{e}'")
        k = by[("xla_dynamo", "alexnet")].get("error", "")
        check("SIGKILL" in k, f"killed cell: '{k}'")
        u = by[("jax", "mlp")].get("unavailable", "")
        check("cannot start" in u, f"missing interpreter cell: '{u}'")


def test_table():
    peers = {"size": "smoke", "steps": 3, "warmup": 1, "timeout_s": 60, "date": "2026-01-01",
             "cpu": "Test CPU", "cores": 2, "load_at_start": 1.0, "load_at_end": 1.0,
             "cells": [
                 {"system": "xla_dynamo", "model": "resnet18", "ms": 30.0, "warmup": 1,
                  "executions_per_step": 4.0, "compiles": 5, "first_loss": 2.5,
                  "losses": [2.5, 2.0], "versions": {"torch_xla": "9.9"}},
                 {"system": "torch_eager", "model": "resnet18", "ms": 20.0, "warmup": 1,
                  "first_loss": 2.5, "losses": [2.5, 2.0]},
                 {"system": "xla_dynamo", "model": "vgg16", "error": "timeout after 60 s (last: warm-up 1)"},
                 {"system": "torch_eager", "model": "vgg16", "error": "OutOfMemoryError: 3 GB"},
                 {"system": "jax", "model": "vgg16", "unsupported": "not written in JAX"}]}
    lazyc = {"size": "smoke", "rows": [
        {"model": "resnet18", "lazy_ms": 15.0, "captured_ms": 10.0, "executions_per_step": 1,
         "lazy_executions_per_step": 1},
        {"model": "vgg16", "lazy_ms": None, "captured_ms": 50.0, "executions_per_step": 1}]}
    with tempfile.TemporaryDirectory() as d:
        pp, lp, md, mj = (os.path.join(d, n) for n in ("p.json", "l.json", "t.md", "m.json"))
        json.dump(peers, open(pp, "w"))
        json.dump(lazyc, open(lp, "w"))
        log = os.path.join(d, "l.log")
        open(log, "w").write("  resnet18 lazy     step 1/3      15.00 ms  loss 2.1000\n")
        p = run([os.path.join(PEERS, "table.py"), "--peers", pp, "--lazyc", lp, "--lazyc-log",
                 log, "--md", md, "--json", mj])
        check(p.returncode == 0, f"table.py exit 0 ({p.stderr[-300:]})")
        out = p.stdout
        row = next((l for l in out.splitlines() if l.startswith("| resnet18 | 15.0")), "")
        check(re.search(r"\| 15\.0 \(1\) \| 10\.0 \(1\) \| 20\.0 \| 30\.0 \(4\) \|", row),
              f"resnet18 row: lazy, captured, peers with executions: '{row}'")
        check("| resnet18 | 2.00x | 3.00x |" in out, "speedups of captured over the peers")
        vgg = next((l for l in out.splitlines() if l.startswith("| vgg16 | n/a | 50.0")), "")
        check("| error | timeout | - |" in vgg, f"vgg16 failed cells tagged: '{vgg}'")
        check("- XLA dynamo, vgg16: timeout after 60 s (last: warm-up 1)" in out,
              "the timeout's reason listed")
        check("- torch 2.9 eager, vgg16: OutOfMemoryError: 3 GB" in out, "the error's reason listed")
        check("- JAX jit, vgg16: not written in JAX" in out, "the unsupported reason listed")
        check("| resnet18 | 2.1000 | 2.0000 | 2.0000 |" in out, "losses after the warm-up")
        check("torch_xla 9.9" in out and "Test CPU" in out, "versions and CPU in the header")
        check(open(md).read() == out, "--md holds the table")
        m = json.load(open(mj))
        r18 = next(r for r in m["rows"] if r["model"] == "resnet18")
        check(r18["captured_speedup"]["xla_dynamo"] == 3.0, "merged JSON speedup")
        check(r18["torch_first_loss_rel_diff"] == 0.0, "merged JSON loss agreement")
        bad = os.path.join(d, "bad.json")
        open(bad, "w").write("{not json")
        p = run([os.path.join(PEERS, "table.py"), "--peers", bad])
        check(p.returncode == 1 and "bad.json is not the peers JSON" in p.stderr,
              f"table.py on broken JSON -> exit 1 naming it ({p.returncode}: {p.stderr})")
        p = run([os.path.join(PEERS, "table.py"), "--peers", lp])
        check(p.returncode == 1 and "no \"cells\" list" in p.stderr,
              "table.py on the wrong JSON -> exit 1")


def test_shapes(lazyc):
    sys.path.insert(0, PEERS)
    import peers_common as pc
    out = subprocess.run([lazyc, "models"], capture_output=True, text=True, timeout=120).stdout
    name = None
    seen = 0
    for line in out.splitlines():
        m = re.match(r"(\S+)?\s+(smoke|bench)\s+[\d,]+\s+[\d,]+\s+\w+ \[([\d, ]+)\]\s+\w+ \[([\d, ]+)\]",
                     line)
        if not m:
            if line.startswith("`lazyc train"):
                break
            continue
        name = m.group(1) or name
        if name not in pc.ZOO:
            continue
        inp, tgt, _, _ = pc.shapes(name, m.group(2))
        want = ([int(v) for v in m.group(3).split(",")], [int(v) for v in m.group(4).split(",")])
        check((inp, tgt) == want, f"{name} {m.group(2)}: runners' shapes {inp} {tgt}, lazyc's {want}")
        seen += 1
    check(seen == 2 * len(pc.ZOO), f"lazyc models listed every zoo model at both sizes ({seen})")


if __name__ == "__main__":
    if "--shapes-only" not in sys.argv:
        test_runner_args()
        test_driver_args()
        test_driver_cells()
        test_table()
    if len(sys.argv) > 1 and sys.argv[1] != "--shapes-only":
        test_shapes(sys.argv[1])
    print("test_peers:", "FAILED" if failures else "ok", f"({len(failures)} failures)")
    sys.exit(1 if failures else 0)
