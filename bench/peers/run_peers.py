#!/usr/bin/env python3
"""Runs the peer runners: every (system, model) cell in its own process with
a time limit, and writes all cells into one JSON file.

    bench/peers/run_peers.py --size smoke --models mlp,resnet18 \\
        --systems xla_lazy,xla_dynamo --timeout 300 --out bench-out/peers

A cell a peer cannot run (import error, compile error, unsupported op, time
limit, killed for memory) is a cell with "error"/"unavailable"/
"unsupported" and a short reason, never the end of the run. --budget S
stops starting new cells after S seconds (those say "skipped").

Needs only the standard library: the runners run under
--python-torch / --python-jax (default: what scripts/pyenv.sh prints for
"torch" and "jax", which creates the environment if it is missing).
Exit status: 0 when the file was written (failed cells included), 2 on a
usage error.
"""
import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import peers_common as pc  # noqa: E402  (standard library only at import)

# system -> (runner script, environment name of scripts/pyenv.sh)
SYSTEMS = {
    "torch_eager": ("torch_eager.py", "torch"),
    "inductor": ("inductor.py", "torch"),
    "xla_lazy": ("xla_lazy.py", "torch"),
    "xla_dynamo": ("xla_dynamo.py", "torch"),
    "xla_compile": ("xla_compile.py", "torch"),
    "jax": ("jax_step.py", "jax"),
}


def name_list(text, known, what, ap):
    items = [s for s in text.split(",") if s]
    if not items:
        ap.error(f"--{what} needs a comma-separated list")
    for s in items:
        if s not in known:
            ap.error(f"unknown {what[:-1]} '{s}' (known: {', '.join(known)})")
    return items


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="smoke", choices=pc.SIZES)
    ap.add_argument("--models", default=",".join(pc.MODELS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per cell")
    ap.add_argument("--budget", type=float, default=0, help="seconds for the whole run (0: none)")
    ap.add_argument("--out", default="bench-out/peers", help="folder for peers.json and logs/")
    ap.add_argument("--python-torch", help="interpreter with torch 2.9 + torch_xla")
    ap.add_argument("--python-jax", help="interpreter with jax")
    ap.add_argument("--omp-wait-policy", default="passive",
                    help="OMP_WAIT_POLICY of the torch runners (default passive: spinning "
                         "workers are 5-10x slower on a shared machine; '' keeps the default)")
    ap.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--list-models", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.models = name_list(a.models, pc.MODELS, "models", ap)
    a.systems = name_list(a.systems, tuple(SYSTEMS), "systems", ap)
    if a.steps < 1 or a.warmup < 0 or a.timeout <= 0 or a.budget < 0:
        ap.error("--steps >= 1, --warmup >= 0, --timeout > 0, --budget >= 0")
    return a


def interpreter(env_name, given):
    if given:
        return given
    try:
        out = subprocess.run([os.path.join(ROOT, "scripts", "pyenv.sh"), env_name],
                             capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"!scripts/pyenv.sh {env_name}: {e}"
    if out.returncode != 0 or not out.stdout.strip():
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return f"!scripts/pyenv.sh {env_name}: {last}"
    return out.stdout.strip().splitlines()[-1]


def last_progress(log_path):
    """The runner's last progress line ("warm-up 1", "step 2"), to say where
    a cell stopped."""
    try:
        with open(log_path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "", ""
    progress = [l.strip() for l in lines if re.match(r"\s+\S+ \S+: (warm-up|step) \d+", l)]
    other = [l.strip() for l in lines if l.strip()]
    return (progress[-1] if progress else ""), (other[-1] if other else "")


def run_cell(a, system, model, py, log_dir):
    script, _ = SYSTEMS[system]
    base = {"system": system, "model": model, "size": a.size}
    if py.startswith("!"):
        return dict(base, unavailable=py[1:][:200])
    log = os.path.join(log_dir, f"{system}-{model}.log")
    result = os.path.join(log_dir, f"{system}-{model}.json")
    if os.path.exists(result):
        os.remove(result)
    cmd = [py, os.path.join(HERE, script), "--model", model, "--size", a.size,
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--out", result]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1",
               JAX_PLATFORMS="cpu", OPENBLAS_CORETYPE="SkylakeX")
    env.pop("OMP_WAIT_POLICY", None)
    if a.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    t0 = time.monotonic()
    with open(log, "w") as lf:
        try:
            # its own process group, so a time limit ends its children too
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=lf, env=env,
                                 start_new_session=True)
        except OSError as e:
            return dict(base, unavailable=f"cannot start {py}: {e}"[:200])
        try:
            rc = p.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            where, _ = last_progress(log)
            return dict(base, error=f"timeout after {a.timeout:.0f} s"
                        + (f" (last: {where.split(': ', 1)[-1]})" if where else " (before step 1)"),
                        wall_s=time.monotonic() - t0)
    wall = time.monotonic() - t0
    try:
        with open(result) as f:
            cell = json.loads(f.read().strip().splitlines()[-1])
        cell["wall_s"] = wall
        return cell
    except (OSError, ValueError, IndexError):
        pass
    where, last = last_progress(log)
    if rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        why = f"killed by {sig}" + (" (out of memory?)" if rc == -signal.SIGKILL else "")
    else:
        why = f"exit status {rc}, no result: {last[:120]}"
    return dict(base, error=why + (f" (last: {where.split(': ', 1)[-1]})" if where else ""),
                wall_s=wall)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None):
    a = parse_args(argv)
    if a.list_models:
        print(",".join(pc.MODELS))
        return 0
    if a.check_args:
        return 0
    log_dir = os.path.join(a.out, "logs")
    os.makedirs(log_dir, exist_ok=True)
    pythons = {}
    for s in a.systems:
        env_name = SYSTEMS[s][1]
        if env_name not in pythons:
            pythons[env_name] = interpreter(env_name, getattr(a, "python_" + env_name))
    doc = {"size": a.size, "steps": a.steps, "warmup": a.warmup, "timeout_s": a.timeout,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "cpu": cpu_name(), "cores": os.cpu_count(), "load_at_start": os.getloadavg()[0],
           "omp_wait_policy": a.omp_wait_policy, "pythons": pythons, "cells": []}
    t_start = time.monotonic()
    n = len(a.models) * len(a.systems)
    k = 0
    for model in a.models:
        for system in a.systems:
            k += 1
            spent = time.monotonic() - t_start
            if a.budget and spent > a.budget:
                cell = {"system": system, "model": model, "size": a.size,
                        "skipped": f"run budget of {a.budget:.0f} s spent"}
            else:
                print(f"[{k}/{n}] {system} {model} ({spent:.0f} s so far)", file=sys.stderr,
                      flush=True)
                cell = run_cell(a, system, model, pythons[SYSTEMS[system][1]], log_dir)
            reason = next((cell[r] for r in ("error", "unavailable", "unsupported", "skipped")
                           if r in cell), None)
            print(f"    {system} {model}: " + (f"{cell['ms']:.2f} ms, "
                  f"{cell.get('executions_per_step')} executions/step" if "ms" in cell
                  else reason), file=sys.stderr, flush=True)
            doc["cells"].append(cell)
            doc["load_at_end"] = os.getloadavg()[0]
            doc["wall_s"] = time.monotonic() - t_start
            with open(os.path.join(a.out, "peers.json"), "w") as f:
                json.dump(doc, f, indent=1)
    print(f"run_peers: wrote {os.path.join(a.out, 'peers.json')} ({len(doc['cells'])} cells, "
          f"{time.monotonic() - t_start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
