"""The conditioning of a forward pass's discrete choices, for the parity
test (model_parity.py): which input of a max-pooling window is the largest,
and which side of its kink a ReLU / ReLU6 input lies on. Where two inputs
of a window are closer than float32 can round that pool's input (or a ReLU
input is that close to its kink), an f32 run may pick the other side: the
gradient then moves to another pixel (or a unit turns on or off), a
discrete change that says nothing about the code (docs/testing.md, "Ties
within rounding").

    probe = Probe(model)     # forward pre-hooks on every MaxPool2d, ReLU, ReLU6
    probe.acts               # name (name#2, ... for later calls) -> a copy of that call's input
    ties(probe64, acts32)    # one record per layer: the closest call and its tau

tau, per layer = FACTOR x PyTorch's own f32 error on that layer's input
(max |x32 - x64| at the same weights, at least one rounding of the
layer's largest input). A closest call with gap < tau is a tie.

FACTOR is 2, not the tolerances' 30: another implementation's rounding of
a forward activation is measured at 1.25-2.2x PyTorch's (vgg16's
features.22, lazyc with and without Winograd, AVX2 cap), and at 30x every
step of vgg16's run has tied windows, the first step too, whose flips
(all at once, in float64) move conv 21's weight gradient by 10% while
lazyc's and PyTorch's f32 gradients agree with float64 to 2.5e-6: they
are not flipped by either. ReLU kinks are reported, not used to cut the
comparison: some ReLU input of every model is within 1x PyTorch's error
of its kink on the first step already (docs/testing.md).
"""
import torch
import torch.nn.functional as F
from torch import nn

FACTOR = 2.0
KINDS = (nn.MaxPool2d, nn.ReLU, nn.ReLU6)


class Probe:
    """Keeps a copy of the input of every max-pool and ReLU of model
    (copies: squeezenet's ReLUs work in place) while on, one entry per
    call: a module called twice in a forward (torchvision's BasicBlock and
    Bottleneck use one ReLU after their first normalisation and after the
    residual add) has its inputs under "name" and "name#2". clear() before
    each new forward."""

    def __init__(self, model):
        self.acts, self.mods, self.hooks, self.calls = {}, {}, [], {}
        for name, m in model.named_modules():
            if isinstance(m, KINDS):
                self.hooks.append(m.register_forward_pre_hook(self._keep(name, m)))

    def _keep(self, name, mod):
        def pre(m, inp):
            k = self.calls.get(name, 0) + 1
            self.calls[name] = k
            key = name if k == 1 else f"{name}#{k}"
            self.acts[key] = inp[0].detach().clone()
            self.mods[key] = mod
        return pre

    def clear(self):
        self.acts.clear()
        self.calls.clear()

    def remove(self):
        for h in self.hooks:
            h.remove()


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def pool_gaps(mod, x):
    """(gaps [N, C, L], out width, geometry): for every window of the
    MaxPool2d mod over x, its largest input minus its second largest
    (inf where a window holds one input, or only exact zeros: ReLU's dead
    outputs, whose gradient is 0 whichever is picked)."""
    k, s = _pair(mod.kernel_size), _pair(mod.stride or mod.kernel_size)
    p, d = _pair(mod.padding), _pair(mod.dilation)
    xp = _padded(mod, x)
    spans = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
    width = (xp.shape[-1] - spans[1]) // s[1] + 1
    n, c = x.shape[0], x.shape[1]
    u = F.unfold(xp, k, dilation=d, stride=s).view(n, c, k[0] * k[1], -1)
    top = u.topk(2, dim=2).values
    ref = F.max_pool2d(x, k, s, p, d, ceil_mode=mod.ceil_mode)
    if ref.shape[-1] != width or not torch.equal(ref.flatten(2), top[:, :, 0]):
        raise RuntimeError(f"choices.pool_gaps: the windows of {mod} over {list(x.shape)} "
                           "are not max_pool2d's")
    gap = top[:, :, 0] - top[:, :, 1]
    dead = (top[:, :, 0] == 0) & (top[:, :, 1] == 0)
    gap = torch.where(dead | torch.isinf(top[:, :, 1]) | torch.isnan(gap),
                      torch.full_like(gap, float("inf")), gap)
    return gap, width, (s, p, spans)


def ties(probe64, acts32):
    """One record per probed layer whose input is in both runs: kind,
    layer, where (the closest window or unit), gap, tau, err (PyTorch's
    f32 error on the input), tie (gap < tau)."""
    out = []
    for name, x64 in probe64.acts.items():
        x32 = acts32.get(name)
        if x32 is None or x32.shape != x64.shape:
            continue
        mod = probe64.mods[name]
        err = (x32.double() - x64.double()).abs().max().item()
        top = x64.abs().max().item()
        tau = FACTOR * max(err, top * 2.0 ** -24)
        if isinstance(mod, nn.MaxPool2d):
            gap, width, (s, p, spans) = pool_gaps(mod, x64.double())
            i = int(gap.argmin())
            g = gap.flatten()[i].item()
            n, rest = divmod(i, gap.shape[1] * gap.shape[2])
            ch, win = divmod(rest, gap.shape[2])
            r0 = (win // width) * s[0] - p[0]
            c0 = (win % width) * s[1] - p[1]
            h, w = x64.shape[-2:]
            where = (f"image {n}, channel {ch}, window rows {max(r0, 0)}-{min(r0 + spans[0], h) - 1}"
                     f" cols {max(c0, 0)}-{min(c0 + spans[1], w) - 1}")
            kind = "max-pool"
        else:
            v = x64.double()
            dist = v.abs()
            if isinstance(mod, nn.ReLU6):
                dist = torch.minimum(dist, (v - 6).abs())
            # exact zeros are structural (a dead unit fed to another ReLU),
            # the same in every precision
            dist = torch.where(v == 0, torch.full_like(dist, float("inf")), dist)
            i = int(dist.argmin())
            g = dist.flatten()[i].item()
            idx = list(torch.unravel_index(torch.tensor(i), tuple(v.shape))) \
                if hasattr(torch, "unravel_index") else _unravel(i, v.shape)
            where = "unit " + ",".join(str(int(j)) for j in idx)
            kind = "ReLU6" if isinstance(mod, nn.ReLU6) else "ReLU"
        out.append({"kind": kind, "layer": name, "where": where, "gap": g, "tau": tau,
                    "err": err, "tie": g < tau})
    return out


def _unravel(i, shape):
    idx = []
    for dim in reversed(shape):
        i, r = divmod(i, dim)
        idx.append(r)
    return idx[::-1]


def flip_hooks(probe64, recs):
    """(A measuring aid, not used by the test: what flipping a step's ties
    does to its gradients, docs/testing.md.) Forward pre-hooks that make each tied max-pool window of recs pick
    its second-largest input (raised to the largest value plus the gap, a
    change within rounding of the forward): the other legitimate choice.
    Returns the hook handles."""
    hooks = []
    for r in recs:
        if r["kind"] != "max-pool" or not r["tie"]:
            continue
        mod, tau = probe64.mods[r["layer"]], r["tau"]
        hooks.append(mod.register_forward_pre_hook(_flipper(mod, tau)))
    return hooks


def _flipper(mod, tau):
    def pre(m, inp):
        x = inp[0]
        gap, width, _ = pool_gaps(mod, x.detach())
        n, c, h, w = x.shape
        plane = torch.arange(h * w, dtype=x.dtype, device=x.device).view(1, 1, h, w)
        pos = pool_index(mod, plane)          # [k*k, L] plane positions, -1 outside
        with torch.no_grad():
            k = _pair(mod.kernel_size)
            u = F.unfold(_padded(mod, x.detach()), k, dilation=_pair(mod.dilation),
                         stride=_pair(mod.stride or mod.kernel_size)).view(n, c, k[0] * k[1], -1)
            top = u.topk(2, dim=2)
            tied = (gap < tau).nonzero()
            y = x.detach().clone().view(n, c, h * w)
            for i, ch, win in tied.tolist():
                a = int(pos[top.indices[i, ch, 0, win], win])
                b = int(pos[top.indices[i, ch, 1, win], win])
                if a >= 0 and b >= 0:
                    y[i, ch, b] = y[i, ch, a] + gap[i, ch, win]
        return (x + (y.view_as(x) - x).detach(),) + tuple(inp[1:])
    return pre


def _geometry(mod, shape):
    """(padding, right padding per axis): PyTorch's output size, ceil mode
    included (the last window starts inside), as -inf padding to unfold;
    a negative right padding crops what floor mode leaves out."""
    k, s = _pair(mod.kernel_size), _pair(mod.stride or mod.kernel_size)
    p, d = _pair(mod.padding), _pair(mod.dilation)
    rights = []
    for size, kk, ss, pp, dd in zip(shape[-2:], k, s, p, d):
        span = dd * (kk - 1) + 1
        out = (size + 2 * pp - span + ((ss - 1) if mod.ceil_mode else 0)) // ss + 1
        if mod.ceil_mode and (out - 1) * ss >= size + pp:
            out -= 1
        rights.append((out - 1) * ss + span - size - pp)
    return p, rights


def _padded(mod, x, value=float("-inf")):
    p, rights = _geometry(mod, x.shape)
    return F.pad(x, (p[1], rights[1], p[0], rights[0]), value=value)


def pool_index(mod, plane):
    """[k*k, L]: the plane position of every window element, -1 in padding."""
    k = _pair(mod.kernel_size)
    u = F.unfold(_padded(mod, plane, -1.0), k, dilation=_pair(mod.dilation),
                 stride=_pair(mod.stride or mod.kernel_size))
    return u.view(k[0] * k[1], -1).long()


def tied_calls(probe64, probe32):
    """Every probed call with a tie within rounding: key -> the record as
    ties() makes it, plus "units" for a ReLU (the flat indices of every unit
    closer to its kink than tau)."""
    out = {}
    for r in ties(probe64, probe32.acts):
        if not r["tie"]:
            continue
        x = probe64.acts[r["layer"]].double()
        if r["kind"] != "max-pool":
            dist = x.abs()
            if r["kind"] == "ReLU6":
                dist = torch.minimum(dist, (x - 6).abs())
            r = dict(r, units=((dist < r["tau"]) & (x != 0)).flatten().nonzero().flatten().tolist())
        out[r["layer"]] = r
    return out


def other_side_hooks(model, recs):
    """Forward pre-hooks that put each tied choice of recs (tied_calls'
    records, keyed per call) on its other side, by a change of the input
    within rounding: a max-pool window takes its second-largest input, a
    ReLU unit's input is mirrored across its kink (x -> -x). Returns the
    handles."""
    by_mod = {}
    mods = dict(model.named_modules())
    for key, r in recs.items():
        name, _, call = key.partition("#")
        by_mod.setdefault(name, {})[int(call or 1)] = r
    hooks = []
    for name, calls in by_mod.items():
        mod = mods[name]
        count = [0]

        def pre(m, inp, calls=calls, count=count):
            count[0] += 1
            r = calls.get(count[0])
            if r is None:
                return None
            x = inp[0]
            if r["kind"] == "max-pool":
                return _flipper(m, r["tau"])(m, inp)
            y = x.detach().clone().flatten()
            idx = torch.tensor(r["units"], dtype=torch.long)
            y[idx] = -y[idx]
            return (x + (y.view_as(x) - x).detach(),) + tuple(inp[1:])
        hooks.append(mod.register_forward_pre_hook(pre))
    return hooks
