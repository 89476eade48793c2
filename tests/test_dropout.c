/* Dropout and the counter-based generator: the statistics of the mask, the
 * determinism of a seed in lazy and eager mode, a counter that advances in
 * the graph (consecutive draws differ, within one graph too), and a
 * captured training step whose every replay draws a new mask, in the same
 * sequence as the lazy loop from the same seed.
 *
 * Dropout is not compared with PyTorch: torch's generator (Philox on CUDA,
 * mt19937 on the CPU) is not ours, so equal seeds give different masks by
 * design. What must match torch is the distribution (zeros with
 * probability p, survivors scaled by 1/(1-p)), which is tested here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/cache.h"
#include "engine/tensor.h"

enum { BIG = 100000 };

static lz_tensor *ones(int64_t n)
{
    const int64_t s[1] = {n};
    return lz_full(LZ_F32, 1, s, 1.0);
}

/* dropout(ones): the mask itself */
static float *draw(int64_t n, float p)
{
    lz_tensor *x = ones(n), *m = lz_dropout(x, p, 1);
    float *v = m ? lz_test_read(m) : NULL;
    CHECK(v != NULL);
    lz_free(m);
    lz_free(x);
    return v;
}

static int same(const float *a, const float *b, int64_t n)
{
    return a && b && memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* Over 100k elements the fraction of zeros has standard deviation
   sqrt(p(1-p)/n) (at most 0.0016); 6 of them is a bound a correct
   generator misses with probability 2e-9, and a keep probability off by
   1% breaks it. The mean of the mask is (1 - zeros) / (1 - p). */
static void test_statistics(void)
{
    lz_manual_seed(2024);
    const float ps[4] = {0.1f, 0.25f, 0.5f, 0.9f};
    for (int k = 0; k < 4; k++) {
        const float p = ps[k];
        float *m = draw(BIG, p);
        if (!m) continue;
        int64_t zeros = 0, other = 0;
        double sum = 0;
        const float keep = 1.0f / (1.0f - p);
        for (int64_t i = 0; i < BIG; i++) {
            zeros += m[i] == 0.0f;
            other += m[i] != 0.0f && m[i] != keep;
            sum += m[i];
        }
        const double sd = sqrt(p * (1.0 - p) / BIG);
        const double frac = (double)zeros / BIG, mean = sum / BIG;
        printf("p=%.2f  zeros %.5f (want %.2f, bound %.5f)  mean %.5f (bound %.5f)\n", (double)p,
               frac, (double)p, 6 * sd, mean, 6 * sd / (1 - p));
        CHECK_EQ_I(other, 0);
        CHECK_NEAR(frac, p, 6 * sd);
        CHECK_NEAR(mean, 1.0, 6 * sd / (1.0 - p));
        free(m);
    }

    /* two draws are independent: both zero with probability p^2 */
    float *a = draw(BIG, 0.5f), *b = draw(BIG, 0.5f);
    if (a && b) {
        int64_t both = 0;
        for (int64_t i = 0; i < BIG; i++) both += a[i] == 0 && b[i] == 0;
        CHECK_NEAR((double)both / BIG, 0.25, 6 * sqrt(0.25 * 0.75 / BIG));
    }
    free(a); free(b);

    /* p = 1 drops everything (no infinities from 1/(1-p)) */
    float *z = draw(1000, 1.0f);
    int nz = 0;
    for (int i = 0; z && i < 1000; i++) nz += z[i] != 0.0f;
    CHECK_EQ_I(nz, 0);
    free(z);
}

/* p = 0 and eval mode are the identity, recording nothing; a bad p is an
   error at record time. */
static void test_identity_and_errors(void)
{
    const int64_t s[2] = {3, 4};
    lz_tensor *x = lz_test_rand(1, -1, 1, 2, s);
    lz_requires_grad(x, 1);
    float *xv = lz_test_read(x);
    for (int k = 0; k < 2; k++) {
        lz_metrics before = lz_metrics_get();
        lz_tensor *y = k ? lz_dropout(x, 0.5f, 0) : lz_dropout(x, 0.0f, 1);
        CHECK(y != NULL && y != x);
        CHECK_EQ_I(lz_metrics_get().ir_nodes, before.ir_nodes);
        float *yv = y ? lz_test_read(y) : NULL;
        CHECK(same(xv, yv, 12));
        free(yv);
        /* the gradient still flows to x */
        lz_zero_grad(x);
        lz_tensor *l = lz_sum(y);
        CHECK(l && lz_backward(l) == 0);
        float *g = lz_grad(x) ? lz_test_read(lz_grad(x)) : NULL;
        for (int i = 0; g && i < 12; i++) CHECK_NEAR(g[i], 1.0, 0);
        CHECK(g != NULL);
        free(g);
        lz_free(l);
        lz_free(y);
    }
    /* an identity of a pending tensor shares its node: one barrier
       materialises both handles, with equal values */
    lz_tensor *h = lz_mul(x, x), *ha = lz_dropout(h, 0.3f, 0);
    lz_metrics b0 = lz_metrics_get();
    lz_mark_step();
    CHECK_EQ_I(lz_metrics_get().executions - b0.executions, 1);
    float *hv = lz_test_read(h), *hav = ha ? lz_test_read(ha) : NULL;
    CHECK(same(hv, hav, 12));
    CHECK(!lz_is_pending(h) && ha && !lz_is_pending(ha));
    free(hv); free(hav);
    lz_free(ha); lz_free(h);
    /* freeing the identity's handle leaves x alone */
    float *again = lz_test_read(x);
    CHECK(same(xv, again, 12));
    free(again);

    const float bad[3] = {-0.1f, 1.5f, NAN};
    for (int k = 0; k < 3; k++) {
        lz_clear_error();
        CHECK(lz_dropout(x, bad[k], 1) == NULL);
        CHECK(lz_last_error() && strstr(lz_last_error(), "lz_dropout: p ="));
    }
    lz_clear_error();
    lz_tensor *xi = lz_zeros(LZ_I64, 2, s);
    CHECK(lz_dropout(xi, 0.5f, 1) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_dropout"));
    lz_clear_error();
    CHECK(lz_dropout(NULL, 0.5f, 1) == NULL);
    lz_clear_error();
    lz_free(xi);
    free(xv);
    lz_free(x);
}

/* An identity dropout inside a scope (eval mode in a training loop) must
   not leak a handle per step. */
static int count_tensors(void)
{
    int n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    return n;
}

static void test_scopes_do_not_leak(void)
{
    lz_tensor *x = ones(16);
    lz_manual_seed(3);
    for (int train = 0; train < 2; train++) {
        int before = 0;
        for (int step = 0; step < 5; step++) {
            lz_scope_begin();
            lz_tensor *h = lz_mul(x, x);
            lz_tensor *y = lz_dropout(lz_dropout(h, 0.5f, train), 0.2f, train);
            lz_tensor *out = lz_keep(lz_sum(y));
            lz_scope_end();
            lz_mark_step();
            lz_free(out);
            lz_wait();
            if (step == 0) before = count_tensors();
        }
        CHECK_EQ_I(count_tensors(), before);
    }
    lz_free(x);
}

/* The same seed gives the same sequence of masks whether each op runs at
   once (eager) or several draws land in one graph (lazy); reseeding
   restarts the sequence; another seed gives another one. */
static void sequence(int eager, uint64_t seed, float **out, int64_t n, int count)
{
    lz_set_eager(eager);
    lz_manual_seed(seed);
    lz_tensor *x = ones(n);
    lz_tensor *m[8];
    for (int k = 0; k < count; k++) {
        m[k] = lz_dropout(x, 0.3f, 1);
        /* in lazy mode, draws 0-1 and 2-3 share a graph each */
        if (k % 2 == 1) lz_mark_step();
    }
    for (int k = 0; k < count; k++) {
        out[k] = lz_test_read(m[k]);
        lz_free(m[k]);
    }
    lz_free(x);
    lz_set_eager(0);
}

/* From one seed, a draw of n1 + n2 is a draw of n1 and then one of n2,
   element for element. */
static void draws_continue(uint64_t seed, int64_t n1, int64_t n2)
{
    lz_manual_seed(seed);
    float *whole = draw(n1 + n2, 0.5f);
    lz_manual_seed(seed);
    float *p1 = draw(n1, 0.5f), *p2 = draw(n2, 0.5f);
    CHECK(whole && p1 && p2 && same(whole, p1, n1) && same(whole + n1, p2, n2));
    free(whole); free(p1); free(p2);
}

static void test_determinism(void)
{
    enum { N = 5000, K = 4 };
    float *lazy[K], *eager[K], *again[K], *other[K];
    sequence(0, 77, lazy, N, K);
    sequence(1, 77, eager, N, K);
    sequence(0, 77, again, N, K);
    sequence(0, 78, other, N, K);
    for (int k = 0; k < K; k++) {
        CHECK(same(lazy[k], eager[k], N));
        CHECK(same(lazy[k], again[k], N));
        CHECK(!same(lazy[k], other[k], N));
        for (int j = 0; j < k; j++) CHECK(!same(lazy[k], lazy[j], N));
    }
    for (int k = 0; k < K; k++) { free(lazy[k]); free(eager[k]); free(again[k]); free(other[k]); }

    /* the counter advances by the size of each draw */
    draws_continue(5, 100, 100);
    /* across the kernel's work items (65536 elements each): element i
       depends on counter + i alone, wherever an item starts */
    draws_continue(6, 70001, 129999);
}

/* ---- a captured training step with dropout ------------------------------------ */

enum { B = 8, IN = 6, HID = 32 };

typedef struct net { lz_tensor *w, *b; lz_sgd *opt; } net;

static void net_init(net *n)
{
    const int64_t sw[2] = {HID, IN}, sb[1] = {HID};
    n->w = lz_test_rand(21, -0.4f, 0.4f, 2, sw);
    n->b = lz_test_rand(22, -0.4f, 0.4f, 1, sb);
    lz_requires_grad(n->w, 1);
    lz_requires_grad(n->b, 1);
    lz_tensor *ps[2] = {n->w, n->b};
    n->opt = lz_sgd_new(ps, 2, (lz_sgd_opts){.lr = 0.05f, .momentum = 0.9f});
}

static void net_free(net *n)
{
    lz_sgd_free(n->opt);
    lz_free(n->w);
    lz_free(n->b);
}

/* in: x [B, IN]; out: loss, h (the dropped-out activations: its zeros are
   the mask) */
static int dropout_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    net *n = ctx;
    lz_sgd_zero_grad(n->opt);
    lz_tensor *h = lz_dropout(lz_tanh(lz_add(lz_matmul(in[0], lz_transpose(n->w, 0, 1)), n->b)), 0.5f, 1);
    lz_tensor *loss = lz_mean(lz_mul(h, h));
    if (!loss || lz_backward(loss) || lz_sgd_step(n->opt)) return -1;
    out[0] = loss;
    out[1] = h;
    return 0;
}

static lz_tensor *batch(int step)
{
    const int64_t s[2] = {B, IN};
    return lz_test_rand(300 + (unsigned)step, -1, 1, 2, s);
}

static void read_outputs(lz_tensor **out, float *loss, float *h)
{
    *loss = lz_item(out[0]);
    CHECK_EQ_I(lz_to_host(out[1], h, sizeof(float) * B * HID), 0);
    lz_free(out[0]);
    lz_free(out[1]);
}

static void run_lazy(net *n, int steps, float *loss, float *h)
{
    for (int s = 0; s < steps; s++) {
        lz_tensor *x = batch(s), *out[2] = {0};
        lz_scope_begin();
        CHECK_EQ_I(dropout_step(n, &x, out), 0);
        lz_keep(out[0]);
        lz_keep(out[1]);
        lz_scope_end();
        lz_mark_step();
        read_outputs(out, &loss[s], h + (size_t)s * B * HID);
        lz_free(x);
    }
}

static int zero_pattern_equal(const float *a, const float *b)
{
    for (int i = 0; i < B * HID; i++)
        if ((a[i] == 0.0f) != (b[i] == 0.0f)) return 0;
    return 1;
}

static void test_captured_step(void)
{
    enum { N = 12 };
    static float lazy_h[N][B * HID], cap_h[N][B * HID], again_h[B * HID];
    float lazy_loss[N], cap_loss[N], again_loss;

    net ref;
    net_init(&ref);
    lz_manual_seed(99);
    run_lazy(&ref, N, lazy_loss, &lazy_h[0][0]);

    net m;
    net_init(&m);
    lz_manual_seed(99);
    lz_cache_clear();
    lz_fn *f = lz_capture(dropout_step, &m, 1, 2);
    lz_metrics steady = {0};
    for (int s = 0; s < N; s++) {
        /* calls 0 (warm-up: gradients and momentum appear) and 1 (the
           trace) are real steps too */
        if (s == 2) { lz_wait(); lz_metrics_reset(); }
        lz_tensor *x = batch(s), *out[2] = {0};
        CHECK_EQ_I(lz_call(f, &x, out), 0);
        read_outputs(out, &cap_loss[s], cap_h[s]);
        lz_free(x);
    }
    steady = lz_metrics_get();
    CHECK_EQ_I(steady.executions, N - 2);
    CHECK_EQ_I(steady.capture_replays, N - 2);
    CHECK_EQ_I(steady.compiles, 0);
    CHECK_EQ_I(steady.graphs, 0);
    CHECK_EQ_I(steady.ir_nodes, 0);        /* replays record nothing */
    CHECK_EQ_I(steady.capture_fallbacks, 0);

    /* Same kernels on the same values in both modes: the masks, the
       activations and the losses agree to the bit. */
    int masks_differ = 1;
    for (int s = 0; s < N; s++) {
        CHECK(zero_pattern_equal(cap_h[s], lazy_h[s]));
        CHECK(same(cap_h[s], lazy_h[s], B * HID));
        CHECK_NEAR(cap_loss[s], lazy_loss[s], 0);
        if (s && zero_pattern_equal(cap_h[s], cap_h[s - 1])) masks_differ = 0;
    }
    CHECK(masks_differ);       /* every replay drew a new mask */
    float *pw = lz_test_read(m.w), *rw = lz_test_read(ref.w);
    CHECK(same(pw, rw, HID * IN));
    free(pw); free(rw);

    /* reseeding between replays restarts the sequence, without a compile:
       the next replay draws the lazy loop's first mask */
    lz_wait();
    lz_metrics_reset();
    lz_manual_seed(99);
    lz_tensor *x = batch(0), *out[2] = {0};
    CHECK_EQ_I(lz_call(f, &x, out), 0);
    read_outputs(out, &again_loss, again_h);
    lz_free(x);
    CHECK(zero_pattern_equal(again_h, lazy_h[0]));
    CHECK_EQ_I(lz_metrics_get().compiles, 0);
    CHECK_EQ_I(lz_metrics_get().capture_replays, 1);

    lz_fn_free(f);
    net_free(&m);
    net_free(&ref);
}

int main(void)
{
    test_statistics();
    test_identity_and_errors();
    test_scopes_do_not_leak();
    test_determinism();
    test_captured_step();
    return lz_test_done();
}
