/* The timing loop of `lazyc bench`: one model, lazyc's three modes.
 *
 * Each mode trains its own instance of the model, built from the same seed
 * on the same batch: eager (every op runs when recorded), lazy (a scope,
 * then lz_mark_step: one graph per step) and captured (lz_capture once,
 * lz_call per step). Warm-up steps come first, mode by mode; the timed
 * repetitions are then interleaved (eager, lazy, captured, then captured,
 * lazy, eager, ...) so that a slow stretch of a noisy machine hits every
 * mode alike, as in the reference harness. A timed step runs from its first op to the barrier
 * plus lz_wait(): the execution is inside it. The median is reported.
 *
 * Counters come from lz_metrics, reset before every timed step (nothing is
 * in flight then): executions and compiles per step, the FLOPs the
 * compiler counted in the executions enqueued, and the memory peak. The
 * memory figure of an instance is what it holds after its warm-up
 * (parameters, buffers, gradients, momentum, the executables it compiled
 * and their arenas) plus the most a timed step grew on top of that. The
 * captured instance is built first, so the executables it replays are
 * counted against it rather than found in the cache already made by
 * another mode. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "lazyc_optim.h"

enum { N_LZ_MODES = 3 };

typedef struct inst {
    bench_mode mode;
    lz_model *m;
    lz_optimizer *opt;
    lz_tensor *x, *y;
    lz_fn *fn;               /* captured mode */
    int failed;
    int64_t held_bytes;      /* device memory it holds after warm-up */
    int64_t step_growth;     /* the most one timed step added */
    double *ms;
    long n_ms;
    int64_t executions, compiles;
    double flops, kernels, in_place;
    double trace_ms, execute_ms;   /* lz_metrics' host tracing and device kernel time */
    double build_ms;               /* lz_model_new */
    float loss;
    int bf16;                /* forward and loss under lz_autocast_begin(LZ_BF16) */
} inst;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
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

/* Device bytes held now: a metrics reset sets the peak to the current use. */
static int64_t bytes_now(void)
{
    lz_metrics_reset();
    return lz_metrics_get().peak_bytes;
}

/* xorshift64*: the same batch in every mode, run and machine. */
static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* Images: uniform in [-1, 1); tokens and targets: uniform class indices. */
static lz_tensor *make_batch_tensor(lz_dtype dtype, int ndim, const int64_t *shape,
                                    int64_t classes, uint64_t seed)
{
    int64_t n = numel_of(ndim, shape);
    void *v = malloc((size_t)n * lz_dtype_size(dtype));
    if (!v)
        return NULL;
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64(&s);
        if (dtype == LZ_F32)
            ((float *)v)[i] = (float)(2.0 * (double)(r >> 11) / 9007199254740992.0 - 1.0);
        else if (dtype == LZ_I64)
            ((int64_t *)v)[i] = (int64_t)(r % (uint64_t)classes);
        else
            ((int32_t *)v)[i] = (int32_t)(r % (uint64_t)classes);
    }
    lz_tensor *t = lz_from_host(v, dtype, ndim, shape);
    free(v);
    return t;
}

/* The training step, as a capture step function and as the lazy/eager
   body: forward, loss, backward, SGD with momentum. */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    inst *b = ctx;
    lz_optimizer_zero_grad(b->opt);
    /* as torch.autocast is used: forward and loss in the region, backward
       and the optimizer outside (the backward products follow the dtype
       of the forward's operands) */
    if (b->bf16 && lz_autocast_begin(LZ_BF16) != 0)
        return -1;
    lz_tensor *loss = lz_model_loss(b->m, in[0], in[1], 1);
    if (b->bf16)
        lz_autocast_end();
    if (!loss || lz_backward(loss) != 0 || lz_optimizer_step(b->opt) != 0)
        return -1;
    out[0] = loss;
    return 0;
}

static void inst_free(inst *b)
{
    lz_fn_free(b->fn);
    lz_optimizer_free(b->opt);
    lz_free(b->x);
    lz_free(b->y);
    lz_model_free(b->m);
    free(b->ms);
    memset(b, 0, sizeof *b);
}

static int inst_init(inst *b, bench_mode mode, const char *name, const bench_opts *o)
{
    memset(b, 0, sizeof *b);
    b->mode = mode;
    double t0 = now_ms();
    b->bf16 = o->bf16;
    b->m = lz_model_new(name, o->size, 1);
    b->build_ms = now_ms() - t0;
    if (!b->m)
        return -1;
    const lz_model_spec *s = lz_model_get_spec(b->m);
    lz_params *p = lz_model_params(b->m);
    int n = lz_params_count(p);
    lz_tensor **train = malloc(sizeof *train * (size_t)(n > 0 ? n : 1));
    if (!train)
        return -1;
    int nt = lz_params_trainable_list(p, train, n);
    b->opt = lz_optimizer_sgd(train, nt, (lz_sgd_opts){ .lr = 0.01f, .momentum = 0.9f });
    free(train);
    b->x = make_batch_tensor(s->input_dtype, s->input_ndim, s->input_shape, s->num_classes, 11);
    b->y = make_batch_tensor(LZ_I64, s->target_ndim, s->target_shape, s->num_classes, 12);
    b->ms = calloc((size_t)(o->steps > 0 ? o->steps : 1), sizeof *b->ms);
    if (!b->opt || !b->x || !b->y || !b->ms)
        return -1;
    if (mode == BENCH_CAPTURED && !(b->fn = lz_capture(train_step, b, 2, 1)))
        return -1;
    lz_mark_step();     /* anything the constructors left pending */
    return lz_wait();
}

/* One step, timed from its first op to the end of its execution. */
static int run_step(inst *b, double *ms)
{
    lz_tensor *in[2] = { b->x, b->y }, *out[1] = { NULL };
    int rc;
    lz_clear_error();
    double t0 = now_ms();
    if (b->mode == BENCH_CAPTURED) {
        rc = lz_call(b->fn, in, out);
    } else {
        lz_set_eager(b->mode == BENCH_EAGER);
        lz_scope_begin();
        rc = train_step(b, in, out);
        if (rc == 0)
            lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
    }
    rc |= lz_wait();
    double t1 = now_ms();
    lz_set_eager(0);
    if (ms)
        *ms = t1 - t0;
    if (rc == 0 && out[0]) {
        b->loss = lz_item(out[0]);
        if (isnan(b->loss) && lz_last_error())
            rc = -1;
    }
    lz_free(out[0]);
    return rc == 0 ? 0 : -1;
}

static void fail_mode(inst *b, const char *name, bench_row *row, const char *when)
{
    const char *err = lz_last_error() ? lz_last_error() : "unknown error";
    fprintf(stderr, "lazyc bench: %s %s failed %s: %s\n", name, bench_mode_names[b->mode],
            when, err);
    if (!row->note[0])
        snprintf(row->note, sizeof row->note, "%s: %s", bench_mode_names[b->mode], err);
    b->failed = 1;
    lz_set_eager(0);
    lz_wait();
    lz_clear_error();
}

static void timed_step(inst *b, const char *name, bench_row *row, long rep, long reps,
                       int profile)
{
    int64_t before = bytes_now();     /* also zeroes the counters */
    double ms = 0;
    lz_profile_enable(b->mode == BENCH_CAPTURED ? profile : 0);
    int rc = run_step(b, &ms);
    lz_profile_enable(0);
    if (rc != 0) {
        fail_mode(b, name, row, "in a timed step");
        return;
    }
    lz_metrics m = lz_metrics_get();
    b->ms[b->n_ms++] = ms;
    b->executions += m.executions;
    b->compiles += m.compiles;
    b->flops += m.flops;
    b->kernels += (double)m.kernels;
    b->in_place += (double)m.in_place_writes;
    b->trace_ms += m.trace_ms;
    b->execute_ms += m.execute_ms;
    if (m.peak_bytes - before > b->step_growth)
        b->step_growth = m.peak_bytes - before;
    fprintf(stderr, "  %s %-8s step %ld/%ld  %9.2f ms  loss %.4f\n", name,
            bench_mode_names[b->mode], rep + 1, reps, ms, (double)b->loss);
}

static void fill_result(const inst *b, bench_mode_result *r)
{
    r->ms = -1;
    if (b->failed || b->n_ms == 0)
        return;
    double *tmp = malloc(sizeof *tmp * (size_t)b->n_ms);
    if (!tmp)
        return;
    memcpy(tmp, b->ms, sizeof *tmp * (size_t)b->n_ms);
    r->ms = median(tmp, b->n_ms);
    free(tmp);
    r->executions_per_step = (double)b->executions / (double)b->n_ms;
    r->compiles = b->compiles;
    r->flops_per_step = b->flops / (double)b->n_ms;
    r->kernels_per_step = b->kernels / (double)b->n_ms;
    r->peak_bytes = b->held_bytes + b->step_growth;
    r->loss = b->loss;
}

static void print_summary(const char *name, const inst *b, const bench_mode_result *r)
{
    if (r->ms <= 0)
        return;
    /* where a step's time went: what lazy saves over eager and captured
       over lazy is host time (tracing), the kernels being the same */
    fprintf(stderr, "  %s %-8s median %.2f ms, %.4g executions/step, %lld compiles; "
                    "mean trace %.2f ms, execute %.2f ms a step; "
                    "holds %.1f MiB, a step adds up to %.1f MiB and writes %.0f results "
                    "in place\n",
            name, bench_mode_names[b->mode], r->ms, r->executions_per_step,
            (long long)r->compiles, b->trace_ms / (double)b->n_ms,
            b->execute_ms / (double)b->n_ms, b->held_bytes / 1048576.0,
            b->step_growth / 1048576.0, b->in_place / (double)b->n_ms);
}

/* The captured steps' kernel time by op, the slowest first; the share is
   of all kernel time (what the executor spent outside kernels is not in it). */
static void print_profile(const char *name, long steps)
{
    enum { MAX = 256, TOP = 16 };   /* MAX: more than (op, library) pairs */
    lz_profile_entry e[MAX];
    int n = lz_profile_read(e, MAX);
    if (n > MAX) n = MAX;
    double total = 0, per = 1.0 / (double)(steps > 0 ? steps : 1);
    for (int i = 0; i < n; i++) total += e[i].ms;
    fprintf(stderr, "  %s captured: kernel time by op, %.2f ms/step in kernels\n", name, total * per);
    for (int i = 0; i < n && i < TOP; i++)
        fprintf(stderr, "    %-26s %-6s %7.1f calls/step %9.2f ms/step %5.1f%%\n", e[i].op,
                e[i].library ? "oneDNN" : "lazyc", (double)e[i].calls * per, e[i].ms * per,
                total > 0 ? 100.0 * e[i].ms / total : 0.0);
}

/* --profile-steps: the slowest step shapes, with the rate a product ran at. */
static void print_profile_steps(const char *name, long steps)
{
    enum { TOP = 25 };
    lz_profile_step_entry e[TOP];
    const int n = lz_profile_read_steps(e, TOP);
    const double per = 1.0 / (double)(steps > 0 ? steps : 1);
    fprintf(stderr, "  %s captured: the %d slowest of %d step shapes (GFLOP/s: products only)\n",
            name, n < TOP ? n : TOP, n);
    for (int i = 0; i < n && i < TOP; i++) {
        char rate[16] = "";
        if (e[i].flops > 0 && e[i].ms > 0)
            snprintf(rate, sizeof rate, "%7.1f", e[i].flops * (double)e[i].calls / e[i].ms * 1e-6);
        fprintf(stderr, "    %8.2f ms/step %5.1f calls/step %7s  %-20s %-6s %s\n", e[i].ms * per,
                (double)e[i].calls * per, rate, e[i].op, e[i].library ? "oneDNN" : "lazyc",
                e[i].operands);
    }
}

int bench_time_model(const char *name, const bench_opts *o, bench_row *row, lz_model_spec *spec)
{
    /* captured first: see the file comment on memory */
    static const bench_mode build_order[N_LZ_MODES] = { BENCH_CAPTURED, BENCH_LAZY, BENCH_EAGER };
    inst insts[N_LZ_MODES];
    memset(insts, 0, sizeof insts);
    for (int k = 0; k < N_LZ_MODES; k++)
        row->mode[k].ms = -1;
    row->build_ms = row->first_ms = row->first_compile_ms = -1;
    int rc = 0, have_spec = 0, insts_failed[N_LZ_MODES] = { 0 };
    for (int k = 0; k < N_LZ_MODES && rc == 0; k++) {
        bench_mode md = build_order[k];
        inst *b = &insts[md];
        b->failed = 1;
        if (!o->mode_on[md])
            continue;
        int64_t before = bytes_now();
        if (inst_init(b, md, name, o) != 0) {
            /* an unknown model fails in every mode alike: stop at once */
            const char *err = lz_last_error() ? lz_last_error() : "unknown error";
            snprintf(row->note, sizeof row->note, "%s", err);
            inst_free(b);
            b->failed = 1;
            rc = -1;
            break;
        }
        if (!have_spec) {
            row->params = lz_params_numel(lz_model_params(b->m), 1);
            *spec = *lz_model_get_spec(b->m);
            have_spec = 1;
        }
        b->failed = 0;
        /* captured: the first call traces a warm-up, the second captures */
        long warm = md == BENCH_CAPTURED && o->warmup < 2 ? 2 : o->warmup;
        for (long i = 0; i < warm && !b->failed; i++) {
            fprintf(stderr, "  %s %-8s warm-up %ld/%ld\n", name, bench_mode_names[md], i + 1, warm);
            /* the model's first step in this process: its graphs are not
               compiled yet (every later instance finds them cached) */
            const int first = i == 0 && row->first_ms < 0;
            double ms = 0;
            if (first)
                lz_metrics_reset();
            if (run_step(b, first ? &ms : NULL) != 0)
                fail_mode(b, name, row, "in warm-up");
            else if (first) {
                row->build_ms = b->build_ms;
                row->first_ms = ms;
                row->first_compile_ms = lz_metrics_get().compile_ms;
            }
        }
        b->held_bytes = bytes_now() - before;
    }
    lz_profile_reset();
    /* every other repetition runs the modes in reverse order, so no mode
       always follows the same one and a drift of the machine's speed over
       the run weighs on all modes alike */
    for (long rep = 0; rc == 0 && rep < o->steps; rep++)
        for (int k = 0; k < N_LZ_MODES; k++) {
            const int md = rep % 2 ? N_LZ_MODES - 1 - k : k;
            if (!insts[md].failed)
                timed_step(&insts[md], name, row, rep, o->steps, o->profile);
        }
    if (o->profile && rc == 0 && !insts[BENCH_CAPTURED].failed)
        print_profile(name, insts[BENCH_CAPTURED].n_ms);
    if (o->profile == 2 && rc == 0 && !insts[BENCH_CAPTURED].failed)
        print_profile_steps(name, insts[BENCH_CAPTURED].n_ms);
    for (int md = 0; md < N_LZ_MODES; md++) {
        insts_failed[md] = insts[md].failed;
        if (rc == 0) {
            fill_result(&insts[md], &row->mode[md]);
            print_summary(name, &insts[md], &row->mode[md]);
        }
        inst_free(&insts[md]);
    }
    lz_wait();
    lz_clear_error();
    if (rc != 0)
        return -1;
    for (int md = 0; md < N_LZ_MODES; md++)
        if (o->mode_on[md] && insts_failed[md])
            return 1;
    return 0;
}
