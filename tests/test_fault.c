/* Fault injection (issue 7): the N-th device allocation or kernel call
 * fails. A failed step reports its error on the next read of a result it
 * would have produced and on the next lz_wait (once); the parameters and
 * optimizer state it would have updated keep their previous values, so the
 * next step runs normally and the run equals an unfaulted one with that
 * step left out. Checked in the first execution of a lazy step, in a
 * captured replay, during compile, and in eager mode. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "backend/buffer.h"
#include "backend/memory.h"
#include "base/fault.h"
#include "engine/cache.h"
#include "engine/tensor.h"

enum { B = 16, IN = 8, OUT = 4, MAX_STEPS = 6 };

typedef struct model {
    int hid;
    lz_tensor *w[2];
    lz_sgd *opt;
    lz_params *state;        /* the momentum buffers */
    lz_tensor *x, *y;
} model;

static float xs[B * IN];
static int64_t ys[B];

static void model_init(model *m, int hid)
{
    m->hid = hid;
    m->w[0] = lz_test_rand(11, -0.5f, 0.5f, 2, (int64_t[]){IN, hid});
    m->w[1] = lz_test_rand(12, -0.5f, 0.5f, 2, (int64_t[]){hid, OUT});
    lz_requires_grad(m->w[0], 1);
    lz_requires_grad(m->w[1], 1);
    m->opt = lz_sgd_new(m->w, 2, (lz_sgd_opts){.lr = 0.2f, .momentum = 0.9f});
    m->state = lz_params_new();
    CHECK(lz_sgd_state(m->opt, m->state, "opt") == 0);
    CHECK_EQ_I(lz_params_count(m->state), 3);   /* the buffers and a started flag */
    m->x = lz_from_host(xs, LZ_F32, 2, (int64_t[]){B, IN});
    m->y = lz_from_host(ys, LZ_I64, 1, (int64_t[]){B});
}

static void model_free(model *m)
{
    lz_params_free(m->state);
    lz_sgd_free(m->opt);
    lz_free(m->w[0]); lz_free(m->w[1]); lz_free(m->x); lz_free(m->y);
}

static int state_len(const model *m) { return 2 * (IN * m->hid + m->hid * OUT); }

/* Parameters then momentum buffers, as floats; -1 if one reports an error. */
static int read_state(model *m, float *dst)
{
    lz_tensor *ts[4] = {m->w[0], m->w[1], lz_params_at(m->state, 0), lz_params_at(m->state, 1)};
    for (int i = 0; i < 4; i++) {
        int64_t n = lz_numel(ts[i]);
        if (lz_to_host(ts[i], dst, sizeof(float) * (size_t)n) != 0) return -1;
        dst += n;
    }
    return 0;
}

/* The training step, lazily or as a captured function (in = {x, y}). */
static int step_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    lz_tensor *h = lz_relu(lz_matmul(in[0], m->w[0]));
    out[0] = lz_cross_entropy(lz_matmul(h, m->w[1]), in[1]);
    lz_sgd_zero_grad(m->opt);
    if (lz_backward(out[0]) != 0) return -1;
    return lz_sgd_step(m->opt);
}

/* Records one lazy step and marks it; returns the loss (not yet read). */
static lz_tensor *lazy_step(model *m)
{
    lz_tensor *loss[1] = {NULL};
    lz_scope_begin();
    lz_tensor *in[2] = {m->x, m->y};
    CHECK(step_fn(m, in, loss) == 0);
    lz_keep(loss[0]);
    lz_scope_end();
    lz_mark_step();
    return loss[0];
}

/* An unfaulted run: the loss of each step and the state before each. */
typedef struct trajectory {
    float loss[MAX_STEPS];
    float *state[MAX_STEPS + 1];
} trajectory;

static void reference(int hid, int steps, trajectory *r)
{
    model m;
    model_init(&m, hid);
    for (int s = 0; s <= steps; s++) {
        r->state[s] = malloc(sizeof(float) * (size_t)state_len(&m));
        CHECK(read_state(&m, r->state[s]) == 0);
        if (s == steps) break;
        lz_tensor *loss = lazy_step(&m);
        r->loss[s] = lz_item(loss);
        lz_free(loss);
    }
    CHECK(lz_wait() == 0);
    model_free(&m);
}

static void reference_free(trajectory *r, int steps)
{
    for (int s = 0; s <= steps; s++) free(r->state[s]);
}

/* The model's state equals the reference's after `step` good steps. */
static void check_state(model *m, const trajectory *r, int step, int line)
{
    int n = state_len(m);
    float *v = malloc(sizeof(float) * (size_t)n);
    int rc = read_state(m, v);
    if (rc != 0) fprintf(stderr, "line %d: state unreadable\n", line);
    CHECK(rc == 0);
    double worst = 0;
    for (int i = 0; rc == 0 && i < n; i++) worst = fmax(worst, fabs((double)v[i] - r->state[step][i]));
    if (worst > 1e-5) fprintf(stderr, "line %d: state differs from step %d by %g\n", line, step, worst);
    CHECK(worst <= 1e-5);
    free(v);
}

static int error_has(const char *what)
{
    const char *e = lz_last_error();
    return e && strstr(e, what) != NULL;
}

/* A failed loss: the read fails with the fault's message, not garbage. */
static void check_failed_loss(lz_tensor *loss, const char *what)
{
    lz_clear_error();
    float v = lz_item(loss);
    CHECK(isnan(v));
    CHECK(error_has(what));
    float buf[1];
    lz_clear_error();
    CHECK(lz_to_host(loss, buf, sizeof buf) == -1);
    CHECK(error_has(what));
}

/* lz_wait reports the failure once; the one after is clean. */
static void check_reported_once(const char *what)
{
    lz_clear_error();
    CHECK(lz_wait() == -1);
    CHECK(error_has(what));
    lz_clear_error();
    CHECK(lz_wait() == 0);
    CHECK(lz_last_error() == NULL);
}

static void arm(int kind, long n)
{
    CHECK(lz_wait() == 0);   /* nothing in flight may count towards n */
    lz_fault_reset();
    lz_fault_set(kind, n);
}

/* LZ_FAULT_KERNEL from the environment, read at the first kernel. */
static void test_env_switch(void)
{
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, (int64_t[]){4, 4});
    lz_tensor *s = lz_sum(lz_relu(lz_matmul(a, a)));
    CHECK(lz_fault_fired(LZ_FAULT_KERNEL) == 0);
    lz_clear_error();
    CHECK(isnan(lz_item(s)));
    CHECK(error_has("injected fault in kernel"));
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_KERNEL), 1);
    check_reported_once("injected fault in kernel");
    lz_free(s);
    /* fires once: the same graph runs again */
    lz_tensor *s2 = lz_sum(lz_relu(lz_matmul(a, a)));
    lz_clear_error();
    CHECK(!isnan(lz_item(s2)));
    CHECK(lz_last_error() == NULL);
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_KERNEL), 1);
    lz_free(s2);
    lz_free(a);
    lz_fault_reset();
}

/* (a) A kernel fails in the first execution of a lazy step (which also
   compiles it): results report the error, state is kept, the next steps
   equal the unfaulted run. Then an allocation fails on a later step. */
static void test_lazy(void)
{
    model m;
    model_init(&m, 16);
    lz_metrics_reset();
    lz_tensor *in[2] = {m.x, m.y}, *out[1];
    lz_scope_begin();
    CHECK(step_fn(&m, in, out) == 0);
    lz_keep(out[0]);
    lz_scope_end();
    arm(LZ_FAULT_KERNEL, 1);
    lz_mark_step();
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(mt.executions, 1);
    check_failed_loss(out[0], "injected fault in kernel ");
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_KERNEL), 1);
    /* the step made the gradients (no earlier value): they report it too */
    float g[IN * 16];
    lz_clear_error();
    CHECK(lz_to_host(lz_grad(m.w[0]), g, sizeof g) == -1);
    CHECK(error_has("injected fault in kernel"));
    lz_free(out[0]);
    check_reported_once("injected fault in kernel");

    trajectory r;
    reference(16, 4, &r);
    /* (e) parameters and momentum buffers hold their values from before */
    check_state(&m, &r, 0, __LINE__);

    /* the next steps run normally, as if the failed one never ran */
    lz_metrics_reset();
    for (int s = 0; s < 2; s++) {
        lz_tensor *l = lazy_step(&m);
        lz_clear_error();
        CHECK_NEAR(lz_item(l), r.loss[s], 1e-5);
        CHECK(lz_last_error() == NULL);
        lz_free(l);
        check_state(&m, &r, s + 1, __LINE__);
    }
    CHECK(lz_wait() == 0);
    mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.executions, 2);

    /* An output buffer cannot be allocated: nothing is enqueued, the same
       semantics hold. The step is a cache hit, so the first allocation
       after marking it is its first output. */
    lz_tensor *l = NULL;
    lz_scope_begin();
    CHECK(step_fn(&m, in, out) == 0);
    l = lz_keep(out[0]);
    lz_scope_end();
    arm(LZ_FAULT_ALLOC, 1);
    lz_metrics_reset();
    lz_mark_step();
    mt = lz_metrics_get();
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_ALLOC), 1);
    CHECK_EQ_I(mt.executions, 0);
    CHECK_EQ_I(mt.cache_hits, 1);
    CHECK(!lz_is_pending(l));
    CHECK(!lz_is_pending(m.w[0]));
    check_failed_loss(l, "device allocation");
    lz_free(l);
    check_state(&m, &r, 2, __LINE__);
    check_reported_once("device allocation");
    for (int s = 2; s < 4; s++) {
        lz_tensor *l2 = lazy_step(&m);
        CHECK_NEAR(lz_item(l2), r.loss[s], 1e-5);
        lz_free(l2);
        check_state(&m, &r, s + 1, __LINE__);
    }
    CHECK(lz_wait() == 0);
    reference_free(&r, 4);
    model_free(&m);
}

/* (c) The compile fails (its arena cannot be allocated): no cache entry,
   nothing enqueued, results report it, state kept; the next step compiles
   and runs. Hidden size 20: a graph no other test compiled. */
static void test_compile_lazy(void)
{
    trajectory r;
    reference(20, 2, &r);
    lz_cache_clear();
    model m;
    model_init(&m, 20);
    lz_tensor *in[2] = {m.x, m.y}, *out[1];
    lz_scope_begin();
    CHECK(step_fn(&m, in, out) == 0);
    lz_keep(out[0]);
    lz_scope_end();
    arm(LZ_FAULT_ALLOC, 1);
    lz_metrics_reset();
    lz_clear_error();
    lz_mark_step();
    CHECK(error_has("executable arena"));
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_ALLOC), 1);
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.executions, 0);
    CHECK_EQ_I(lz_cache_size(), 0);
    check_failed_loss(out[0], "executable arena");
    lz_free(out[0]);
    check_state(&m, &r, 0, __LINE__);
    check_reported_once("executable arena");
    lz_metrics_reset();
    for (int s = 0; s < 2; s++) {
        lz_tensor *l = lazy_step(&m);
        CHECK_NEAR(lz_item(l), r.loss[s], 1e-5);
        lz_free(l);
        check_state(&m, &r, s + 1, __LINE__);
    }
    mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(lz_cache_size(), 1);
    CHECK(lz_wait() == 0);
    reference_free(&r, 2);
    model_free(&m);
}

static lz_tensor *call(lz_fn *f, model *m, int *rc)
{
    lz_tensor *in[2] = {m->x, m->y}, *out[1] = {NULL};
    *rc = lz_call(f, in, out);
    return out[0];
}

/* (b) Captured: a kernel fails in the capture's first execution and in a
   replay, an allocation fails in a replay; each time the state is kept and
   the following replays equal the unfaulted run. */
static void test_capture(void)
{
    trajectory r;
    reference(16, 4, &r);
    model m;
    model_init(&m, 16);
    lz_fn *f = lz_capture(step_fn, &m, 2, 1);
    int rc, good = 0;

    /* call 1: a warm-up (it makes the gradients), runs normally */
    lz_tensor *l = call(f, &m, &rc);
    CHECK(rc == 0);
    CHECK_NEAR(lz_item(l), r.loss[good], 1e-5);
    lz_free(l);
    good++;

    /* call 2: traced and captured; its one execution fails */
    arm(LZ_FAULT_KERNEL, 1);
    lz_metrics_reset();
    l = call(f, &m, &rc);
    CHECK(rc == 0);
    check_failed_loss(l, "injected fault in kernel ");
    lz_free(l);
    check_state(&m, &r, good, __LINE__);
    check_reported_once("injected fault in kernel");

    /* call 3: a replay, runs normally */
    lz_metrics_reset();
    l = call(f, &m, &rc);
    CHECK(rc == 0);
    CHECK_NEAR(lz_item(l), r.loss[good], 1e-5);
    lz_free(l);
    good++;
    check_state(&m, &r, good, __LINE__);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.capture_replays, 1);
    CHECK_EQ_I(mt.executions, 1);
    CHECK_EQ_I(mt.compiles, 0);

    /* call 4: a replay whose second kernel fails */
    arm(LZ_FAULT_KERNEL, 2);
    lz_metrics_reset();
    l = call(f, &m, &rc);
    CHECK(rc == 0);
    check_failed_loss(l, "injected fault in kernel ");
    lz_free(l);
    CHECK_EQ_I(lz_metrics_get().capture_replays, 1);
    check_state(&m, &r, good, __LINE__);
    check_reported_once("injected fault in kernel");

    /* call 5: a replay whose first output cannot be allocated: lz_call
       fails at once, nothing is enqueued, nothing changes */
    arm(LZ_FAULT_ALLOC, 1);
    lz_metrics_reset();
    lz_clear_error();
    l = call(f, &m, &rc);
    CHECK(rc == -1);
    CHECK(l == NULL);
    CHECK(error_has("device allocation"));
    CHECK_EQ_I(lz_metrics_get().executions, 0);
    check_state(&m, &r, good, __LINE__);
    check_reported_once("device allocation");

    /* calls 6, 7: replays, equal to the unfaulted run */
    lz_metrics_reset();
    for (; good < 4; good++) {
        l = call(f, &m, &rc);
        CHECK(rc == 0);
        CHECK_NEAR(lz_item(l), r.loss[good], 1e-5);
        lz_free(l);
        check_state(&m, &r, good + 1, __LINE__);
    }
    mt = lz_metrics_get();
    CHECK_EQ_I(mt.capture_replays, 2);
    CHECK_EQ_I(mt.compiles, 0);
    CHECK(lz_wait() == 0);
    lz_fn_free(f);
    reference_free(&r, 4);
    model_free(&m);
}

/* (c) The compile of a captured function's first call fails: lz_call
   returns -1, no cache entry, state kept; the next call runs. */
static void test_compile_capture(void)
{
    trajectory r;
    reference(24, 3, &r);
    lz_cache_clear();
    model m;
    model_init(&m, 24);
    lz_fn *f = lz_capture(step_fn, &m, 2, 1);
    int rc;
    arm(LZ_FAULT_ALLOC, 1);
    lz_metrics_reset();
    lz_clear_error();
    lz_tensor *l = call(f, &m, &rc);
    CHECK(rc == -1);
    CHECK(l == NULL);
    CHECK(error_has("executable arena"));
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_ALLOC), 1);
    CHECK_EQ_I(lz_metrics_get().compiles, 0);
    CHECK_EQ_I(lz_metrics_get().executions, 0);
    CHECK_EQ_I(lz_cache_size(), 0);
    check_state(&m, &r, 0, __LINE__);
    check_reported_once("executable arena");
    lz_metrics_reset();
    for (int s = 0; s < 3; s++) {
        l = call(f, &m, &rc);
        CHECK(rc == 0);
        CHECK_NEAR(lz_item(l), r.loss[s], 1e-5);
        lz_free(l);
        check_state(&m, &r, s + 1, __LINE__);
    }
    CHECK_EQ_I(lz_metrics_get().compiles, 1);
    CHECK(lz_metrics_get().capture_replays >= 1);
    CHECK(lz_wait() == 0);
    lz_fn_free(f);
    reference_free(&r, 3);
    model_free(&m);
}

/* A forward-only function is steady at once: its first call traces,
   compiles and captures, and that compile fails. */
static int forward_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_sum(lz_relu(lz_matmul(in[0], in[1])));
    return 0;
}

static void test_compile_capture_steady(void)
{
    lz_cache_clear();
    lz_tensor *in[2] = {lz_test_rand(5, -1, 1, 2, (int64_t[]){6, 5}),
                        lz_test_rand(6, -1, 1, 2, (int64_t[]){5, 7})}, *out[1];
    lz_scope_begin();
    float expect = lz_item(lz_sum(lz_relu(lz_matmul(in[0], in[1]))));
    lz_scope_end();
    lz_mark_step();
    lz_cache_clear();
    lz_fn *f = lz_capture(forward_fn, NULL, 2, 1);
    arm(LZ_FAULT_ALLOC, 1);
    lz_metrics_reset();
    lz_clear_error();
    CHECK(lz_call(f, in, out) == -1);
    CHECK(out[0] == NULL);
    CHECK(error_has("executable arena"));
    CHECK_EQ_I(lz_fault_fired(LZ_FAULT_ALLOC), 1);
    CHECK_EQ_I(lz_metrics_get().compiles, 0);
    CHECK_EQ_I(lz_cache_size(), 0);
    check_reported_once("executable arena");
    for (int i = 0; i < 3; i++) {
        CHECK(lz_call(f, in, out) == 0);
        CHECK_NEAR(lz_item(out[0]), expect, 1e-5);
        lz_free(out[0]);
    }
    CHECK_EQ_I(lz_metrics_get().compiles, 1);
    CHECK_EQ_I(lz_metrics_get().capture_replays, 2);
    CHECK(lz_wait() == 0);
    lz_fn_free(f);
    lz_free(in[0]); lz_free(in[1]);
}

/* Eager: execution is still asynchronous, so the op whose kernel fails
   returns a tensor that reports the failure when read; the next op runs. */
static void test_eager(void)
{
    lz_set_eager(1);
    lz_tensor *a = lz_test_rand(3, -1, 1, 1, (int64_t[]){8});
    arm(LZ_FAULT_KERNEL, 1);
    lz_clear_error();
    lz_tensor *b = lz_relu(a);
    CHECK(b != NULL);
    float v[8], x[8];
    CHECK(lz_to_host(b, v, sizeof v) == -1);
    CHECK(error_has("injected fault in kernel relu"));
    check_reported_once("injected fault in kernel relu");
    lz_free(b);
    b = lz_relu(a);
    CHECK(b != NULL);
    CHECK(lz_to_host(a, x, sizeof x) == 0);
    CHECK(lz_to_host(b, v, sizeof v) == 0);
    for (int i = 0; i < 8; i++) CHECK(v[i] == (x[i] > 0 ? x[i] : 0));
    lz_free(a); lz_free(b);
    lz_set_eager(0);
}

/* A replay writes the parameters and momentum buffers over their old
   values (compile/inplace.c). A fault in any one of its kernels, the last
   included, must still leave every one of them at its previous value: the
   in-place updates run all or none. */
static void test_replay_every_kernel(void)
{
    trajectory r;
    reference(16, 3, &r);
    model m;
    model_init(&m, 16);
    lz_fn *f = lz_capture(step_fn, &m, 2, 1);
    int rc, good = 0;
    for (; good < 2; good++) lz_free(call(f, &m, &rc));   /* warm-up, capture */
    CHECK(lz_wait() == 0);
    const lz_buffer *w0 = m.w[0]->node->buf;
    lz_metrics_reset();
    lz_free(call(f, &m, &rc));                             /* a good replay */
    good++;
    CHECK(lz_wait() == 0);
    CHECK(m.w[0]->node->buf == w0);                        /* it donated */
    long kernels = lz_metrics_get().kernels;
    CHECK(kernels >= 4);
    for (long n = 1; n <= kernels; n++) {
        arm(LZ_FAULT_KERNEL, n);
        lz_tensor *l = call(f, &m, &rc);
        CHECK(rc == 0);
        check_failed_loss(l, "injected fault in kernel ");
        lz_free(l);
        CHECK_EQ_I(lz_fault_fired(LZ_FAULT_KERNEL), 1);
        check_state(&m, &r, good, __LINE__);
        check_reported_once("injected fault in kernel");
    }
    lz_fault_reset();
    lz_fn_free(f);
    reference_free(&r, 3);
    model_free(&m);
}

/* Every allocation and every kernel of a short captured run, in turn: each
   fault is reported (a failed call or a failed read), the run recovers,
   and the next lz_wait after the one that reports is clean. */
static void test_sweep(void)
{
    for (int kind = 0; kind <= LZ_FAULT_KERNEL; kind++) {
        int swept = 0;
        for (long n = 1; n <= 40; n++) {
            model m;
            model_init(&m, 16);
            lz_fn *f = lz_capture(step_fn, &m, 2, 1);
            arm(kind, n);
            int errors = 0, rc;
            for (int s = 0; s < 4; s++) {
                lz_tensor *l = call(f, &m, &rc);
                lz_clear_error();
                if (rc != 0 || isnan(lz_item(l))) errors++;
                lz_free(l);
            }
            lz_wait();
            long fired = lz_fault_fired(kind);
            lz_fault_reset();
            if (fired ? errors == 0 : errors != 0)
                fprintf(stderr, "sweep kind %d n %ld: fired %ld, errors %d\n", kind, n, fired, errors);
            CHECK(fired ? errors > 0 : errors == 0);
            swept += fired > 0;
            CHECK(lz_wait() == 0);
            lz_tensor *l = call(f, &m, &rc);
            CHECK(rc == 0);
            CHECK(isfinite(lz_item(l)));
            lz_free(l);
            CHECK(lz_wait() == 0);
            lz_fn_free(f);
            model_free(&m);
        }
        CHECK(swept >= 10);   /* the run has that many allocations and kernels */
    }
}

/* The tensors alive (every handle, pending or data). */
static int tensors_alive(void)
{
    int n = 0;
    for (const lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    return n;
}

/* A lazy step that may fail anywhere: its status, the loss (or NULL). */
static lz_tensor *lazy_step_rc(model *m, int *rc)
{
    lz_tensor *loss[1] = {NULL};
    lz_scope_begin();
    lz_tensor *in[2] = {m->x, m->y};
    *rc = step_fn(m, in, loss);
    if (loss[0]) lz_keep(loss[0]);
    lz_scope_end();
    lz_mark_step();
    return loss[0];
}

/* The smallest k whose reference state m's equals (1e-5), or -1. */
static int matching_step(model *m, const trajectory *r, int steps)
{
    int n = state_len(m);
    float *v = malloc(sizeof(float) * (size_t)n);
    int found = -1;
    if (v && read_state(m, v) == 0)
        for (int k = 0; k <= steps && found < 0; k++) {
            double worst = 0;
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)v[i] - r->state[k][i]));
            if (worst <= 1e-5) found = k;
        }
    free(v);
    return found;
}

/* Every host allocation of the runtime's bookkeeping that once was an
   assert (IR nodes, tensor handles, scopes, autograd records, the backward
   order, graph cutting, every compiler pass, the cache, executor jobs, the
   capture's snapshot, roots and tables, a replay), in turn, in lazy steps
   and in captured ones (LZ_FAULT_HOST): no crash; the run either reports
   an error or carries on, and a good step after it leaves the state at
   the unfaulted run's after some number of whole steps (a failed step is
   left out, a delayed one still counts, nothing is half-applied); a
   fault-free run sees no error; no tensor or device memory is left over. */
static void test_sweep_host(void)
{
    enum { S = 3 };
    trajectory r;
    reference(16, S + 1, &r);
    lz_cache_clear();
    const int tensors0 = tensors_alive();
    const int64_t bytes0 = lz_device_bytes_now();
    for (int captured = 0; captured < 2; captured++) {
        long n = 1, swept = 0, reported = 0;
        for (;; n++) {
            model m;
            model_init(&m, 16);
            lz_fn *f = captured ? lz_capture(step_fn, &m, 2, 1) : NULL;
            arm(LZ_FAULT_HOST, n);
            int errors = 0, rc;
            for (int s = 0; s < S; s++) {
                lz_clear_error();
                lz_tensor *l = captured ? call(f, &m, &rc) : lazy_step_rc(&m, &rc);
                float v = l ? lz_item(l) : NAN;
                errors += rc != 0 || !l || isnan(v) || lz_last_error() != NULL;
                lz_free(l);
            }
            errors += lz_wait() != 0;
            long fired = lz_fault_fired(LZ_FAULT_HOST);
            lz_fault_reset();
            lz_clear_error();
            lz_tensor *l = captured ? call(f, &m, &rc) : lazy_step_rc(&m, &rc);
            CHECK(rc == 0 && l && isfinite(lz_item(l)));
            lz_free(l);
            CHECK(lz_wait() == 0);
            int k = matching_step(&m, &r, S + 1);
            if (k < 1 || (!fired && (errors || k != S + 1)))
                fprintf(stderr, "host fault %ld (%s): fired %ld, errors %d, state of step %d\n", n,
                        captured ? "captured" : "lazy", fired, errors, k);
            CHECK(k >= 1);
            if (!fired) CHECK(errors == 0 && k == S + 1);
            swept += fired > 0;
            reported += fired > 0 && errors > 0;
            lz_fn_free(f);
            model_free(&m);
            lz_cache_clear();
            CHECK_EQ_I(tensors_alive(), tensors0);
            CHECK_EQ_I(lz_device_bytes_now(), bytes0);
            if (!fired) break;   /* past the run's last host allocation */
        }
        fprintf(stderr, "host faults (%s): %ld allocations swept, %ld reported an error\n",
                captured ? "captured" : "lazy", swept, reported);
        CHECK(swept >= 100);
        CHECK(reported >= swept / 2);
    }
    reference_free(&r, S + 1);
}

/* Every allocation made while creating a parameter and its optimizer, in
   turn: the call that hits it fails with an error, nothing leaks. */
static void test_sweep_creation(void)
{
    int swept = 0;
    for (long n = 1; n <= 12; n++) {
        arm(LZ_FAULT_ALLOC, n);
        lz_clear_error();
        lz_tensor *w = lz_test_rand(1, -1, 1, 2, (int64_t[]){4, 3});
        if (w) lz_requires_grad(w, 1);
        lz_sgd *opt = w ? lz_sgd_new(&w, 1, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f,
                                                           .weight_decay = 0.01f}) : NULL;
        lz_params *st = lz_params_new();
        int rc = opt ? lz_sgd_state(opt, st, "opt") : -1;
        long fired = lz_fault_fired(LZ_FAULT_ALLOC);
        lz_fault_reset();
        if (fired) CHECK((!w || !opt || rc != 0) && error_has("device allocation"));
        else CHECK(w && opt && rc == 0);
        swept += fired > 0;
        lz_params_free(st);
        lz_sgd_free(opt);
        lz_free(w);
    }
    CHECK(swept >= 6);   /* the parameter, the optimizer's scalars, its buffer */
}

int main(void)
{
    /* read at the first kernel: the environment switch is armed from here */
    setenv("LZ_FAULT_KERNEL", "2", 1);
    lz_test_fill_uniform(xs, B * IN, 7, -1, 1);
    for (int i = 0; i < B; i++) ys[i] = (xs[IN * i] > 0) + 2 * (xs[IN * i + 1] > 0);
    test_env_switch();
    test_lazy();
    test_compile_lazy();
    test_capture();
    test_compile_capture();
    test_compile_capture_steady();
    test_replay_every_kernel();
    test_eager();
    test_sweep();
    test_sweep_creation();
    test_sweep_host();
    lz_fault_reset();
    lz_shutdown();   /* test_leaks runs this program under valgrind */
    return lz_test_done();
}
