#!/usr/bin/env python3
"""Merges the peers' cells (run_peers.py's peers.json) with lazyc's own
`lazyc bench --json` object into one table: rows = models; columns =
lazyc's lazy and captured modes, then each peer's median step ms with its
graph executions per step, then the speedup of lazyc's captured step over
each; a second table of the first-step losses; then every cell that did
not run, with its reason.

    bench/peers/table.py --peers bench-out/peers/peers.json \\
        --lazyc bench-out/peers/lazyc.json [--lazyc-log bench-out/peers/lazyc.log] \\
        [--md OUT.md] [--json OUT.json]

The table goes to stdout (markdown), and to --md; --json writes the merged
rows. Standard library only. Exit status 0; 1 when an input cannot be read
or parsed (the message names it); 2 on a usage error.
"""
import argparse
import json
import math
import re
import sys

SYSTEM_NAMES = {  # column titles, in the order the columns appear
    "torch_eager": "torch 2.9 eager",
    "inductor": "Inductor",
    "xla_lazy": "XLA lazy",
    "xla_dynamo": "XLA dynamo",
    "xla_compile": "XLA compile",
    "jax": "JAX jit",
}
REASON_KEYS = ("error", "unavailable", "unsupported", "skipped")


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        sys.exit(print(f"table.py: cannot read the {what} file {path}: {e.strerror}",
                       file=sys.stderr) or 1)
    except ValueError as e:
        sys.exit(print(f"table.py: {path} is not the {what} JSON: {e}", file=sys.stderr) or 1)


def num(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def fmt_ms(v):
    v = num(v)
    return "n/a" if v is None else (f"{v:.0f}" if v >= 1000 else f"{v:.3g}" if v < 1 else f"{v:.1f}")


def fmt_x(v):
    v = num(v)
    return "n/a" if v is None else f"{v:.3g}"


def reason_of(cell):
    for k in REASON_KEYS:
        if k in cell:
            return k, str(cell[k])
    if num(cell.get("ms")) is None:
        return "error", "no time in the result"
    return None, None


def tag(kind, reason):
    """The short word a failed cell shows; the reason is listed below."""
    if kind == "error":
        return "timeout" if reason.startswith("timeout") else \
            "killed" if reason.startswith("killed") else "error"
    return {"unavailable": "n/a", "unsupported": "-", "skipped": "skipped"}[kind]


def lazyc_losses(path):
    """lazyc bench's progress lines: 'M lazy step 1/N  12.3 ms  loss 2.3026'
    -> {M: loss} (lazy mode's first timed step, after the warm-up steps)."""
    out = {}
    if not path:
        return out
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = re.match(r"\s*(\S+) lazy\s+step 1/\d+\s+\S+ ms\s+loss (\S+)", line)
                if m and m.group(1) not in out:
                    out[m.group(1)] = float(m.group(2))
    except (OSError, ValueError):
        pass
    return out


def merge(peers, lazyc, lazyc_loss):
    cells = peers.get("cells", [])
    systems = [s for s in SYSTEM_NAMES if any(c.get("system") == s for c in cells)]
    systems += sorted({c.get("system") for c in cells} - set(systems) - {None})
    models = []
    for c in cells:
        if c.get("model") not in models:
            models.append(c.get("model"))
    lrows = {r.get("model"): r for r in (lazyc or {}).get("rows", [])}
    for m in lrows:
        if m not in models:
            models.append(m)
    rows = []
    for m in models:
        lz = lrows.get(m, {})
        cap = num(lz.get("captured_ms"))
        row = {"model": m, "lazyc": {
            "lazy_ms": num(lz.get("lazy_ms")), "captured_ms": cap,
            "lazy_executions_per_step": num(lz.get("lazy_executions_per_step")),
            "captured_executions_per_step": num(lz.get("executions_per_step")),
            "torch113_eager_ms": num(lz.get("torch_ms")),
            "loss_after_warmup": lazyc_loss.get(m)}, "peers": {}, "captured_speedup": {}}
        for s in systems:
            c = next((c for c in cells if c.get("system") == s and c.get("model") == m), None)
            if c is None:
                continue
            kind, why = reason_of(c)
            p = {"ms": None if kind else num(c.get("ms")),
                 "executions_per_step": num(c.get("executions_per_step")),
                 "compiles": num(c.get("compiles")), "first_loss": num(c.get("first_loss")),
                 "peak_bytes": num(c.get("peak_bytes"))}
            losses = c.get("losses") or []
            w = c.get("warmup", 0)
            p["loss_after_warmup"] = num(losses[w]) if len(losses) > w else None
            if kind:
                p["failed"], p["reason"] = kind, why
            if c.get("note"):
                p["note"] = c["note"]
            row["peers"][s] = p
            row["captured_speedup"][s] = p["ms"] / cap if p["ms"] and cap else None
        rows.append(row)
    return systems, rows


def versions_of(peers):
    v = {}
    for c in peers.get("cells", []):
        v.update(c.get("versions") or {})
    return v


def render(peers, lazyc, systems, rows):
    out = []
    v = versions_of(peers)
    meta = [f"size {peers.get('size', '?')}", f"{peers.get('steps', '?')} timed steps after "
            f"{peers.get('warmup', '?')} warm-up (median)",
            f"{peers.get('timeout_s', '?')} s per cell", peers.get("date", "")]
    out.append("Peers beside lazyc: " + ", ".join(x for x in meta if x))
    out.append(f"CPU: {peers.get('cpu', '?')}, {peers.get('cores', '?')} cores; load average "
               f"{peers.get('load_at_start', float('nan')):.1f} at the start, "
               f"{peers.get('load_at_end', float('nan')):.1f} at the end; "
               f"OMP_WAIT_POLICY={peers.get('omp_wait_policy') or 'default'}")
    if v:
        out.append("Versions: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)))
    out.append("")
    out.append("Median step ms (graph executions per step):")
    out.append("")
    head = ["model", "lazyc lazy", "lazyc captured"] + [SYSTEM_NAMES.get(s, s) for s in systems]
    out.append("| " + " | ".join(head) + " |")
    out.append("| --- |" + " ---: |" * (len(head) - 1))
    failed = []
    for r in rows:
        lz = r["lazyc"]
        cols = [r["model"]]
        for ms, ex in ((lz["lazy_ms"], lz["lazy_executions_per_step"]),
                       (lz["captured_ms"], lz["captured_executions_per_step"])):
            cols.append(fmt_ms(ms) + (f" ({fmt_x(ex)})" if ex is not None and ms else ""))
        for s in systems:
            p = r["peers"].get(s)
            if p is None:
                cols.append("")
            elif "failed" in p:
                cols.append(tag(p["failed"], p["reason"]))
                failed.append(f"- {SYSTEM_NAMES.get(s, s)}, {r['model']}: {p['reason']}")
            else:
                ex = p["executions_per_step"]
                cols.append(fmt_ms(p["ms"]) + (f" ({fmt_x(ex)})" if ex is not None else ""))
        out.append("| " + " | ".join(cols) + " |")
    out.append("")
    out.append("Speedup of lazyc's captured step over each (peer ms / captured ms):")
    out.append("")
    out.append("| model | " + " | ".join(SYSTEM_NAMES.get(s, s) for s in systems) + " |")
    out.append("| --- |" + " ---: |" * len(systems))
    for r in rows:
        sp = [r["captured_speedup"].get(s) for s in systems]
        out.append("| " + r["model"] + " | " + " | ".join(
            f"{x:.2f}x" if x else "n/a" for x in sp) + " |")
    out.append("")
    out.append("Loss of the first timed step (after the warm-up steps). The torch systems "
               "start from the same weights and batch, so theirs must agree, except where "
               "the model has dropout (squeezenet1_1, alexnet, vgg16, BERT_pytorch: each "
               "system draws its own masks); JAX and lazyc draw their own weights and "
               "batch, so theirs agree only in magnitude:")
    out.append("")
    out.append("| model | lazyc lazy | " + " | ".join(SYSTEM_NAMES.get(s, s) for s in systems)
               + " | first-step loss, torch | torch systems' max rel. diff |")
    out.append("| --- |" + " ---: |" * (len(systems) + 3))
    for r in rows:
        lz = r["lazyc"]["loss_after_warmup"]
        vals = [f"{lz:.4f}" if lz is not None else "n/a"]
        for s in systems:
            p = r["peers"].get(s) or {}
            x = p.get("loss_after_warmup")
            vals.append(f"{x:.4f}" if x is not None and "failed" not in p else "n/a")
        first = [p["first_loss"] for s, p in r["peers"].items()
                 if s != "jax" and "failed" not in p and p.get("first_loss") is not None]
        r["torch_first_loss_rel_diff"] = (max(first) - min(first)) / abs(first[0]) \
            if len(first) > 1 and first[0] else None
        vals.append(f"{first[0]:.4f}" if first else "n/a")
        d = r["torch_first_loss_rel_diff"]
        vals.append(f"{d:.1e}" if d is not None else "n/a")
        out.append("| " + r["model"] + " | " + " | ".join(vals) + " |")
    notes = [f"- {SYSTEM_NAMES.get(s, s)}, {r['model']}: {r['peers'][s]['note']}"
             for r in rows for s in systems if (r["peers"].get(s) or {}).get("note")]
    if failed or notes:
        out.append("")
        out.append("Cells that did not run, and notes:")
        out.append("")
        out += failed + notes
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", required=True, help="run_peers.py's peers.json")
    ap.add_argument("--lazyc", help="lazyc bench --json output")
    ap.add_argument("--lazyc-log", help="lazyc bench's stderr (for its losses)")
    ap.add_argument("--md", help="write the table here too")
    ap.add_argument("--json", help="write the merged rows here")
    a = ap.parse_args(argv)
    peers = load(a.peers, "peers")
    if not isinstance(peers, dict) or not isinstance(peers.get("cells"), list):
        print(f"table.py: {a.peers} has no \"cells\" list (is it run_peers.py's peers.json?)",
              file=sys.stderr)
        return 1
    lazyc = load(a.lazyc, "lazyc bench --json") if a.lazyc else None
    if lazyc is not None and not isinstance(lazyc.get("rows"), list):
        print(f"table.py: {a.lazyc} has no \"rows\" list (is it lazyc bench --json?)",
              file=sys.stderr)
        return 1
    systems, rows = merge(peers, lazyc, lazyc_losses(a.lazyc_log))
    text = render(peers, lazyc, systems, rows)
    sys.stdout.write(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peers_meta": {k: peers.get(k) for k in peers if k != "cells"},
                       "versions": versions_of(peers), "systems": systems, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
