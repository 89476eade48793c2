/* A captured step computes exactly what the lazy step computes, or
 * refuses: each case of the issue runs its program twice, calling the step
 * directly (lazy) and through lz_call (captured), and compares every
 * number bitwise, and with PyTorch's value where one is quoted
 * (tests/reference/capture_guard.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "engine/tensor.h"

static lz_tensor *vec(int n, const float *v)
{
    int64_t s[1] = {n};
    return lz_from_host(v, LZ_F32, 1, s);
}

static lz_tensor *vec2(float a, float b) { return vec(2, (float[]){a, b}); }

static void read_into(lz_tensor *t, float *dst, int n)
{
    CHECK_EQ_I(lz_to_host(t, dst, sizeof(float) * (size_t)n), 0);
}

/* The step run either way: directly then a barrier (lazy), or lz_call. */
typedef struct runner {
    int captured;
    lz_fn *f;
    lz_step_fn fn;
    void *ctx;
} runner;

static int run(runner *r, lz_tensor *const *in, lz_tensor **out)
{
    if (r->captured) return lz_call(r->f, in, out);
    int rc = r->fn(r->ctx, in, out);
    lz_mark_step();
    return rc;
}

static void runner_init(runner *r, int captured, lz_step_fn fn, void *ctx, int n_in, int n_out)
{
    *r = (runner){captured, captured ? lz_capture(fn, ctx, n_in, n_out) : NULL, fn, ctx};
}

static void same_bits(const float *a, const float *b, int n, const char *what)
{
    int same = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    if (!same) {
        fprintf(stderr, "%s: lazy and captured differ:", what);
        for (int i = 0; i < n; i++) fprintf(stderr, " %.9g/%.9g", (double)a[i], (double)b[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same);
}

/* ---- case 1: gradient state changed outside the step ----------------- */

typedef struct lin { lz_tensor *w; } lin;

/* loss = sum(w * x); backward (accumulates into w's gradient) */
static int fwd_bwd(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    lz_tensor *loss = lz_sum(lz_mul(m->w, in[0]));
    if (!loss || lz_backward(loss)) return -1;
    out[0] = loss;
    return 0;
}

static void case1_zero_grad(int captured, float grads[8][2])
{
    lin m = {vec2(1, 2)};
    lz_requires_grad(m.w, 1);
    runner r;
    runner_init(&r, captured, fwd_bwd, &m, 1, 1);
    lz_metrics_reset();
    for (int k = 1; k <= 8; k++) {
        if (k % 2 == 1) lz_zero_grad(m.w);   /* accumulate over pairs of calls */
        lz_tensor *x = vec2((float)k, 10.0f * k), *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &x, out), 0);
        read_into(lz_grad(m.w), grads[k - 1], 2);
        lz_free(out[0]);
        lz_free(x);
    }
    if (captured) CHECK(lz_metrics_get().capture_replays >= 4);   /* both gradient patterns replay */
    lz_fn_free(r.f);
    lz_free(m.w);
}

/* loss = sum(w * w * x); backward; the optimizer steps outside every 2 calls */
static int fwd_bwd_sq(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    lz_tensor *loss = lz_sum(lz_mul(lz_mul(m->w, m->w), in[0]));
    if (!loss || lz_backward(loss)) return -1;
    out[0] = loss;
    return 0;
}

static void case1_accumulate(int captured, float w_end[2])
{
    lin m = {vec2(1, 2)};
    lz_requires_grad(m.w, 1);
    lz_sgd *opt = lz_sgd_new(&m.w, 1, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
    runner r;
    runner_init(&r, captured, fwd_bwd_sq, &m, 1, 1);
    for (int k = 1; k <= 6; k++) {
        lz_tensor *x = vec2((float)k, 0.5f * k), *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &x, out), 0);
        lz_free(out[0]);
        lz_free(x);
        if (k % 2 == 0) {
            lz_scope_begin();
            CHECK_EQ_I(lz_sgd_step(opt), 0);
            lz_scope_end();
            lz_sgd_zero_grad(opt);
        }
    }
    read_into(m.w, w_end, 2);
    lz_fn_free(r.f);
    lz_sgd_free(opt);
    lz_free(m.w);
}

static void test_case1(void)
{
    float lazy[8][2], cap[8][2];
    case1_zero_grad(0, lazy);
    case1_zero_grad(1, cap);
    same_bits(&lazy[0][0], &cap[0][0], 16, "case 1 gradients");
    const float want[8][2] = {{1, 10}, {3, 30}, {3, 30}, {7, 70}, {5, 50}, {11, 110}, {7, 70}, {15, 150}};
    CHECK(memcmp(cap, want, sizeof want) == 0);

    float wl[2], wc[2];
    case1_accumulate(0, wl);
    case1_accumulate(1, wc);
    same_bits(wl, wc, 2, "case 1 weights");
    CHECK_NEAR(wc[0], -0.149999917, 1e-6);   /* PyTorch 1.13 */
    CHECK_NEAR(wc[1], -1.35599983, 1e-6);
}

/* ---- case 2: lz_assign to an input inside the step -------------------- */

static int bump_input(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_tensor *one = lz_full(LZ_F32, lz_ndim(in[0]), (int64_t[]){lz_dim(in[0], 0)}, 1.0);
    if (lz_assign(in[0], lz_add(in[0], one))) return -1;
    out[0] = lz_sum(in[0]);
    return 0;
}

static void case2(int captured, float res[3], float a_end[3], float b_end[3])
{
    lz_tensor *a = vec(3, (float[]){1, 2, 3}), *b = vec(3, (float[]){99, 100, 100});
    runner r;
    runner_init(&r, captured, bump_input, NULL, 1, 1);
    lz_tensor *seq[3] = {a, b, a};
    for (int i = 0; i < 3; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &seq[i], out), 0);
        res[i] = lz_item(out[0]);
        lz_free(out[0]);
    }
    read_into(a, a_end, 3);
    read_into(b, b_end, 3);
    lz_fn_free(r.f);
    lz_free(a);
    lz_free(b);
}

static void test_case2(void)
{
    float rl[3], al[3], bl[3], rc[3], ac[3], bc[3];
    case2(0, rl, al, bl);
    case2(1, rc, ac, bc);
    same_bits(rl, rc, 3, "case 2 results");
    same_bits(al, ac, 3, "case 2 a");
    same_bits(bl, bc, 3, "case 2 b");
    CHECK(rc[0] == 9 && rc[1] == 302 && rc[2] == 12);
    CHECK(bc[0] == 100 && bc[1] == 101 && bc[2] == 101);
    CHECK(ac[0] == 3 && ac[1] == 4 && ac[2] == 5);
}

/* ---- case 3: aliased inputs, and state sharing a buffer --------------- */

static int mul_add(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_add(lz_mul(in[0], in[1]), in[1]);
    return out[0] ? 0 : -1;
}

typedef struct target_net {
    lz_tensor *w, *target;
    lz_sgd *opt;
} target_net;

/* reads the target network, trains w */
static int train_with_target(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    target_net *m = ctx;
    lz_sgd_zero_grad(m->opt);
    lz_tensor *loss = lz_sum(lz_mul(lz_mul(m->w, m->w), in[0]));
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = lz_sum(lz_mul(m->target, in[0]));
    return out[0] ? 0 : -1;
}

static void case3(int captured, float res[8], float tgt[6])
{
    lz_tensor *a = vec2(1, 2), *b = vec2(10, 20);
    runner r;
    runner_init(&r, captured, mul_add, NULL, 2, 1);
    lz_tensor *calls[3][2] = {{a, a}, {a, b}, {b, a}};
    for (int i = 0; i < 3; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(run(&r, calls[i], out), 0);
        read_into(out[0], res + 2 * i, 2);
        lz_free(out[0]);
    }
    lz_fn_free(r.f);
    lz_free(a);
    lz_free(b);

    target_net m = {vec2(1, 2), vec2(0, 0), NULL};
    lz_requires_grad(m.w, 1);
    m.opt = lz_sgd_new(&m.w, 1, (lz_sgd_opts){.lr = 0.1f});
    runner_init(&r, captured, train_with_target, &m, 1, 1);
    for (int i = 0; i < 6; i++) {
        /* just before the call that captures (the first is a warm-up):
           the target shares w's buffer */
        if (i == 1) CHECK_EQ_I(lz_assign(m.target, m.w), 0);
        lz_tensor *x = vec2(1, 1), *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &x, out), 0);
        tgt[i] = lz_item(out[0]);
        lz_free(out[0]);
        lz_free(x);
    }
    read_into(m.w, res + 6, 2);
    lz_fn_free(r.f);
    lz_sgd_free(m.opt);
    lz_free(m.w);
    lz_free(m.target);
}

static void test_case3(void)
{
    float rl[8], rc[8], tl[6], tc[6];
    case3(0, rl, tl);
    case3(1, rc, tc);
    same_bits(rl, rc, 8, "case 3 results");
    same_bits(tl, tc, 6, "case 3 target");
    const float want[6] = {2, 6, 20, 60, 11, 42};
    CHECK(memcmp(rc, want, sizeof want) == 0);
    CHECK(tc[0] == 0);
    for (int i = 1; i < 6; i++) CHECK(tc[i] == tc[1] && tc[1] != 0);   /* w's value at call 1 */
}

/* ---- case 4: requires-grad toggled between calls ---------------------- */

typedef struct two { lz_tensor *w1, *w2; lz_sgd *opt; } two;

static int train_two(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    two *m = ctx;
    lz_sgd_zero_grad(m->opt);
    lz_tensor *loss = lz_sum(lz_mul(lz_mul(m->w1, m->w2), in[0]));
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

static void case4(int captured, float res[8])
{
    two m = {vec2(1, 2), vec2(3, 4), NULL};
    lz_requires_grad(m.w1, 1);
    lz_requires_grad(m.w2, 1);
    lz_tensor *ps[2] = {m.w1, m.w2};
    m.opt = lz_sgd_new(ps, 2, (lz_sgd_opts){.lr = 0.1f});
    runner r;
    runner_init(&r, captured, train_two, &m, 1, 1);
    for (int k = 0; k < 4; k++) {
        if (k == 2) lz_requires_grad(m.w1, 0);
        lz_tensor *x = vec2(1, 2), *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &x, out), 0);
        res[k] = lz_item(out[0]);
        lz_free(out[0]);
        lz_free(x);
    }
    read_into(m.w1, res + 4, 2);
    read_into(m.w2, res + 6, 2);
    lz_fn_free(r.f);
    lz_sgd_free(m.opt);
    lz_free(m.w1);
    lz_free(m.w2);
}

static void test_case4(void)
{
    float l[8], c[8];
    case4(0, l);
    case4(1, c);
    same_bits(l, c, 8, "case 4");
    const double torch[8] = {19, 10.6700001, 4.3859005, 4.27693033,
                             0.409999967, 0.480000049, 2.74800038, 3.16799998};
    for (int i = 0; i < 8; i++) CHECK_NEAR(c[i], torch[i], 1e-5 * fabs(torch[i]));
}

/* ---- case 5: a freed or replaced parameter ---------------------------- */

static int dot(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    out[0] = lz_sum(lz_mul(m->w, in[0]));
    return out[0] ? 0 : -1;
}

static int dot_sq(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    out[0] = lz_sum(lz_mul(m->w, lz_mul(in[0], in[0])));
    return out[0] ? 0 : -1;
}

static void case5(int captured, float res[12])
{
    lin m = {vec2(1, 2)};
    runner ra, rb;
    runner_init(&ra, captured, dot, &m, 1, 1);
    runner_init(&rb, captured, dot_sq, &m, 1, 1);
    int n = 0;
    for (int round = 0; round < 3; round++) {
        if (round == 1) {                    /* freed and replaced: two captures hold it */
            lz_free(m.w);
            m.w = vec2(5, 7);
        }
        for (int i = 0; i < 2; i++) {
            lz_tensor *x = vec2(1, 2), *out[1] = {NULL};
            CHECK_EQ_I(run(&ra, &x, out), 0);
            res[n++] = lz_item(out[0]);
            lz_free(out[0]);
            CHECK_EQ_I(run(&rb, &x, out), 0);
            res[n++] = lz_item(out[0]);
            lz_free(out[0]);
            lz_free(x);
        }
        if (round == 1) {
            /* swapped while the old one stays alive: a new parameter
               (requires grad) is seen */
            lz_tensor *old = m.w;
            m.w = vec2(-1, -1);
            lz_requires_grad(m.w, 1);
            lz_free(lz_retain(old));
            res[n] = 0;
            lz_free(old);
        }
    }
    lz_fn_free(ra.f);
    lz_fn_free(rb.f);
    lz_free(m.w);
}

static void test_case5(void)
{
    float l[12], c[12];
    case5(0, l);
    case5(1, c);
    same_bits(l, c, 12, "case 5");
    const float want[12] = {5, 9, 5, 9, 19, 33, 19, 33, -3, -5, -3, -5};
    CHECK(memcmp(c, want, sizeof want) == 0);
}

/* ---- case 6: reseeding after lz_shutdown, two traces ------------------ */

static int drop(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_dropout(in[0], 0.5f, 1);
    return out[0] ? 0 : -1;
}

static void case6(int captured, float res[2][3][2][16])
{
    runner r;
    runner_init(&r, captured, drop, NULL, 1, 1);
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1;
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            lz_shutdown();
            lz_manual_seed(7);
        }
        for (int i = 0; i < 3; i++)
            for (int shape = 0; shape < 2; shape++) {
                int n = shape ? 16 : 8;
                lz_tensor *x = vec(n, ones), *out[1] = {NULL};
                CHECK_EQ_I(run(&r, &x, out), 0);
                memset(res[round][i][shape], 0, sizeof res[round][i][shape]);
                read_into(out[0], res[round][i][shape], n);
                lz_free(out[0]);
                lz_free(x);
            }
    }
    lz_fn_free(r.f);
    lz_shutdown();
}

static void test_case6(void)
{
    float l[2][3][2][16], c[2][3][2][16];
    lz_shutdown();
    case6(0, l);
    case6(1, c);
    same_bits(&l[0][0][0][0], &c[0][0][0][0], 2 * 3 * 2 * 16, "case 6 masks");
}

/* ---- case 7: state kept by replacing a handle inside the step --------- */

typedef struct accum { lz_tensor *acc; } accum;

static int accumulate(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    accum *a = ctx;
    lz_tensor *old = a->acc;
    a->acc = lz_keep(lz_add(old, in[0]));
    lz_free(old);
    out[0] = lz_relu(a->acc);
    return out[0] ? 0 : -1;
}

static void case7(int captured, float res[5])
{
    accum a = {vec(1, (float[]){0})};
    runner r;
    runner_init(&r, captured, accumulate, &a, 1, 1);
    for (int k = 0; k < 5; k++) {
        lz_tensor *x = vec(1, (float[]){3}), *out[1] = {NULL};
        CHECK_EQ_I(run(&r, &x, out), 0);
        res[k] = lz_item(out[0]);
        lz_free(out[0]);
        lz_free(x);
    }
    lz_fn_free(r.f);
    lz_free(a.acc);
}

static void test_case7(void)
{
    float l[5], c[5];
    case7(0, l);
    case7(1, c);
    same_bits(l, c, 5, "case 7");
    const float want[5] = {3, 6, 9, 12, 15};
    CHECK(memcmp(c, want, sizeof want) == 0);
}

/* ---- case 8: a returned handle on state, not computed by the step ----
   The step returns an alias of a tensor (lz_dropout in eval mode) that its
   graph does not read, and updates another; between calls the caller
   changes the aliased tensor lazily (still pending when the call begins),
   and in the second variant leaves a second handle on its old buffer. A
   direct call returns the aliased tensor's value at the call; a replay
   must too (it crashed on the pending tensor, and with the extra handle it
   returned the value from when it was traced). The step also returns an
   alias of the state it updates: the value from before the update. */

typedef struct c8 { lz_tensor *v, *w; } c8;

static int step8(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    c8 *c = ctx;
    out[0] = lz_dropout(c->v, 0.5f, 0);
    out[1] = lz_dropout(c->w, 0.5f, 0);
    return lz_assign(c->w, lz_add(c->w, in[0]));
}

static void case8(int captured, int extra_handle, float *res)
{
    c8 c = {vec(1, (float[]){1}), vec(1, (float[]){10})};
    lz_tensor *one = vec(1, (float[]){1}), *kept[5] = {NULL};
    runner r;
    runner_init(&r, captured, step8, &c, 1, 2);
    for (int k = 0; k < 5; k++) {
        lz_tensor *next = lz_add(c.v, one);
        lz_assign(c.v, next);
        if (extra_handle) kept[k] = next;   /* shares c.v's buffer until the next change */
        else lz_free(next);
        lz_tensor *out[2] = {NULL, NULL};
        CHECK_EQ_I(run(&r, &one, out), 0);
        res[2 * k] = out[0] ? lz_item(out[0]) : NAN;
        res[2 * k + 1] = out[1] ? lz_item(out[1]) : NAN;
        lz_free(out[0]);
        lz_free(out[1]);
    }
    for (int k = 0; k < 5; k++) lz_free(kept[k]);
    lz_fn_free(r.f);
    lz_free(one);
    lz_free(c.v);
    lz_free(c.w);
}

static void test_case8(void)
{
    const float want[10] = {2, 10, 3, 11, 4, 12, 5, 13, 6, 14};
    for (int extra = 0; extra < 2; extra++) {
        float l[10], c[10];
        case8(0, extra, l);
        case8(1, extra, c);
        same_bits(l, c, 10, extra ? "case 8, a second handle" : "case 8");
        CHECK(memcmp(c, want, sizeof want) == 0);
    }
}

int main(void)
{
    test_case1();
    test_case2();
    test_case3();
    test_case4();
    test_case5();
    test_case6();
    test_case7();
    test_case8();
    lz_shutdown();
    return lz_test_done();
}
