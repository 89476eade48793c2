/* soak: many steps of the MLP training step (bench/mlp_model.h), lazy and
 * then captured, checking that a long run holds steady: resident memory
 * after the warm-up grows by less than the limit, every step is exactly
 * one execution, and each mode compiles once.
 *
 *   soak [--steps N] [--warmup W] [--read-every R] [--max-growth-kib K]
 *        [--batch B] [--in D] [--hidden H] [--depth L] [--classes C]
 *
 * Each mode runs W warm-up steps and then N steps, reading the loss on
 * the host every R steps (default 1), and calls lz_shutdown at its end, so
 * the next mode starts from a fresh library. Resident memory
 * (/proc/self/statm) is taken after the warm-up and after the last step,
 * both once the queue is empty.
 *
 * Why R = 1 by default: with R > 1 up to R steps are in flight, and how
 * deep the queue gets depends on scheduling. The buffer pool keeps freed
 * blocks for reuse, so the first time the queue runs one step deeper than
 * it did during the warm-up, resident memory rises by one step's buffers
 * (about 2.4 MiB at the default size) and then stays there: bounded, not a
 * leak, but it would make the 1 MiB check fail at random.
 * Exits 1 when a check fails; --max-growth-kib 0 skips the memory check
 * (under valgrind, which also runs this program, memory is its own). */
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
    mlp_cfg m;
    long steps, warmup, read_every, max_growth_kib;
} cfg;

typedef struct result {
    long steps;              /* warm-up included */
    int64_t executions, compiles;
    long rss_warm_kib, rss_end_kib;
    double ms_per_step;      /* after the warm-up */
    float loss;              /* the last one read */
} result;

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* One step; reads the loss when read != 0 (into *loss). */
static int step(mlp_model *m, lz_fn *f, int read, float *loss)
{
    lz_tensor *in[2] = { m->x, m->y }, *out[1] = { NULL };
    int rc;
    if (f) {
        rc = lz_call(f, in, out);
    } else {
        /* the loss is kept every step, read or not, so that every step
           records the same graph */
        lz_scope_begin();
        rc = mlp_step_fn(m, in, out);
        lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
    }
    if (rc == 0 && read) {
        *loss = lz_item(out[0]);
        if (isnan(*loss) && lz_last_error())
            rc = -1;
    }
    lz_free(out[0]);
    return rc;
}

static int run_mode(int captured, const cfg *c, result *r)
{
    memset(r, 0, sizeof *r);
    mlp_model m;
    lz_fn *f = NULL;
    int rc = mlp_model_init(&m, &c->m);
    if (rc == 0 && captured && !(f = lz_capture(mlp_step_fn, &m, 2, 1)))
        rc = -1;
    lz_metrics_reset();
    double t0 = 0;
    for (long i = 0; rc == 0 && i < c->warmup + c->steps; i++) {
        if (i == c->warmup) {
            rc = lz_wait();
            r->rss_warm_kib = rss_kib();
            t0 = now_ms();
        }
        if (rc == 0)
            rc = step(&m, f, (i + 1) % c->read_every == 0, &r->loss);
        r->steps++;
    }
    if (rc == 0)
        rc = lz_wait();
    r->ms_per_step = (now_ms() - t0) / (double)c->steps;
    r->rss_end_kib = rss_kib();
    lz_metrics mt = lz_metrics_get();
    r->executions = mt.executions;
    r->compiles = mt.compiles;
    lz_fn_free(f);
    mlp_model_free(&m);
    lz_shutdown();
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: soak [--steps N] [--warmup W] [--read-every R] [--max-growth-kib K]\n"
               "            [--batch B] [--in D] [--hidden H] [--depth L] [--classes C]\n");
}

int main(int argc, char **argv)
{
    cfg c = { .m = { .batch = 64, .in = 784, .hidden = 256, .depth = 1, .classes = 10, .bias = 1 },
              .steps = 10000, .warmup = 200, .read_every = 1, .max_growth_kib = 1024 };
    const mlp_opt opts[] = {
        { "--steps", &c.steps, 1, 1L << 30 }, { "--warmup", &c.warmup, 0, 1L << 30 },
        { "--read-every", &c.read_every, 1, 1L << 30 },
        { "--max-growth-kib", &c.max_growth_kib, 0, 1L << 30 },
        { "--batch", &c.m.batch, 1, 1 << 20 }, { "--in", &c.m.in, 1, 1 << 20 },
        { "--hidden", &c.m.hidden, 1, 1 << 20 }, { "--classes", &c.m.classes, 2, 1 << 20 },
        { "--depth", &c.m.depth, 0, MLP_MAX_LAYERS - 1 },
    };
    int rc = mlp_parse_args("soak", argc, argv, opts, sizeof opts / sizeof opts[0], usage);
    if (rc >= 0) return rc;

    printf("soak: MLP %ld-%ldx%ld-%ld, batch %ld, SGD momentum; %ld steps per mode after %ld "
           "warm-up, loss read every %ld\n\n",
           c.m.in, c.m.hidden, c.m.depth, c.m.classes, c.m.batch, c.steps, c.warmup, c.read_every);
    printf("%-8s %7s %10s %8s %13s %12s %11s %8s %8s\n", "mode", "steps", "executions", "compiles",
           "rss warm KiB", "rss end KiB", "growth KiB", "ms/step", "loss");
    int failed = 0;
    for (int captured = 0; captured < 2; captured++) {
        const char *name = captured ? "captured" : "lazy";
        result r;
        if (run_mode(captured, &c, &r) != 0) {
            fprintf(stderr, "soak: %s mode failed: %s\n", name,
                    lz_last_error() ? lz_last_error() : "unknown error");
            return 1;
        }
        long growth = r.rss_end_kib - r.rss_warm_kib;
        printf("%-8s %7ld %10lld %8lld %13ld %12ld %11ld %8.3f %8.4f\n", name, r.steps,
               (long long)r.executions, (long long)r.compiles, r.rss_warm_kib, r.rss_end_kib,
               growth, r.ms_per_step, (double)r.loss);
        fflush(stdout);   /* before any complaint on stderr */
        if (r.executions != r.steps) {
            fprintf(stderr, "soak: %s: %lld executions for %ld steps\n", name,
                    (long long)r.executions, r.steps);
            failed = 1;
        }
        if (r.compiles != 1) {
            fprintf(stderr, "soak: %s: %lld compiles, expected 1\n", name, (long long)r.compiles);
            failed = 1;
        }
        if (c.max_growth_kib && (r.rss_warm_kib < 0 || growth >= c.max_growth_kib)) {
            fprintf(stderr, "soak: %s: resident memory grew by %ld KiB after the warm-up "
                            "(limit %ld KiB)\n", name, growth, c.max_growth_kib);
            failed = 1;
        }
    }
    printf("\nsoak: %s\n", failed ? "FAILED" : "ok");
    return failed;
}
