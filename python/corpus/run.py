"""The bridge's conformance corpus: off-the-shelf PyTorch models, built from
their default configurations (random weights, nothing downloaded), trained
through lazyc.torch.train_step.

Per case: 4 steps of SGD (momentum) and of AdamW from the same weights
against eager torch, within tolerances derived from a float32-vs-float64
control of the same run (python/tests/parity.py: the tolerance of each
tensor is the larger of 1e-4 and 30x eager float32's own error against a
float64 run); lazyc executions per step after the first call; and, unless
--no-time, the step time beside eager torch and torch.compile (Inductor),
all three timed in this process one after the other.

    PY=$(scripts/pyenv.sh torch)
    LAZYC_LIB=build/liblazyc.so $PY python/corpus/run.py --fast --no-time   # make test's subset
    LAZYC_LIB=build/liblazyc.so $PY python/corpus/run.py --all              # make corpus
    ... run.py --cases hf_gpt2,nanogpt                                      # some cases

It prints one markdown table row per case as it goes, then the table and
the geometric means; --out FILE writes the table there too. Exit status 1
when a case fails (in --fast, every case must pass).
"""
import argparse
import copy
import math
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, os.path.dirname(HERE))

import torch                        # noqa: E402
import torch.nn as nn               # noqa: E402
import torch.nn.functional as F     # noqa: E402

import parity                       # noqa: E402
import lazyc.torch as lzt           # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def no_dropout(m):
    """Dropout and stochastic depth off, so the run is deterministic (lazyc
    draws its own masks: same distribution, other values)."""
    for mod in m.modules():
        if isinstance(mod, nn.modules.dropout._DropoutNd):
            mod.p = 0.0
        for attr in ("drop_prob", "attention_dropout", "dropout_prob", "dropout"):
            if isinstance(getattr(mod, attr, None), float):
                setattr(mod, attr, 0.0)
        if type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    return m


def ce_seq(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# ---- the cases -------------------------------------------------------------------

class Case:
    def __init__(self, name, build, batch, loss=parity.loss_ce, clip=None, family=""):
        self.name, self.build, self.batch, self.loss, self.clip = name, build, batch, loss, clip
        self.family = family


class HFLM(nn.Module):
    """A HF model as model(x) -> logits (T5: decoder inputs are the labels
    shifted right, as T5ForConditionalGeneration does from labels)."""

    def __init__(self, m, kind):
        super().__init__()
        self.m, self.kind = m, kind

    def forward(self, x):
        if self.kind == "t5":
            return self.m(input_ids=x, labels=x).logits
        return self.m(input_ids=x).logits


def hf(kind, tiny):
    import transformers as T
    drop = dict(attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    small = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=512,
                 max_position_embeddings=128) if tiny else {}
    if kind == "gpt2":
        cfg = T.GPT2Config(n_layer=2, **drop, **(dict(n_embd=64, n_head=4, vocab_size=512, n_positions=128)
                                                 if tiny else {}))
        m = T.GPT2LMHeadModel(cfg)
    elif kind == "llama":
        # Llama's default width (4096, 11008 MLP, 32000 words) is 660M
        # parameters even at 2 layers, past what a float64 reference of 4
        # AdamW steps holds in this machine's memory: the default config at
        # width 512 (grouped-query: 8 heads, 2 key/value heads)
        cfg = T.LlamaConfig(num_hidden_layers=2, **(dict(small, num_key_value_heads=2) if tiny else
                                                    dict(hidden_size=512, intermediate_size=1376,
                                                         num_attention_heads=8, num_key_value_heads=2)))
        m = T.LlamaForCausalLM(cfg)
    elif kind == "bert":
        cfg = T.BertConfig(num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           **small)
        m = T.BertForMaskedLM(cfg)
    elif kind == "t5":
        cfg = T.T5Config(num_layers=2, num_decoder_layers=2, dropout_rate=0.0, decoder_start_token_id=0,
                         **(dict(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=512) if tiny else {}))
        m = T.T5ForConditionalGeneration(cfg)
    elif kind == "vit":
        cfg = T.ViTConfig(num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          num_labels=10, **(dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                 image_size=32, patch_size=8) if tiny else {}))
        return HFImage(T.ViTForImageClassification(cfg))
    return HFLM(no_dropout(m), kind)


class HFImage(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = no_dropout(m)

    def forward(self, x):
        return self.m(pixel_values=x).logits


def tokens(vocab, b=2, s=16):
    def make():
        return torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))
    return make


def images(side, classes=10, b=4):
    def make():
        return torch.rand(b, 3, side, side) * 2 - 1, torch.randint(0, classes, (b,))
    return make


class NanoGPT(nn.Module):
    """Karpathy's nanoGPT model.py: causal self-attention through
    scaled_dot_product_attention(is_causal=True), LayerNorm without bias,
    GELU MLP, the head tied to the token embedding."""

    def __init__(self, vocab=512, ctx=64, d=64, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList([nn.ModuleDict(dict(
            ln_1=nn.LayerNorm(d, bias=False), c_attn=nn.Linear(d, 3 * d, bias=False),
            c_proj=nn.Linear(d, d, bias=False), ln_2=nn.LayerNorm(d, bias=False),
            c_fc=nn.Linear(d, 4 * d, bias=False), mlp_proj=nn.Linear(4 * d, d, bias=False)))
            for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, bias=False)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        self.heads = heads
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        b, t = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(0, t, dtype=torch.long, device=idx.device))
        for blk in self.h:
            q, k, v = blk["c_attn"](blk["ln_1"](x)).split(x.size(-1), dim=2)
            q, k, v = [z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v)]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
            x = x + blk["c_proj"](y.transpose(1, 2).contiguous().view(b, t, -1))
            x = x + blk["mlp_proj"](F.gelu(blk["c_fc"](blk["ln_2"](x))))
        return self.lm_head(self.ln_f(x))


def torchvision_cases():
    import torchvision
    out = []
    for name in torchvision.models.list_models(module=torchvision.models):
        side = 64
        if name.startswith(("vit_", "swin_v2", "maxvit")) or name in ("inception_v3",):
            side = 224 if not name.startswith("inception") else 299
        if name.startswith("swin"):
            side = 64

        def build(name=name):
            kw = {"num_classes": 10}
            if name == "inception_v3":
                kw["aux_logits"] = False
                kw["init_weights"] = True
            if name.startswith("googlenet"):
                kw["aux_logits"] = False
                kw["init_weights"] = True
            return no_dropout(torchvision.models.get_model(name, **kw))
        out.append(Case("tv_" + name, build, images(side), family="torchvision"))
    return out


def timm_cases():
    import timm
    out = []
    for name, side in (("resnet18", 64), ("resnet50", 64), ("convnext_atto", 64), ("convnext_tiny", 64),
                       ("vit_tiny_patch16_224", 224), ("vit_small_patch16_224", 224)):
        out.append(Case("timm_" + name, lambda name=name: no_dropout(timm.create_model(name, num_classes=10)),
                        images(side), family="timm"))
    return out


def cases(which):
    c = [
        Case("nanogpt", lambda: NanoGPT(), tokens(512, 2, 32), ce_seq, clip=1.0, family="nanogpt"),
        Case("hf_gpt2_tiny", lambda: hf("gpt2", True), tokens(512), ce_seq, family="hf"),
        Case("hf_llama_tiny", lambda: hf("llama", True), tokens(512), ce_seq, family="hf"),
        Case("hf_bert_tiny", lambda: hf("bert", True), tokens(512), ce_seq, family="hf"),
        Case("hf_t5_tiny", lambda: hf("t5", True), tokens(512), ce_seq, family="hf"),
        Case("hf_vit_tiny", lambda: hf("vit", True), images(32), family="hf"),
        Case("tv_mobilenet_v3_small_32", lambda: no_dropout(__import__("torchvision").models.mobilenet_v3_small(
            num_classes=10)), images(32), family="torchvision"),
    ]
    if which == "fast":
        return c
    c += [
        Case("hf_gpt2", lambda: hf("gpt2", False), tokens(50257), ce_seq, family="hf"),
        Case("hf_llama", lambda: hf("llama", False), tokens(32000), ce_seq, family="hf"),
        Case("hf_bert", lambda: hf("bert", False), tokens(30522), ce_seq, family="hf"),
        Case("hf_t5", lambda: hf("t5", False), tokens(32128), ce_seq, family="hf"),
        Case("hf_vit", lambda: hf("vit", False), images(224, b=2), family="hf"),
    ]
    # the torchvision models the issue names first, then timm, then the rest
    tv = torchvision_cases()
    first = ("tv_efficientnet_b0", "tv_convnext_tiny", "tv_swin_t", "tv_resnet18", "tv_mobilenet_v3_large")
    tv = sorted(tv, key=lambda k: (first.index(k.name) if k.name in first else len(first)))
    return c + tv[:len(first)] + timm_cases() + tv[len(first):]


# ---- running a case ---------------------------------------------------------------

def median_ms(fn, n):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def time_case(case, model, x, y, reps):
    """(lazyc, eager, inductor) median step time in ms, SGD, same batch."""
    m1, m2, m3 = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
    o1 = torch.optim.SGD(m1.parameters(), lr=1e-3, momentum=0.9)
    o2 = torch.optim.SGD(m2.parameters(), lr=1e-3, momentum=0.9)
    o3 = torch.optim.SGD(m3.parameters(), lr=1e-3, momentum=0.9)

    def eager(m, o):
        def f():
            o.zero_grad(set_to_none=True)
            case.loss(m(x), y).backward()
            o.step()
        return f
    step = lzt.train_step(m1, o1, case.loss)
    step(x, y)
    t_lz = median_ms(lambda: step(x, y), reps)
    step.close()
    t_eager = median_ms(eager(m2, o2), reps)
    t_ind = float("nan")
    try:
        torch._dynamo.reset()
        cm = torch.compile(m3)
        f = eager(cm, o3)
        f()
        t_ind = median_ms(f, reps)
    except Exception as e:  # noqa: BLE001
        print("   inductor failed on %s: %s" % (case.name, str(e).splitlines()[0][:200]), flush=True)
    return t_lz, t_eager, t_ind


# Models above this many parameters are listed, not run: a float64
# reference and three float32 controls of 4 AdamW steps hold ~20 bytes a
# parameter each (~16 GiB at this bound), past a 24 GiB machine's memory
# for the larger ones (ViT-L and -H, RegNetY-128GF).
MAX_PARAMS = 200e6


def compile_case(case, model, x, y):
    """torch.compile(backend="lazyc") training: lazyc executions in a step
    after the first (forward and backward of every compiled graph), the
    ops that fell back to torch, the parameters against eager after 2 SGD
    steps, and an inference call."""
    import warnings
    m1, m2 = copy.deepcopy(model), copy.deepcopy(model)
    o1 = torch.optim.SGD(m1.parameters(), lr=1e-3, momentum=0.9)
    o2 = torch.optim.SGD(m2.parameters(), lr=1e-3, momentum=0.9)
    try:
        torch._dynamo.reset()
        from lazyc.torch.dynamo import STATS, lazyc_backend
        before = dict(STATS)
        # the backend itself: the name "lazyc" comes from the installed
        # package's entry point, and the corpus runs from the checkout
        cm = torch.compile(m2, backend=lazyc_backend)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for i in range(2):
                lzt.metrics_reset()
                for m, o in ((m1, o1), (cm, o2)):
                    o.zero_grad(set_to_none=True)
                    case.loss(m(x), y).backward()
                    o.step()
                execs = lzt.metrics()["executions"]
            trained = dict(STATS)
            cm.eval()
            m1.eval()
            with torch.no_grad():
                inf_err = parity.rel_err(cm(x), m1(x))
        # against the parameters' overall scale: a parameter whose true
        # gradient is 0 (a key bias, a bias before batch norm) starts at 0
        # and moves by rounding noise in both runs
        scale = max(p.abs().max().item() for p in m1.parameters())
        err = max((q - p).abs().max().item() for p, q in zip(m1.parameters(), m2.parameters())) / scale
        fb = sorted({str(a.message).split(": ")[-1] for a in w if "eager torch" in str(a.message)})
        graphs, parts = trained["graphs"] - before["graphs"], trained["parts"] - before["parts"]
        return "%d exec/step, %d graph%s (%d lazyc part%s), params %.0e, inference %.0e%s" % (
            execs, graphs, "s" if graphs != 1 else "", parts, "s" if parts != 1 else "", err, inf_err,
            ("; torch ran " + ", ".join(fb)) if fb else "")
    except Exception as e:  # noqa: BLE001
        return "FAIL %s: %s" % (type(e).__name__, str(e).splitlines()[0][:150] if str(e) else "")


def run_case(case, timing, reps, compile_check=False):
    row = {"case": case.name, "family": case.family}
    torch.manual_seed(0)
    try:
        model = case.build()
        x, y = case.batch()
    except Exception as e:  # noqa: BLE001
        row["error"] = "build: %s" % str(e).splitlines()[0][:200]
        return row
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:
        row["sgd"] = row["adamw"] = "skipped"
        row["error"] = "%.0fM parameters: over the corpus's memory budget (MAX_PARAMS)" % (n / 1e6)
        return row
    for opt in ("sgd", "adamw"):
        try:
            torch.manual_seed(0)
            problems, worst, counters = parity.check(copy.deepcopy(model), x, y, opt, 4, case.loss, case.clip)
            execs = [c[0] for c in counters[2:]]
            row[opt] = "pass" if not problems else "FAIL"
            row["worst_" + opt] = "%.1e/%.0e" % (worst[2], worst[3])
            row["execs"] = max(execs) if execs else None
            if problems:
                row.setdefault("error", "%s: %s" % (opt, problems[0]))
        except Exception as e:  # noqa: BLE001
            row[opt] = "FAIL"
            row.setdefault("error", "%s: %s: %s" % (opt, type(e).__name__, str(e).splitlines()[0][:300]))
    if compile_check:
        row["compile"] = compile_case(case, model, x, y)
    if timing and row.get("sgd") == "pass":
        try:
            row["t"] = time_case(case, model, x, y, reps)
        except Exception as e:  # noqa: BLE001
            row.setdefault("error", "timing: %s" % str(e).splitlines()[0][:200])
    return row


def run_isolated(case, a):
    """The case in a child process: each case's memory (float64 copies,
    Inductor's and lazyc's caches) goes back when it ends, and a case that
    runs out of memory or crashes is that case's row, not the run's end."""
    import json
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), "--one", "--cases", case.name, "--reps", str(a.reps)]
    if a.no_time:
        cmd.append("--no-time")
    if a.compile:
        cmd.append("--compile")
    p = subprocess.run(cmd, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"case": case.name, "family": case.family, "sgd": "FAIL", "adamw": "FAIL",
            "error": "the case's process ended with status %d: %s" % (p.returncode, tail[:200])}


def fmt(row):
    t = row.get("t")
    tcols = ["", "", "", "", ""]
    if t:
        lz, ea, ind = t
        tcols = ["%.1f" % lz, "%.1f" % ea, "%.1f" % ind if ind == ind else "-",
                 "%.2fx" % (ea / lz), "%.2fx" % (ind / lz) if ind == ind else "-"]
    return "| %s | %s | %s | %s | %s | %s | %s |" % (
        row["case"], row.get("sgd", "-"), row.get("adamw", "-"), row.get("execs", "-"),
        " | ".join(tcols), row.get("compile", "").replace("|", "/")[:160],
        row.get("error", "").replace("|", "/")[:160])


HEADER = ("| case | SGD | AdamW | executions/step | lazyc ms | eager ms | Inductor ms | eager/lazyc | "
          "Inductor/lazyc | torch.compile(backend=\"lazyc\") | note |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def main():
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--fast", action="store_true")
    g.add_argument("--all", action="store_true")
    ap.add_argument("--cases", default="")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--compile", action="store_true",
                    help="also train each case with torch.compile(backend=\"lazyc\") (--all sets it)")
    ap.add_argument("--out", default="")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # a child of run_isolated
    a = ap.parse_args()
    pool = cases("all" if (a.all or a.cases) else "fast")
    a.compile = a.compile or a.all
    if a.cases:
        want = a.cases.split(",")
        pool = [c for c in pool if c.name in want]
    if a.one:
        import json
        row = run_case(pool[0], not a.no_time, a.reps, a.compile)
        print("ROW " + json.dumps(row), flush=True)
        return 0
    print(HEADER, flush=True)
    rows = []
    for c in pool:
        t0 = time.time()
        row = run_isolated(c, a) if len(pool) > 1 else run_case(c, not a.no_time, a.reps, a.compile)
        rows.append(row)
        print(fmt(row) + "  <!-- %.0f s -->" % (time.time() - t0), flush=True)
    rows_run = [r for r in rows if r.get("sgd") != "skipped"]
    passed = [r for r in rows_run if r.get("sgd") == "pass" and r.get("adamw") == "pass"]
    one = [r for r in passed if r.get("execs") == 1]
    lines = [HEADER] + [fmt(r) for r in rows]
    timed = [r["t"] for r in rows if r.get("t")]
    summary = "%d of %d cases run pass SGD and AdamW (%d skipped); %d of them at 1 execution per step" % (
        len(passed), len(rows_run), len(rows) - len(rows_run), len(one))
    if timed:
        ge = math.exp(statistics.mean(math.log(e / l) for l, e, i in timed))
        fi = [(l, i) for l, e, i in timed if i == i]
        gi = math.exp(statistics.mean(math.log(i / l) for l, i in fi)) if fi else float("nan")
        faster = sum(1 for l, e, i in timed if l <= e)
        summary += ("; step time at or below eager torch in %d of %d timed; geometric mean speed-up "
                    "%.2fx over eager, %.2fx over Inductor" % (faster, len(timed), ge, gi))
    lines.append("")
    lines.append(summary)
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if len(passed) == len(rows_run) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(2)
