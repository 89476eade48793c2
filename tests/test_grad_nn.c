/* embedding, hardtanh, relu6, flatten, layer norm, attention and dropout:
 * hand-checked values, record-time errors, an out-of-range index caught by
 * the kernel, and every gradient against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/tensor.h"

#define GRAD_TOL 2e-2

static lz_tensor *rand_grad(unsigned seed, float lo, float hi, int nd, const int64_t *s)
{
    lz_tensor *t = lz_test_rand(seed, lo, hi, nd, s);
    lz_requires_grad(t, 1);
    return t;
}

static void check_shape(lz_tensor *t, int nd, const int64_t *s)
{
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_I(lz_ndim(t), nd);
    for (int d = 0; d < nd && d < lz_ndim(t); d++) CHECK_EQ_I(lz_dim(t, d), s[d]);
}

static void check_grad(const char *what, lz_test_fn f, void *ctx, int n, lz_tensor *const *in)
{
    double e = lz_test_gradcheck(f, ctx, n, in);
    if (!(e < GRAD_TOL)) fprintf(stderr, "%s: gradient rel err %g\n", what, e);
    CHECK(e < GRAD_TOL);
    for (int i = 0; i < n; i++)
        if (in[i] && lz_tensor_dtype(in[i]) == LZ_F32 && in[i]->requires_grad) {
            lz_tensor *g = lz_grad(in[i]);
            CHECK(g != NULL);
            /* the gradient has its input's shape */
            if (g) {
                CHECK_EQ_I(lz_ndim(g), lz_ndim(in[i]));
                for (int d = 0; d < lz_ndim(g); d++) CHECK_EQ_I(lz_dim(g, d), lz_dim(in[i], d));
            }
        }
}

/* an error recorded at op time, naming the op */
static void check_error(lz_tensor *t, const char *needle)
{
    CHECK(t == NULL);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, needle));
    if (e && !strstr(e, needle)) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", e, needle);
    lz_clear_error();
}

/* ---- hardtanh / relu6 ---------------------------------------------------------- */

typedef struct ht_ctx { float lo, hi; int relu6; } ht_ctx;

static lz_tensor *f_hardtanh(void *ctx, lz_tensor *const *in)
{
    ht_ctx *c = ctx;
    return c->relu6 ? lz_relu6(in[0]) : lz_hardtanh(in[0], c->lo, c->hi);
}

/* x away from the kinks by more than the finite-difference step
   (1e-2 * max(|x|, 1)), so that central differences see one side only */
static lz_tensor *away_from(unsigned seed, float lo, float hi, float a, float b, int n)
{
    float *x = malloc(sizeof *x * (size_t)n);
    lz_test_fill_uniform(x, n, seed, lo, hi);
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i] - a) < 0.2f) x[i] = a + (x[i] < a ? -0.2f : 0.2f);
        if (fabsf(x[i] - b) < 0.2f) x[i] = b + (x[i] < b ? -0.2f : 0.2f);
    }
    const int64_t s[2] = {n / 6, 6};
    lz_tensor *t = lz_from_host(x, LZ_F32, 2, s);
    free(x);
    lz_requires_grad(t, 1);
    return t;
}

static void test_hardtanh(void)
{
    /* values and torch's gradient convention: 0 at the bounds */
    const float xv[7] = {-3.0f, -1.0f, -0.5f, 0.0f, 1.5f, 2.0f, 2.5f};
    const int64_t s[1] = {7};
    lz_tensor *x = lz_from_host(xv, LZ_F32, 1, s);
    lz_requires_grad(x, 1);
    lz_tensor *y = lz_hardtanh(x, -1.0f, 2.0f);
    CHECK(y && lz_backward(lz_sum(y)) == 0);
    float *v = lz_test_read(y), *g = lz_test_read(lz_grad(x));
    const float want[7] = {-1, -1, -0.5f, 0, 1.5f, 2, 2}, wantg[7] = {0, 0, 1, 1, 1, 0, 0};
    for (int i = 0; v && g && i < 7; i++) {
        CHECK_NEAR(v[i], want[i], 0);
        CHECK_NEAR(g[i], wantg[i], 0);
    }
    free(v); free(g);
    lz_free(y); lz_free(x);

    const float rv[6] = {-1.0f, 0.0f, 3.0f, 6.0f, 7.0f, 5.5f};
    const int64_t s6[1] = {6};
    x = lz_from_host(rv, LZ_F32, 1, s6);
    lz_requires_grad(x, 1);
    y = lz_relu6(x);
    CHECK(y && lz_backward(lz_sum(y)) == 0);
    v = lz_test_read(y);
    g = lz_test_read(lz_grad(x));
    const float want6[6] = {0, 0, 3, 6, 6, 5.5f}, wantg6[6] = {0, 0, 1, 0, 0, 1};
    for (int i = 0; v && g && i < 6; i++) {
        CHECK_NEAR(v[i], want6[i], 0);
        CHECK_NEAR(g[i], wantg6[i], 0);
    }
    free(v); free(g);
    lz_free(y); lz_free(x);

    ht_ctx c = {-0.7f, 1.2f, 0};
    lz_tensor *in[1] = {away_from(3, -2.0f, 2.0f, c.lo, c.hi, 36)};
    check_grad("hardtanh", f_hardtanh, &c, 1, in);
    lz_free(in[0]);
    ht_ctx c6 = {0, 6, 1};
    in[0] = away_from(4, -2.0f, 8.0f, 0.0f, 6.0f, 36);
    check_grad("relu6", f_hardtanh, &c6, 1, in);
    lz_free(in[0]);

    check_error(lz_hardtanh(x = lz_scalar(1.0f), 2.0f, 1.0f), "lz_hardtanh");
    lz_free(x);
    lz_tensor *xi = lz_zeros(LZ_I64, 1, s);
    check_error(lz_relu6(xi), "lz_relu6");
    lz_free(xi);
}

/* ---- embedding --------------------------------------------------------------- */

static lz_tensor *f_embedding(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    return lz_embedding(in[0], in[1]);
}

static void test_embedding(void)
{
    const int64_t sw[2] = {5, 3};
    float wv[15];
    for (int i = 0; i < 15; i++) wv[i] = (float)i;
    lz_tensor *w = lz_from_host(wv, LZ_F32, 2, sw);
    lz_requires_grad(w, 1);
    /* repeated indices: their gradients add up */
    const int64_t iv[4] = {4, 0, 4, 2};
    const int64_t si[2] = {2, 2};
    lz_tensor *idx = lz_from_host(iv, LZ_I64, 2, si);
    lz_tensor *y = lz_embedding(w, idx);
    const int64_t sy[3] = {2, 2, 3};
    check_shape(y, 3, sy);
    CHECK(y && lz_backward(lz_sum(y)) == 0);
    float *v = lz_test_read(y), *g = lz_test_read(lz_grad(w));
    for (int i = 0; v && i < 4; i++)
        for (int d = 0; d < 3; d++) CHECK_NEAR(v[i * 3 + d], (float)(iv[i] * 3 + d), 0);
    const float rows[5] = {1, 0, 1, 0, 2};
    for (int r = 0; g && r < 5; r++)
        for (int d = 0; d < 3; d++) CHECK_NEAR(g[r * 3 + d], rows[r], 0);
    free(v); free(g);
    lz_free(y); lz_free(idx);

    /* i32 indices, and a 0-d index giving one row */
    const int32_t i32[3] = {1, 1, 3};
    const int64_t s3[1] = {3};
    idx = lz_from_host(i32, LZ_I32, 1, s3);
    y = lz_embedding(w, idx);
    const int64_t sy2[2] = {3, 3};
    check_shape(y, 2, sy2);
    v = y ? lz_test_read(y) : NULL;
    CHECK(v && v[0] == 3 && v[3] == 3 && v[6] == 9);
    free(v);
    lz_free(y); lz_free(idx);
    const int64_t one = 2;
    idx = lz_from_host(&one, LZ_I64, 0, NULL);
    y = lz_embedding(w, idx);
    check_shape(y, 1, s3);
    lz_free(y); lz_free(idx);

    /* gradient check against the weight; indices carry none */
    lz_tensor *wr = rand_grad(5, -1, 1, 2, sw);
    const int64_t ivr[6] = {3, 1, 3, 0, 3, 1};
    const int64_t sir[2] = {3, 2};
    lz_tensor *in[2] = {wr, lz_from_host(ivr, LZ_I64, 2, sir)};
    check_grad("embedding", f_embedding, NULL, 2, in);
    lz_free(in[0]); lz_free(in[1]);

    /* an index out of range is data: the kernel fails the read, naming it */
    const int64_t bad[3] = {1, 5, 0};
    idx = lz_from_host(bad, LZ_I64, 1, s3);
    y = lz_embedding(w, idx);
    CHECK(y != NULL);
    float out[9];
    lz_clear_error();
    CHECK(lz_to_host(y, out, sizeof out) == -1);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "lz_embedding") && strstr(e, "index 5") && strstr(e, "5 rows"));
    lz_clear_error();
    lz_free(y); lz_free(idx);
    lz_wait();
    lz_clear_error();
    const int64_t neg[1] = {-1};
    const int64_t s1[1] = {1};
    idx = lz_from_host(neg, LZ_I64, 1, s1);
    y = lz_embedding(w, idx);
    CHECK(y && lz_to_host(y, out, sizeof(float) * 3) == -1);
    e = lz_last_error();
    CHECK(e && strstr(e, "index -1"));
    lz_free(y); lz_free(idx);
    lz_wait();
    lz_clear_error();

    /* record-time errors */
    lz_tensor *fidx = lz_zeros(LZ_F32, 1, s3);
    check_error(lz_embedding(w, fidx), "indices dtype f32");
    lz_tensor *w1 = lz_zeros(LZ_F32, 1, s3);
    idx = lz_zeros(LZ_I64, 1, s3);
    check_error(lz_embedding(w1, idx), "weight must be [V, D]");
    lz_free(fidx); lz_free(w1); lz_free(idx); lz_free(w);
}

/* ---- flatten -------------------------------------------------------------------- */

static lz_tensor *f_flatten(void *ctx, lz_tensor *const *in)
{
    return lz_flatten(in[0], *(int *)ctx);
}

static void test_flatten(void)
{
    const int64_t s[4] = {2, 3, 4, 5};
    lz_tensor *x = rand_grad(6, -1, 1, 4, s);
    lz_tensor *y = lz_flatten(x, 1);
    check_shape(y, 2, (int64_t[]){2, 60});
    lz_free(y);
    y = lz_flatten(x, 0);
    check_shape(y, 1, (int64_t[]){120});
    lz_free(y);
    y = lz_flatten(x, -2);
    check_shape(y, 3, (int64_t[]){2, 3, 20});
    lz_free(y);
    y = lz_flatten(x, 3);
    check_shape(y, 4, s);
    float *a = lz_test_read(x), *b = y ? lz_test_read(y) : NULL;
    CHECK(a && b && !memcmp(a, b, sizeof(float) * 120));
    free(a); free(b);
    lz_free(y);
    check_error(lz_flatten(x, 4), "lz_flatten");
    lz_tensor *sc = lz_scalar(3.0f);
    y = lz_flatten(sc, 0);
    check_shape(y, 1, (int64_t[]){1});
    lz_free(y); lz_free(sc);
    int start = 1;
    lz_tensor *in[1] = {x};
    check_grad("flatten", f_flatten, &start, 1, in);
    lz_free(x);
}

/* ---- layer norm ------------------------------------------------------------------ */

typedef struct ln_ctx { int n_axes, affine; float eps; } ln_ctx;

static lz_tensor *f_layer_norm(void *ctx, lz_tensor *const *in)
{
    ln_ctx *c = ctx;
    return lz_layer_norm(in[0], c->n_axes, c->affine & 1 ? in[1] : NULL,
                         c->affine & 2 ? in[2] : NULL, c->eps);
}

/* Rows longer than the kernel's 16 partial sums, with a tail (37), against
   float64; forward and backward are one kernel each (no mean steps), and
   the affine part rides on element-wise steps. */
static void test_layer_norm_rows(void)
{
    enum { R = 3, D = 37 };
    const int64_t sx[2] = {R, D}, sw[1] = {D};
    lz_tensor *x = rand_grad(11, -3, 5, 2, sx), *w = rand_grad(12, 0.5f, 1.5f, 1, sw);
    lz_tensor *b = rand_grad(13, -1, 1, 1, sw), *g = lz_test_rand(14, -1, 1, 2, sx);
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);   /* the gradient checks' graphs have run */
    lz_profile_enable(1);
    lz_profile_reset();
    lz_scope_begin();
    lz_tensor *y = lz_layer_norm(x, 1, w, b, 1e-5f);
    lz_tensor *loss = lz_sum(lz_mul(y, g));
    CHECK(loss && lz_backward(loss) == 0);
    lz_keep(y);
    lz_keep(loss);
    lz_scope_end();
    lz_mark_step();   /* one graph: the forward, the loss and every gradient */
    CHECK_EQ_I(lz_wait(), 0);
    float *yv = lz_test_read(y), *xv = lz_test_read(x), *wv = lz_test_read(w), *bv = lz_test_read(b);
    float *gv = lz_test_read(g), *dx = lz_test_read(lz_grad(x));
    CHECK_EQ_I(lz_test_kernel_calls("layer_norm"), 1);
    CHECK_EQ_I(lz_test_kernel_calls("layer_norm_grad"), 1);
    CHECK_EQ_I(lz_test_kernel_calls("mean"), 0);
    lz_profile_enable(0);
    for (int r = 0; yv && xv && wv && bv && gv && dx && r < R; r++) {
        const float *xr = xv + r * D, *gr = gv + r * D;
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int i = 0; i < D; i++) m += xr[i];
        m /= D;
        for (int i = 0; i < D; i++) v += (xr[i] - m) * (xr[i] - m);
        const double rstd = 1.0 / sqrt(v / D + 1e-5);
        for (int i = 0; i < D; i++) {
            const double xh = (xr[i] - m) * rstd, gh = gr[i] * wv[i];
            CHECK_NEAR(yv[r * D + i], xh * wv[i] + bv[i], 1e-5);
            sg += gh;
            sgx += gh * xh;
        }
        for (int i = 0; i < D; i++) {
            const double xh = (xr[i] - m) * rstd;
            CHECK_NEAR(dx[r * D + i], rstd * (gr[i] * wv[i] - sg / D - xh * sgx / D), 1e-5);
        }
    }
    free(yv); free(xv); free(wv); free(bv); free(gv); free(dx);
    lz_free(loss); lz_free(y); lz_free(x); lz_free(w); lz_free(b); lz_free(g);
}

static void test_layer_norm(void)
{
    /* one row by hand: mean 2.5, biased var 1.25 */
    const float xv[4] = {1, 2, 3, 4};
    const int64_t s4[2] = {1, 4};
    lz_tensor *x = lz_from_host(xv, LZ_F32, 2, s4);
    lz_tensor *y = lz_layer_norm(x, 1, NULL, NULL, 0.0f);
    float *v = y ? lz_test_read(y) : NULL;
    for (int i = 0; v && i < 4; i++) CHECK_NEAR(v[i], (xv[i] - 2.5) / sqrt(1.25), 1e-6);
    free(v);
    lz_free(y);
    /* eps enters under the root */
    y = lz_layer_norm(x, 1, NULL, NULL, 0.75f);
    v = y ? lz_test_read(y) : NULL;
    for (int i = 0; v && i < 4; i++) CHECK_NEAR(v[i], (xv[i] - 2.5) / sqrt(2.0), 1e-6);
    free(v);
    lz_free(y);

    const int64_t s3[3] = {2, 3, 5}, sw1[1] = {5}, sw2[2] = {3, 5};
    for (int n_axes = 1; n_axes <= 2; n_axes++)
        for (int affine = 0; affine < 4; affine++) {
            ln_ctx c = {n_axes, affine, 1e-5f};
            const int64_t *sw = n_axes == 1 ? sw1 : sw2;
            lz_tensor *in[3] = {rand_grad(7, -1, 1, 3, s3), rand_grad(8, 0.5f, 1.5f, n_axes, sw),
                                rand_grad(9, -1, 1, n_axes, sw)};
            lz_requires_grad(in[1], affine & 1);
            lz_requires_grad(in[2], (affine & 2) != 0);
            char what[64];
            snprintf(what, sizeof what, "layer_norm n_axes=%d affine=%d", n_axes, affine);
            check_grad(what, f_layer_norm, &c, 3, in);
            for (int i = 0; i < 3; i++) lz_free(in[i]);
        }

    test_layer_norm_rows();

    lz_tensor *w = lz_zeros(LZ_F32, 1, (int64_t[]){4});
    lz_tensor *wbad = lz_zeros(LZ_F32, 1, (int64_t[]){3});
    check_error(lz_layer_norm(x, 1, wbad, NULL, 1e-5f), "weight [3] must have the normalised shape [4]");
    check_error(lz_layer_norm(x, 1, w, wbad, 1e-5f), "bias [3]");
    check_error(lz_layer_norm(x, 3, NULL, NULL, 1e-5f), "n_axes 3 out of range");
    check_error(lz_layer_norm(x, 1, NULL, NULL, -1.0f), "eps");
    lz_free(w); lz_free(wbad); lz_free(x);
}

/* ---- attention -------------------------------------------------------------------- */

typedef struct att_ctx { int mask; float scale; } att_ctx;

static lz_tensor *f_attention(void *ctx, lz_tensor *const *in)
{
    att_ctx *c = ctx;
    return lz_attention(in[0], in[1], in[2], c->mask ? in[3] : NULL, c->scale);
}

static void test_attention(void)
{
    /* one query, two keys: weights softmax([0, 1] * scale) */
    const float q[2] = {1, 0}, k[4] = {0, 1, 1, 0}, vv[4] = {10, 0, 0, 10};
    const int64_t s12[2] = {1, 2}, s22[2] = {2, 2};
    lz_tensor *tq = lz_from_host(q, LZ_F32, 2, s12), *tk = lz_from_host(k, LZ_F32, 2, s22);
    lz_tensor *tv = lz_from_host(vv, LZ_F32, 2, s22);
    for (int pass = 0; pass < 2; pass++) {
        float scale = pass ? 2.0f : 0.0f;
        double sc = pass ? 2.0 : 1.0 / sqrt(2.0);
        lz_tensor *y = lz_attention(tq, tk, tv, NULL, scale);
        check_shape(y, 2, s12);
        float *v = y ? lz_test_read(y) : NULL;
        double w1 = exp(sc) / (1 + exp(sc));
        if (v) {
            CHECK_NEAR(v[0], 10 * (1 - w1), 1e-5);
            CHECK_NEAR(v[1], 10 * w1, 1e-5);
        }
        free(v);
        lz_free(y);
    }
    /* a -inf-like additive mask removes a key */
    const float mv[2] = {0, -1e9f};
    lz_tensor *m = lz_from_host(mv, LZ_F32, 1, (int64_t[]){2});
    lz_tensor *y = lz_attention(tq, tk, tv, m, 0);
    float *v = y ? lz_test_read(y) : NULL;
    if (v) { CHECK_NEAR(v[0], 10, 1e-5); CHECK_NEAR(v[1], 0, 1e-5); }
    free(v);
    lz_free(y);

    const int64_t sq[4] = {2, 2, 2, 3}, sk[4] = {2, 2, 3, 3}, sv[4] = {2, 2, 3, 2};
    const int64_t sm[4] = {2, 1, 1, 3};
    for (int masked = 0; masked < 2; masked++)
        for (int sc = 0; sc < 2; sc++) {
            att_ctx c = {masked, sc ? 0.3f : 0.0f};
            lz_tensor *in[4] = {rand_grad(10, -1, 1, 4, sq), rand_grad(11, -1, 1, 4, sk),
                                rand_grad(12, -1, 1, 4, sv), rand_grad(13, -1, 1, 4, sm)};
            char what[64];
            snprintf(what, sizeof what, "attention mask=%d scale=%g", masked, (double)c.scale);
            check_grad(what, f_attention, &c, masked ? 4 : 3, in);
            for (int i = 0; i < 4; i++) lz_free(in[i]);
        }

    lz_tensor *k3 = lz_zeros(LZ_F32, 2, (int64_t[]){2, 3});
    check_error(lz_attention(tq, k3, tv, NULL, 0), "head dims 2 and 3");
    lz_tensor *v3 = lz_zeros(LZ_F32, 2, (int64_t[]){3, 2});
    check_error(lz_attention(tq, tk, v3, NULL, 0), "key lengths 2 and 3");
    lz_tensor *mbad = lz_zeros(LZ_F32, 1, (int64_t[]){3});
    check_error(lz_attention(tq, tk, tv, mbad, 0), "mask [3] does not broadcast");
    lz_tensor *qb = lz_zeros(LZ_F32, 3, (int64_t[]){2, 1, 2}), *kb = lz_zeros(LZ_F32, 3, (int64_t[]){3, 2, 2});
    check_error(lz_attention(qb, kb, kb, NULL, 0), "batch dimensions");
    lz_free(k3); lz_free(v3); lz_free(mbad); lz_free(qb); lz_free(kb);
    lz_free(m); lz_free(tq); lz_free(tk); lz_free(tv);
}

/* ---- dropout ------------------------------------------------------------------------ */

/* reseeded on every call, so that every evaluation draws the same mask */
static lz_tensor *f_dropout(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    lz_manual_seed(1234);
    return lz_dropout(in[0], 0.4f, 1);
}

static void test_dropout_grad(void)
{
    const int64_t s[2] = {6, 7};
    lz_tensor *in[1] = {rand_grad(14, -1, 1, 2, s)};
    check_grad("dropout", f_dropout, NULL, 1, in);
    /* d sum(dropout(x)) / dx is the mask: 0 or 1/(1-p) */
    lz_zero_grad(in[0]);
    lz_tensor *y = f_dropout(NULL, in), *sum = lz_sum(y);
    CHECK(sum && lz_backward(sum) == 0);
    lz_free(sum); lz_free(y);
    float *g = lz_test_read(lz_grad(in[0]));
    int zeros = 0;
    for (int i = 0; g && i < 42; i++) {
        CHECK(g[i] == 0.0f || fabsf(g[i] - 1.0f / 0.6f) < 1e-6f);
        zeros += g[i] == 0.0f;
    }
    CHECK(zeros > 0 && zeros < 42);
    free(g);
    lz_free(in[0]);
}

static void run_all(void)
{
    test_hardtanh();
    test_embedding();
    test_flatten();
    test_layer_norm();
    test_attention();
    test_dropout_grad();
}

/* Lazily (forward and backward cut into graphs at reads), then eagerly:
   the same rules and kernels, op by op. */
int main(void)
{
    run_all();
    lz_set_eager(1);
    run_all();
    lz_set_eager(0);
    return lz_test_done();
}
