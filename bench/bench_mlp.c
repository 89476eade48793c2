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

#include "lazyc.h"
#include "../tools/openmp_env.h"
#include "mlp_model.h"

typedef struct cfg {
    long batch, in, hidden, depth, classes, steps, warmup;
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
} result;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    mlp_cfg mc = { c->batch, c->in, c->hidden, c->depth, c->classes };
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
               "                 [--steps N] [--warmup W]\n");
}

int main(int argc, char **argv)
{
    lz_use_passive_openmp(argv);
    cfg c = { .batch = 64, .in = 784, .hidden = 256, .depth = 1, .classes = 10, .steps = 100, .warmup = 5 };
    const mlp_opt opts[] = {
        { "--batch", &c.batch, 1, 1 << 20 }, { "--in", &c.in, 1, 1 << 20 },
        { "--hidden", &c.hidden, 1, 1 << 20 }, { "--classes", &c.classes, 2, 1 << 20 },
        { "--depth", &c.depth, 0, MLP_MAX_LAYERS - 1 },
        { "--steps", &c.steps, 1, 1 << 20 }, { "--warmup", &c.warmup, 0, 1 << 20 },
    };
    int rc = mlp_parse_args("bench_mlp", argc, argv, opts, sizeof opts / sizeof opts[0], usage);
    if (rc >= 0) return rc;

    printf("MLP %ld-%ldx%ld-%ld, batch %ld, SGD momentum; median of %ld steps after %ld warm-up\n\n",
           c.in, c.hidden, c.depth, c.classes, c.batch, c.steps, c.warmup);
    result r[MODE_COUNT];
    for (int md = 0; md < MODE_COUNT; md++)
        if (run_mode((mode)md, &c, &r[md]) != 0) {
            fprintf(stderr, "bench_mlp: %s mode failed: %s\n", mode_names[md],
                    lz_last_error() ? lz_last_error() : "unknown error");
            return 1;
        }

    printf("%-8s %9s %8s %9s %6s %7s %6s %8s %10s %9s %8s %8s\n", "mode", "step ms", "speedup",
           "host us", "ops", "graphs", "execs", "compiles", "record us", "trace us", "mark us", "cut us");
    printf("%-8s %9s %8s %9s %6s %7s %6s %8s %10s %9s %8s %8s\n", "", "(median)", "vs eager",
           "/step", "/step", "/step", "/step", "", "/op", "/op", "/graph", "/graph");
    for (int md = 0; md < MODE_COUNT; md++)
        printf("%-8s %9.3f %7.2fx %9.1f %6.1f %7.1f %6.1f %8lld %10.2f %9.2f %8.1f %8.1f\n",
               mode_names[md], r[md].step_ms, r[MODE_EAGER].step_ms / r[md].step_ms, r[md].host_us,
               r[md].ops, r[md].graphs, r[md].executions, (long long)r[md].compiles,
               r[md].record_us_per_op, r[md].trace_us_per_op, r[md].mark_us, r[md].cut_us);
    printf("\nlazy mode host overhead: %.2f us per op recorded (own timer; %.2f us from\n"
           "metrics trace_ms); %.1f us per graph (the lz_mark_step call on a cache hit:\n"
           "cut + hash %.1f us, the rest lookup, output placeholders and enqueue);\n"
           "%lld compiles during the timed lazy steps.\n"
           "In eager mode 'record' includes enqueueing each op as its own execution.\n"
           "captured mode: %.1f us of host time per step (the whole lz_call: no IR, no hash).\n",
           r[MODE_LAZY].record_us_per_op, r[MODE_LAZY].trace_us_per_op, r[MODE_LAZY].mark_us,
           r[MODE_LAZY].cut_us, (long long)r[MODE_LAZY].compiles, r[MODE_CAPTURED].host_us);
    return 0;
}
