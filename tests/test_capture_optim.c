/* Adam/AdamW inside a captured training step (issue 3): the step count and
 * bias corrections are data advanced in the graph and the learning rate is
 * a data tensor a schedule rewrites between calls, so after the first
 * captured call nothing compiles, every call is one execution, and the
 * losses and parameters equal the same loop run lazily. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/cache.h"

enum { IN = 8, HID = 16, OUT = 4, B = 8, N_PARAMS = 5 };

typedef struct mlp {
    lz_tensor *w1, *b1, *w2, *b2;
    lz_tensor *unused;       /* in the optimizer, never in the loss: skipped */
    lz_adamw *opt;
    lz_adamw_opts o;
    int zero_grads;          /* zero the grads each step, or let them accumulate */
    int cosine;              /* 1: cosine schedule; 0: step schedule */
    int t_max;
} mlp;

static lz_tensor *param(unsigned seed, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, -0.3f, 0.3f, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

static void mlp_params(mlp *m, lz_tensor **ps)
{
    ps[0] = m->w1; ps[1] = m->b1; ps[2] = m->w2; ps[3] = m->b2; ps[4] = m->unused;
}

static void mlp_init(mlp *m, lz_adamw_opts o, int zero_grads, int cosine, int t_max)
{
    const int64_t s1[2] = {HID, IN}, sb1[1] = {HID}, s2[2] = {OUT, HID}, sb2[1] = {OUT};
    m->w1 = param(1, 2, s1); m->b1 = param(2, 1, sb1);
    m->w2 = param(3, 2, s2); m->b2 = param(4, 1, sb2);
    m->unused = param(5, 1, sb2);
    m->o = o;
    m->zero_grads = zero_grads;
    m->cosine = cosine;
    m->t_max = t_max;
    lz_tensor *ps[N_PARAMS];
    mlp_params(m, ps);
    m->opt = lz_adamw_new(ps, N_PARAMS, o);
    CHECK(m->opt != NULL);
}

static void mlp_free(mlp *m)
{
    lz_adamw_free(m->opt);
    lz_free(m->w1); lz_free(m->b1); lz_free(m->w2); lz_free(m->b2); lz_free(m->unused);
}

/* The schedule runs on the host between steps: a new value in the rate's
   data tensor, never a new graph. */
static void set_rate(mlp *m, int step)
{
    float lr = m->cosine ? lz_lr_cosine(m->o.lr, step, m->t_max, m->o.lr * 0.01f)
                         : lz_lr_step(m->o.lr, step, 3, 0.5f);
    lz_adamw_set_lr(m->opt, lr);
}

/* in: x [B, IN] f32, y [B] i64; out: loss */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    mlp *m = ctx;
    if (m->zero_grads) lz_adamw_zero_grad(m->opt);
    lz_tensor *loss = lz_cross_entropy(lz_linear(lz_relu(lz_linear(in[0], m->w1, m->b1)), m->w2, m->b2), in[1]);
    if (!loss || lz_backward(loss) || lz_adamw_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

/* The lazy reference: the same step called directly, then a barrier. */
static void run_lazy(mlp *m, int first, int steps, float *losses)
{
    for (int s = first; s < first + steps; s++) {
        set_rate(m, s);
        losses[s] = lz_test_lazy_step(train_step, m, s, B, IN, OUT);
    }
}

static void run_captured(lz_fn *f, mlp *m, int first, int steps, float *losses)
{
    for (int s = first; s < first + steps; s++) {
        lz_tensor *x, *y, *out[1] = {NULL};
        set_rate(m, s);
        lz_test_mlp_batch(s, B, IN, OUT, &x, &y);
        lz_tensor *in[2] = {x, y};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        losses[s] = out[0] ? lz_item(out[0]) : NAN;
        lz_free(out[0]); lz_free(x); lz_free(y);
    }
}

/* A replay runs the kernels the lazy step runs, in the same order, on the
   same values, so the results agree to the bit; 1e-6 relative leaves room
   only for a changed schedule of one reduction. */
static void check_same(mlp *a, mlp *b, const float *la, const float *lb, int n)
{
    for (int i = 0; i < n; i++) CHECK_NEAR(la[i], lb[i], 1e-6 * fabs(lb[i]) + 1e-7);
    lz_tensor *pa[N_PARAMS], *pb[N_PARAMS];
    mlp_params(a, pa);
    mlp_params(b, pb);
    for (int i = 0; i < N_PARAMS; i++) {
        float *va = lz_test_read(pa[i]), *vb = lz_test_read(pb[i]);
        double e = va && vb ? lz_test_rel_err(va, vb, lz_numel(pa[i])) : INFINITY;
        if (!(e <= 1e-6)) fprintf(stderr, "parameter %d: captured vs lazy rel %.2e\n", i, e);
        CHECK(e <= 1e-6);
        free(va); free(vb);
    }
    /* the skipped parameter kept its value */
    float *u = lz_test_read(a->unused);
    lz_tensor *u0 = lz_test_rand(5, -0.3f, 0.3f, 1, (const int64_t[1]){OUT});
    float *v0 = lz_test_read(u0);
    CHECK(u && v0 && memcmp(u, v0, sizeof(float) * OUT) == 0);
    free(u); free(v0); lz_free(u0);
}

static const lz_adamw_opts ADAMW = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                    .weight_decay = 0.01f, .decoupled = 1};

/* One lazy warm-up step (grads exist), then the capture: the first captured
   call traces and compiles, every later call is one replay and nothing
   else, while the cosine schedule changes the rate before every call. */
static void test_adamw_cosine_after_lazy_warmup(void)
{
    enum { N = 40 };
    float lazy[N], cap[N];
    mlp ref, m;
    mlp_init(&ref, ADAMW, 1, 1, N);
    run_lazy(&ref, 0, N, lazy);

    mlp_init(&m, ADAMW, 1, 1, N);
    run_lazy(&m, 0, 1, cap);
    lz_cache_clear();
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    run_captured(f, &m, 1, 1, cap);
    lz_metrics first = lz_metrics_get();
    CHECK_EQ_I(first.compiles, 1);
    CHECK_EQ_I(first.executions, 1);
    CHECK_EQ_I(first.capture_replays, 0);

    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    run_captured(f, &m, 2, N - 2, cap);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.executions, N - 2);
    CHECK_EQ_I(mt.capture_replays, N - 2);
    CHECK_EQ_I(mt.graphs, 0);
    CHECK_EQ_I(mt.ir_nodes, 0);
    CHECK_EQ_I(mt.capture_fallbacks, 0);
    check_same(&m, &ref, cap, lazy, N);
    /* the rate really moved: the last steps ran near eta_min */
    CHECK(fabsf(lz_lr_cosine(ADAMW.lr, N - 1, N, ADAMW.lr * 0.01f) - ADAMW.lr * 0.01f) < 1e-4f);
    lz_fn_free(f);
    mlp_free(&ref); mlp_free(&m);
}

/* Without a lazy warm-up: the first call is a warm-up trace (it creates the
   grads), the second is captured; from the third on nothing compiles.
   Checked with grads zeroed every step and with grads accumulating, for
   AdamW with a cosine schedule and for Adam (L2 decay) with a step
   schedule. */
static void test_automatic_warmup(lz_adamw_opts o, int zero_grads, int cosine)
{
    enum { N = 16 };
    float lazy[N], cap[N];
    mlp ref, m;
    mlp_init(&ref, o, zero_grads, cosine, N);
    run_lazy(&ref, 0, N, lazy);

    mlp_init(&m, o, zero_grads, cosine, N);
    lz_cache_clear();
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    lz_fn *f = lz_capture(train_step, &m, 2, 1);
    run_captured(f, &m, 0, 2, cap);
    lz_metrics first = lz_metrics_get();
    CHECK_EQ_I(first.executions, 2);
    CHECK(first.compiles <= 2);

    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    run_captured(f, &m, 2, N - 2, cap);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.executions, N - 2);
    CHECK_EQ_I(mt.capture_replays, N - 2);
    CHECK_EQ_I(mt.ir_nodes, 0);
    check_same(&m, &ref, cap, lazy, N);
    lz_fn_free(f);
    mlp_free(&ref); mlp_free(&m);
}

int main(void)
{
    test_adamw_cosine_after_lazy_warmup();
    test_automatic_warmup(ADAMW, 1, 1);
    test_automatic_warmup(ADAMW, 0, 1);
    lz_adamw_opts adam = ADAMW;
    adam.decoupled = 0;
    adam.weight_decay = 1e-3f;
    test_automatic_warmup(adam, 1, 0);
    return lz_test_done();
}
