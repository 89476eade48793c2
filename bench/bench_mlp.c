/* bench_mlp: times one MLP training step (forward, cross-entropy, backward,
 * SGD with momentum) in eager, lazy and captured mode, and measures the
 * host cost of each: per op recorded and per graph (the barrier's cut,
 * hash, cache lookup and enqueue, on a cache hit) in lazy mode, and the
 * whole lz_call of a replay in captured mode.
 *
 *   bench_mlp [--batch B] [--in D] [--hidden H] [--depth L] [--classes C]
 *             [--steps N] [--warmup W]
 *
 * Each timed step runs from the first op recorded (or lz_call) to the
 * barrier plus lz_wait, so it includes the execution; the table gives
 * medians over N steps after W warm-up steps. --depth adds hidden layers:
 * a captured step's host overhead must not grow with it. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"
#include "lazyc.h"
#include "mlp_model.h"

typedef struct cfg {
    long batch, in, hidden, depth, classes, bias, steps, warmup;
    long modes;              /* bit per mode: 1 eager, 2 lazy, 4 captured */
    long torch;              /* 1: PyTorch eager beside, same run */
} cfg;

typedef enum { MODE_EAGER, MODE_LAZY, MODE_CAPTURED, MODE_COUNT } mode;
static const char *const mode_names[MODE_COUNT] = { "eager", "lazy", "captured" };

typedef struct result {
    double step_ms;          /* median step, recording to execution done */
    double record_us_per_op; /* median over steps of record time / ops */
    double trace_us_per_op;  /* the library's trace_ms over the same ops */
    double mark_us;          /* median lz_mark_step call */
    double cut_us;           /* median part of it the library counts as
                                trace_ms: cutting and hashing the graph */
    double host_us;          /* median host time of a step before it runs:
                                recording + barrier, or the lz_call */
    double ops, graphs, executions;   /* per step */
    int64_t compiles;        /* during the timed steps */
    double pipelined_us;     /* mean step when steps run back to back and the
                                host waits once at the end (lazy, captured) */
    double kernels;          /* kernel launches per step */
} result;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One step of the mode, up to the barrier; *host_us = the host's part. */
static int run_step(mode md, mlp_model *m, lz_fn *f, double *host_us)
{
    double t0 = now_us();
    int rc;
    if (md == MODE_CAPTURED) {
        lz_tensor *in[2] = { m->x, m->y }, *out[1] = { NULL };
        rc = lz_call(f, in, out);
        lz_free(out[0]);
    } else {
        rc = mlp_record_step(m);
        lz_mark_step();
    }
    *host_us = now_us() - t0;
    return rc;
}

static int run_mode(mode md, const cfg *c, result *r)
{
    lz_set_eager(md == MODE_EAGER);
    mlp_model m;
    lz_fn *f = NULL;
    double *step = NULL, *rec = NULL, *mark = NULL, *cut = NULL, *host = NULL;
    mlp_cfg mc = { c->batch, c->in, c->hidden, c->depth, c->classes, c->bias };
    if (mlp_model_init(&m, &mc) != 0 || lz_wait() != 0)
        goto fail;
    if (md == MODE_CAPTURED && !(f = lz_capture(mlp_step_fn, &m, 2, 1)))
        goto fail;
    double ignored;
    /* captured: the first calls trace (a warm-up, then the capture) */
    for (long i = 0; i < c->warmup + (md == MODE_CAPTURED ? 2 : 0); i++)
        if (run_step(md, &m, f, &ignored) != 0)
            goto fail;
    if (lz_wait() != 0)
        goto fail;

    size_t n = (size_t)c->steps;
    step = malloc(sizeof(double) * n); rec = malloc(sizeof(double) * n);
    mark = malloc(sizeof(double) * n); cut = malloc(sizeof(double) * n);
    host = malloc(sizeof(double) * n);
    if (!step || !rec || !mark || !cut || !host)
        goto fail;
    lz_metrics_reset();
    double trace_ms = 0.0;
    int64_t ops = 0;
    for (long i = 0; i < c->steps; i++) {
        lz_metrics m0 = lz_metrics_get();
        double t0 = now_us();
        int rc;
        if (md == MODE_CAPTURED) {
            rc = run_step(md, &m, f, &host[i]);
            rec[i] = mark[i] = cut[i] = 0;
        } else {
            rc = mlp_record_step(&m);
            double t1 = now_us();
            lz_metrics m1 = lz_metrics_get();
            lz_mark_step();
            double t2 = now_us();
            lz_metrics m2 = lz_metrics_get();
            int64_t k = m1.ir_nodes - m0.ir_nodes;
            rec[i] = k > 0 ? (t1 - t0) / (double)k : 0.0;
            mark[i] = t2 - t1;
            cut[i] = (m2.trace_ms - m1.trace_ms) * 1e3;
            host[i] = t2 - t0;
            ops += k;
            trace_ms += m1.trace_ms - m0.trace_ms;
        }
        rc |= lz_wait();
        step[i] = (now_us() - t0) / 1e3;
        if (rc != 0)
            goto fail;
    }
    lz_metrics tot = lz_metrics_get();
    r->kernels = (double)tot.kernels / c->steps;
    r->pipelined_us = -1;
    if (md != MODE_EAGER) {
        double t0 = now_us(), ignored_host;
        for (long i = 0; i < c->steps; i++)
            if (run_step(md, &m, f, &ignored_host) != 0)
                goto fail;
        if (lz_wait() != 0)
            goto fail;
        r->pipelined_us = (now_us() - t0) / (double)c->steps;
    }
    r->step_ms = median(step, c->steps);
    r->record_us_per_op = median(rec, c->steps);
    r->trace_us_per_op = ops > 0 ? trace_ms * 1e3 / (double)ops : 0.0;
    r->mark_us = median(mark, c->steps);
    r->cut_us = median(cut, c->steps);
    r->host_us = median(host, c->steps);
    r->ops = (double)ops / c->steps;
    r->graphs = (double)tot.graphs / c->steps;
    r->executions = (double)tot.executions / c->steps;
    r->compiles = tot.compiles;
    free(step); free(rec); free(mark); free(cut); free(host);
    lz_fn_free(f);
    mlp_model_free(&m);
    lz_set_eager(0);
    return 0;
fail:
    free(step); free(rec); free(mark); free(cut); free(host);
    lz_fn_free(f);
    mlp_model_free(&m);
    lz_set_eager(0);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_mlp [--batch B] [--in D] [--hidden H] [--depth L] [--classes C]\n"
               "                 [--bias 0|1] [--steps N] [--warmup W] [--modes MASK] [--torch 0|1]\n"
               "  --modes   which lazyc modes run: 1 eager + 2 lazy + 4 captured (default 7)\n"
               "  --torch   1 (default): PyTorch eager's step beside, same run, from\n"
               "            bench/mlp_torch.py with $LZ_TORCH_PYTHON or /usr/bin/python3\n"
               "  tiny MLP of the overhead figures: --batch 16 --in 24 --hidden 32\n"
               "            --classes 6 --bias 0 --steps 2000 --warmup 50\n");
}

/* bench/mlp_torch.py next to the build folder holding this program
   (build/bench_mlp -> ./bench/), else under the current directory. */
static int find_torch_script(char *path, size_t cap)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, cap, "%s/../bench/mlp_torch.py", exe);
            if (access(path, R_OK) == 0)
                return 0;
        }
    }
    snprintf(path, cap, "bench/mlp_torch.py");
    return access(path, R_OK) == 0 ? 0 : -1;
}

/* PyTorch eager's median step in microseconds, or -1 with *why set. */
static double torch_step_us(const cfg *c, const char **why)
{
    const char *py = getenv("LZ_TORCH_PYTHON");
    if (!py || !*py)
        py = "/usr/bin/python3";
    char script[4200], cmd[8600], line[512] = "";
    if (access(py, X_OK) != 0 || find_torch_script(script, sizeof script) != 0) {
        *why = access(py, X_OK) != 0 ? "no python interpreter" : "bench/mlp_torch.py not found";
        return -1;
    }
    /* the paths are ours (readlink, or a fixed name) or the user's own
       $LZ_TORCH_PYTHON, run as they would run it */
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_CORETYPE=SkylakeX PYTHONDONTWRITEBYTECODE=1 '%s' '%s' --batch %ld --in %ld "
             "--hidden %ld --depth %ld --classes %ld --bias %ld --steps %ld --warmup %ld",
             py, script, c->batch, c->in, c->hidden, c->depth, c->classes, c->bias, c->steps,
             c->warmup);
    FILE *p = popen(cmd, "r");
    if (!p) {
        *why = "cannot start python";
        return -1;
    }
    if (!fgets(line, sizeof line, p))
        line[0] = '\0';
    pclose(p);
    const char *v = strstr(line, "\"torch_us\":");
    if (!v) {
        *why = strstr(line, "unavailable") ? "torch cannot be imported" : "mlp_torch.py failed";
        return -1;
    }
    return strtod(v + strlen("\"torch_us\":"), NULL);
}

int main(int argc, char **argv)
{
    cfg c = { .batch = 64, .in = 784, .hidden = 256, .depth = 1, .classes = 10, .bias = 1, .steps = 100, .warmup = 5,
              .modes = 7, .torch = 1 };
    const mlp_opt opts[] = {
        { "--batch", &c.batch, 1, 1 << 20 }, { "--in", &c.in, 1, 1 << 20 },
        { "--hidden", &c.hidden, 1, 1 << 20 }, { "--classes", &c.classes, 2, 1 << 20 },
        { "--depth", &c.depth, 0, MLP_MAX_LAYERS - 1 }, { "--bias", &c.bias, 0, 1 },
        { "--steps", &c.steps, 1, 1 << 20 }, { "--warmup", &c.warmup, 0, 1 << 20 },
        { "--modes", &c.modes, 1, 7 }, { "--torch", &c.torch, 0, 1 },
    };
    int rc = mlp_parse_args("bench_mlp", argc, argv, opts, sizeof opts / sizeof opts[0], usage);
    if (rc >= 0) return rc;

    printf("MLP %ld-%ldx%ld-%ld%s, batch %ld, SGD momentum; median of %ld steps after %ld warm-up\n\n",
           c.in, c.hidden, c.depth, c.classes, c.bias ? "" : " (no bias)", c.batch, c.steps, c.warmup);
    result r[MODE_COUNT];
    for (int md = 0; md < MODE_COUNT; md++) {
        r[md].step_ms = -1;
        if (!(c.modes & (1 << md)))
            continue;
        if (run_mode((mode)md, &c, &r[md]) != 0) {
            fprintf(stderr, "bench_mlp: %s mode failed: %s\n", mode_names[md],
                    lz_last_error() ? lz_last_error() : "unknown error");
            return 1;
        }
    }
    const char *why = NULL;
    double torch_us = c.torch ? torch_step_us(&c, &why) : -1;

    printf("%-8s %9s %10s %9s %6s %7s %6s %8s %8s %10s %9s %8s %8s\n", "mode", "step us",
           "pipelined", "host us", "ops", "kernels", "execs", "compiles", "vs torch", "record us",
           "trace us", "mark us", "cut us");
    printf("%-8s %9s %10s %9s %6s %7s %6s %8s %8s %10s %9s %8s %8s\n", "", "(median)", "us/step",
           "/step", "/step", "/step", "/step", "", "(median)", "/op", "/op", "/graph", "/graph");
    for (int md = 0; md < MODE_COUNT; md++) {
        if (r[md].step_ms < 0)
            continue;
        char pipe[32] = "-", vs[32] = "-";
        if (r[md].pipelined_us >= 0)
            snprintf(pipe, sizeof pipe, "%.1f", r[md].pipelined_us);
        if (torch_us > 0)
            snprintf(vs, sizeof vs, "%.2fx", torch_us / (r[md].step_ms * 1e3));
        printf("%-8s %9.1f %10s %9.1f %6.1f %7.1f %6.1f %8lld %8s %10.2f %9.2f %8.1f %8.1f\n",
               mode_names[md], r[md].step_ms * 1e3, pipe, r[md].host_us, r[md].ops, r[md].kernels,
               r[md].executions, (long long)r[md].compiles, vs, r[md].record_us_per_op,
               r[md].trace_us_per_op, r[md].mark_us, r[md].cut_us);
    }
    if (torch_us > 0)
        printf("%-8s %9.1f %10s   (PyTorch eager, bench/mlp_torch.py, same run)\n", "torch",
               torch_us, "-");
    else if (c.torch)
        printf("torch    n/a (%s)\n", why ? why : "not run");
    if (r[MODE_LAZY].step_ms >= 0)
        printf("\nlazy mode host overhead: %.2f us per op recorded (own timer; %.2f us from\n"
               "metrics trace_ms); %.1f us per graph (the lz_mark_step call on a cache hit:\n"
               "cut + hash %.1f us, the rest lookup, output placeholders and enqueue);\n"
               "%lld compiles during the timed lazy steps.\n",
               r[MODE_LAZY].record_us_per_op, r[MODE_LAZY].trace_us_per_op, r[MODE_LAZY].mark_us,
               r[MODE_LAZY].cut_us, (long long)r[MODE_LAZY].compiles);
    if (r[MODE_EAGER].step_ms >= 0)
        printf("In eager mode 'record' includes enqueueing each op as its own execution.\n");
    if (r[MODE_CAPTURED].step_ms >= 0 && r[MODE_CAPTURED].kernels > 0)
        printf("captured mode: %.1f us of host time per step (the whole lz_call: no IR, no hash);\n"
               "pipelined, %.2f us per kernel launched (dispatch and the tiny kernel's work).\n",
               r[MODE_CAPTURED].host_us, r[MODE_CAPTURED].pipelined_us / r[MODE_CAPTURED].kernels);
    return 0;
}
