"""PyTorch/XLA's counters as one dict (torch_xla.debug.metrics): graph
executions (samples of the ExecuteTime metric), compiles that missed the
cache (UncachedCompile) and hits (CachedCompile), MarkStep, and the ops
that fell back to the CPU (aten::* counters), which each cost a transfer."""
import torch_xla.debug.metrics as met


def counters():
    d = {}
    data = met.metric_data("ExecuteTime")
    d["executions"] = data[0] if data else 0
    for name in ("UncachedCompile", "CachedCompile", "MarkStep"):
        v = met.counter_value(name)
        d[name] = v if v is not None else 0
    d["cpu_fallbacks"] = sum(met.counter_value(n) or 0 for n in met.counter_names()
                             if n.startswith("aten::"))
    return d


def fallback_ops():
    return sorted(n for n in met.counter_names() if n.startswith("aten::"))


def versions():
    import torch_xla
    import peers_torch as pt
    v = pt.versions()
    v["torch_xla"] = torch_xla.__version__
    return v


def finish(cell, notes=()):
    ops = fallback_ops()
    notes = list(notes)
    if ops:
        notes.append("CPU fallbacks: " + ",".join(o[len("aten::"):] for o in ops))
    return cell.finish("executions", ("UncachedCompile",), notes)
