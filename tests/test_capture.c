/* Capture and replay (docs/design.md semantics 7 and 8), asserted on counters,
 * with every captured run compared against the same loop run lazily. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "backends/cpu/test_gate.h"
#include "engine/cache.h"
#include "ops/test_gate.h"
#include "runtime/executor.h"

enum { IN = 8, HID = 16, OUT = 4 };

typedef struct mlp {
    lz_tensor *w1, *b1, *w2, *b2;
    lz_sgd *opt;
    int zero_grads;          /* zero the grads each step, or let them accumulate */
} mlp;

static lz_tensor *param(unsigned seed, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, -0.3f, 0.3f, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

static void mlp_init(mlp *m, int zero_grads, float lr)
{
    const int64_t s1[2] = {HID, IN}, sb1[1] = {HID}, s2[2] = {OUT, HID}, sb2[1] = {OUT};
    m->w1 = param(1, 2, s1); m->b1 = param(2, 1, sb1);
    m->w2 = param(3, 2, s2); m->b2 = param(4, 1, sb2);
    lz_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
    m->opt = lz_sgd_new(ps, 4, (lz_sgd_opts){.lr = lr, .momentum = 0.9f, .weight_decay = 1e-4f});
    m->zero_grads = zero_grads;
}

static void mlp_free(mlp *m)
{
    lz_sgd_free(m->opt);
    lz_free(m->w1); lz_free(m->b1); lz_free(m->w2); lz_free(m->b2);
}

/* in: x [B, IN] f32, y [B] i64; out: loss */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    mlp *m = ctx;
    if (m->zero_grads) lz_sgd_zero_grad(m->opt);
    lz_tensor *loss = lz_cross_entropy(lz_linear(lz_relu(lz_linear(in[0], m->w1, m->b1)), m->w2, m->b2), in[1]);
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

/* The lazy reference: the same step called directly, then a barrier. */
static void run_lazy(mlp *m, int first, int steps, int b, float *losses)
{
    for (int s = first; s < first + steps; s++)
        losses[s] = lz_test_lazy_step(train_step, m, s, b, IN, OUT);
}

static void run_captured(lz_fn *f, int first, int steps, int b, float *losses)
{
    for (int s = first; s < first + steps; s++) {
        lz_tensor *x, *y, *out[1] = {NULL};
        lz_test_mlp_batch(s, b, IN, OUT, &x, &y);
        lz_tensor *in[2] = {x, y};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        losses[s] = lz_item(out[0]);
        lz_free(out[0]); lz_free(x); lz_free(y);
    }
}

/* Kernels run in the same order on the same values in both modes, so the
   results agree to the bit; 1e-6 relative leaves room only for a changed
   schedule of one reduction. */
static void check_same_params(mlp *a, mlp *b)
{
    lz_tensor *pa[4] = {a->w1, a->b1, a->w2, a->b2}, *pb[4] = {b->w1, b->b1, b->w2, b->b2};
    for (int i = 0; i < 4; i++) {
        float *va = lz_test_read(pa[i]), *vb = lz_test_read(pb[i]);
        CHECK(va && vb && lz_test_rel_err(va, vb, lz_numel(pa[i])) <= 1e-6);
        free(va); free(vb);
    }
}

static void check_same_losses(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++) CHECK_NEAR(a[i], b[i], 1e-6 * fabs(b[i]) + 1e-7);
}

/* 100 captured calls after a lazy warm-up step: one graph, one compile,
   one execution per call, no IR recorded after the first call. */
static void test_hundred_calls(void)
{
    enum { N = 101 };
    float lazy[N], cap[N];
    mlp ref, m;
    mlp_init(&ref, 1, 0.1f);
    run_lazy(&ref, 0, N, 8, lazy);

    mlp_init(&m, 1, 0.1f);
    run_lazy(&m, 0, 1, 8, cap);                 /* warm-up: grads and momentum exist */
    lz_cache_clear();
    lz_wait();
    lz_metrics_reset();
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    run_captured(f, 1, 1, 8, cap);
    int64_t nodes_after_first = lz_metrics_get().ir_nodes;
    run_captured(f, 2, N - 2, 8, cap);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.executions, 100);
    CHECK_EQ_I(mt.graphs, 1);
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(mt.capture_replays, 99);
    CHECK_EQ_I(mt.ir_nodes, nodes_after_first);
    CHECK_EQ_I(mt.capture_fallbacks, 0);
    check_same_losses(cap, lazy, N);
    check_same_params(&m, &ref);
    lz_fn_free(f);
    mlp_free(&ref); mlp_free(&m);
}

/* Without a warm-up by the caller: the first trace creates the gradients,
   so it runs as a warm-up step and the second call is captured. Checked
   both with grads zeroed every step and with grads left to accumulate. */
static void test_automatic_warmup(int zero_grads)
{
    enum { N = 12 };
    float lazy[N], cap[N];
    mlp ref, m;
    mlp_init(&ref, zero_grads, 0.05f);
    run_lazy(&ref, 0, N, 8, lazy);
    mlp_init(&m, zero_grads, 0.05f);
    lz_cache_clear();
    lz_wait();
    lz_metrics_reset();
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    run_captured(f, 0, N, 8, cap);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.executions, N);
    CHECK_EQ_I(mt.graphs, 2);
    CHECK(mt.compiles <= 2);
    CHECK_EQ_I(mt.capture_replays, N - 2);
    check_same_losses(cap, lazy, N);
    check_same_params(&m, &ref);
    lz_fn_free(f);
    mlp_free(&ref); mlp_free(&m);
}

/* A learning rate changed between calls is data: the next replay uses it,
   and nothing compiles. */
static void test_lr_changes_without_compile(void)
{
    enum { N = 10 };
    float lazy[N], cap[N];
    mlp ref, m;
    mlp_init(&ref, 1, 0.1f);
    mlp_init(&m, 1, 0.1f);
    for (int s = 0; s < N; s++) {
        lz_sgd_set_lr(ref.opt, 0.1f / (1 + s));
        run_lazy(&ref, s, 1, 8, lazy);
    }
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    for (int s = 0; s < 2; s++) {
        lz_sgd_set_lr(m.opt, 0.1f / (1 + s));
        run_captured(f, s, 1, 8, cap);
    }
    lz_wait();
    lz_metrics_reset();
    for (int s = 2; s < N; s++) {
        lz_sgd_set_lr(m.opt, 0.1f / (1 + s));
        run_captured(f, s, 1, 8, cap);
    }
    CHECK_EQ_I(lz_metrics_get().compiles, 0);
    CHECK_EQ_I(lz_metrics_get().capture_replays, N - 2);
    check_same_losses(cap, lazy, N);
    check_same_params(&m, &ref);
    lz_fn_free(f);
    mlp_free(&ref); mlp_free(&m);
}

/* A second batch size traces once more; then both shapes replay. */
static void test_new_shape_retraces_once(void)
{
    mlp m;
    mlp_init(&m, 1, 0.1f);
    float loss[64];
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    run_captured(f, 0, 3, 8, loss);
    lz_wait();
    lz_metrics_reset();
    run_captured(f, 3, 1, 5, loss);           /* new shape: a trace and a compile */
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(mt.graphs, 1);
    for (int s = 4; s < 12; s++) run_captured(f, s, 1, s % 2 ? 5 : 8, loss);
    mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(mt.graphs, 1);
    CHECK_EQ_I(mt.executions, 9);
    CHECK_EQ_I(mt.capture_replays, 8);
    lz_fn_free(f);
    mlp_free(&m);
}

/* out[0]: an input returned as it is; out[1], out[2]: one tensor returned
   twice; in[1] is updated in place (a counter). */
static int odd_outputs(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_tensor *one = lz_full(LZ_F32, 0, NULL, 1.0);
    lz_tensor *y = lz_mul(in[0], lz_add(in[1], one));
    out[0] = lz_retain(in[0]);
    out[1] = y;
    out[2] = lz_retain(y);
    return lz_assign(in[1], lz_add(in[1], one));
}

static void test_odd_outputs(void)
{
    const int64_t s3[1] = {3};
    float xv[3] = {1, 2, 3}, zero = 0;
    lz_tensor *counter = lz_from_host(&zero, LZ_F32, 0, NULL);
    lz_fn *f = lz_capture(odd_outputs, NULL, 2, 3);
    for (int call = 0; call < 5; call++) {
        lz_tensor *x = lz_from_host(xv, LZ_F32, 1, s3);
        lz_tensor *in[2] = {x, counter}, *out[3] = {0};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        CHECK(out[0] != x && lz_tensor_of(out[0]) == x);   /* a handle on the input itself */
        float y1[3], y2[3];
        CHECK_EQ_I(lz_to_host(out[1], y1, sizeof y1), 0);
        CHECK_EQ_I(lz_to_host(out[2], y2, sizeof y2), 0);
        /* y = x * (counter + 1), counter counts the calls made before */
        CHECK_NEAR(y1[2], 3.0 * (call + 1), 0);
        CHECK_NEAR(y2[0], 1.0 * (call + 1), 0);
        CHECK_NEAR(lz_item(counter), call + 1, 0);
        for (int j = 0; j < 3; j++) lz_free(out[j]);
        lz_free(x);
    }
    CHECK(lz_metrics_get().capture_replays >= 3);
    lz_fn_free(f);
    lz_free(counter);
}

/* Reading a value inside the traced function is a graph break: every call
   is traced, results stay right, and the fallback is counted. */
static int reads_mid_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    float s = lz_item(lz_sum(in[0]));
    lz_tensor *scale = lz_scalar(s);
    out[0] = lz_mul(in[0], scale);
    return out[0] ? 0 : -1;
}

static void test_graph_break(void)
{
    lz_wait();
    lz_metrics_reset();
    lz_fn *f = lz_capture(reads_mid_step, NULL, 1, 1);
    const int64_t s2[1] = {2};
    for (int call = 1; call <= 10; call++) {
        float xv[2] = {(float)call, 1};
        lz_tensor *x = lz_from_host(xv, LZ_F32, 1, s2), *out[1];
        CHECK_EQ_I(lz_call(f, &x, out), 0);
        float y[2];
        CHECK_EQ_I(lz_to_host(out[0], y, sizeof y), 0);
        CHECK_NEAR(y[0], (float)call * (call + 1), 1e-4);
        lz_free(out[0]); lz_free(x);
    }
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.capture_fallbacks, 10);
    CHECK_EQ_I(mt.capture_replays, 0);
    lz_fn_free(f);
}

/* A replay returns once its execution is enqueued. */
static int gated(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_relu(lz_test_gate(in[0]));
    return 0;
}

static void test_replay_is_async(void)
{
    const int64_t s2[1] = {2};
    float xv[2] = {-1, 2};
    lz_fn *f = lz_capture(gated, NULL, 1, 1);
    lz_tensor *x = lz_from_host(xv, LZ_F32, 1, s2), *out[1];
    CHECK_EQ_I(lz_call(f, &x, out), 0);        /* trace */
    lz_free(out[0]);
    lz_wait();
    lz_test_gate_close();
    CHECK_EQ_I(lz_call(f, &x, out), 0);        /* replay, held in flight */
    CHECK_EQ_I(lz_executor_in_flight(), 1);
    CHECK(lz_is_pending(out[0]) == 0);
    lz_test_gate_open();
    float y[2];
    CHECK_EQ_I(lz_to_host(out[0], y, sizeof y), 0);
    CHECK_NEAR(y[0], 0, 0);
    CHECK_NEAR(y[1], 2, 0);
    lz_free(out[0]); lz_free(x);
    lz_fn_free(f);
}

static void test_bad_calls(void)
{
    lz_clear_error();
    CHECK(lz_capture(NULL, NULL, 1, 1) == NULL && lz_last_error());
    lz_fn *f = lz_capture(gated, NULL, 1, 1);
    lz_tensor *none[1] = {NULL}, *out[1];
    CHECK_EQ_I(lz_call(f, none, out), -1);
    CHECK(strstr(lz_last_error(), "input 0"));
    CHECK_EQ_I(lz_call(NULL, none, out), -1);
    lz_fn_free(f);
    lz_clear_error();
}

int main(void)
{
    test_hundred_calls();
    test_automatic_warmup(1);
    test_automatic_warmup(0);
    test_lr_changes_without_compile();
    test_new_shape_retraces_once();
    test_odd_outputs();
    test_graph_break();
    test_replay_is_async();
    test_bad_calls();
    return lz_test_done();
}
