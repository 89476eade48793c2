#!/usr/bin/env python3
"""The GPU benchmark's table and issue 46's targets, from the files one run
of scripts/device_check.sh writes:

    bench/gpu/report.py --dir OUT > OUT/gpu_bench.md

OUT holds lazyc_<size>_<dtype>/bench.json (`lazyc bench --device cuda
--json`) and torch_<size>_<dtype>.json (bench/gpu/torch_cuda.py), for the
sizes bench and gpu. A missing file or cell is "n/a", never an error; each
target is "met", "NOT met" or "not measured".
"""
import argparse
import json
import math
import os


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def lazyc_ms(d, field="captured_ms"):
    rows = (d or {}).get("rows", [])
    return {r["model"]: r.get(field) for r in rows if r.get(field)}


def torch_ms(d, system):
    return {c["model"]: c["ms"] for c in (d or {}).get("cells", []) if c.get("system") == system and c.get("ms")}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, spec="{:.2f}"):
    return spec.format(x) if x is not None else "n/a"


def table(size, dtype, out_dir):
    lz = load(os.path.join(out_dir, f"lazyc_{size}_{dtype}", "bench.json"))
    tc = load(os.path.join(out_dir, f"torch_{size}_{dtype}.json"))
    cap, lazy = lazyc_ms(lz), lazyc_ms(lz, "lazy_ms")
    execs = lazyc_ms(lz, "executions_per_step")
    eager, comp = torch_ms(tc, "eager"), torch_ms(tc, "compile")
    models = sorted(set(cap) | set(eager) | set(comp))
    lines = [f"### {size} size, {dtype}" + (f" ({tc['device']}, torch {tc['torch']})" if tc else ""), "",
             "| model | lazyc captured ms | lazyc lazy ms | executions/step | torch eager ms | torch.compile ms "
             "| vs eager | vs compile |", "|---|---|---|---|---|---|---|---|"]
    vs_e, vs_c = {}, {}
    for m in models:
        c, e, k = cap.get(m), eager.get(m), comp.get(m)
        vs_e[m] = e / c if c and e else None
        vs_c[m] = k / c if c and k else None
        lines.append(f"| {m} | {fmt(c, '{:.3f}')} | {fmt(lazy.get(m), '{:.3f}')} | {fmt(execs.get(m), '{:g}')} "
                     f"| {fmt(e, '{:.3f}')} | {fmt(k, '{:.3f}')} | {fmt(vs_e[m])}x | {fmt(vs_c[m])}x |")
    ge, gc = geomean(vs_e.values()), geomean(vs_c.values())
    lines += [f"| geometric mean | | | | | | {fmt(ge)}x | {fmt(gc)}x |", ""]
    return lines, vs_e, ge, gc, cap


def target(ok, text):
    return f"- {text}: " + ("not measured" if ok is None else "met" if ok else "NOT met")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    out = ["## lazyc on the GPU: captured step against PyTorch CUDA", ""]
    bench, vs_e_bench, _, _, _ = table("bench", "f32", a.dir)
    gpu, _, ge_gpu, gc_gpu, cap_f32 = table("gpu", "f32", a.dir)
    gpu16, _, _, _, cap_bf16 = table("gpu", "bf16", a.dir)
    out += bench + gpu + gpu16
    measured = [v for v in vs_e_bench.values() if v is not None]
    out += ["## Issue 46's targets", "",
            target(all(v > 1 for v in measured) if measured else None,
                   "captured step below PyTorch CUDA eager on every model at bench size"),
            target(ge_gpu >= 1.2 if ge_gpu else None, f"geometric mean >= 1.2x PyTorch eager at gpu size ({fmt(ge_gpu)}x)"),
            target(gc_gpu >= 1.0 if gc_gpu else None, f"geometric mean >= torch.compile at gpu size ({fmt(gc_gpu)}x)")]
    for m in ("resnet50", "BERT_pytorch", "timm_vision_transformer"):
        f32, b16 = cap_f32.get(m), cap_bf16.get(m)
        r = f32 / b16 if f32 and b16 else None
        out.append(target(r >= 2 if r else None, f"bf16 autocast >= 2x lazyc's float32 step on {m} at gpu size ({fmt(r)}x)"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
