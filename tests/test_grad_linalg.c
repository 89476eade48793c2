/* matmul, softmax, log_softmax and cross-entropy: hand-computed values,
 * products against a host loop, and gradients against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define GRAD_TOL 2e-2

static lz_tensor *rand_grad(unsigned seed, int nd, const int64_t *s)
{
    lz_tensor *t = lz_test_rand(seed, -1.0f, 1.0f, nd, s);
    lz_requires_grad(t, 1);
    return t;
}

/* ---- matmul ---------------------------------------------------------------- */

static lz_tensor *f_matmul(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    return lz_matmul(in[0], in[1]);
}

static void grad_matmul(int na, const int64_t *sa, int nb, const int64_t *sb, const char *what)
{
    lz_tensor *in[2] = {rand_grad(11, na, sa), rand_grad(12, nb, sb)};
    double e = lz_test_gradcheck(f_matmul, NULL, 2, in);
    if (!(e < GRAD_TOL)) fprintf(stderr, "matmul %s: rel err %g\n", what, e);
    CHECK(e < GRAD_TOL);
    CHECK(lz_grad(in[0]) && lz_grad(in[1]));
    for (int i = 0; i < 2; i++) {
        lz_tensor *g = lz_grad(in[i]);
        /* the gradient has the operand's shape, whatever broadcasting did */
        CHECK(g && lz_ndim(g) == lz_ndim(in[i]));
        for (int d = 0; g && d < lz_ndim(g); d++) CHECK_EQ_I(lz_dim(g, d), lz_dim(in[i], d));
        lz_free(in[i]);
    }
}

static void matmul_grads(void)
{
    grad_matmul(2, (int64_t[]){3, 4}, 2, (int64_t[]){4, 5}, "2-d");
    grad_matmul(3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 4, 5}, "batched");
    grad_matmul(3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 5}, "[2,3,4]@[4,5]");
    grad_matmul(2, (int64_t[]){3, 4}, 3, (int64_t[]){2, 4, 5}, "[3,4]@[2,4,5]");
    grad_matmul(4, (int64_t[]){2, 1, 3, 4}, 3, (int64_t[]){3, 4, 2}, "[2,1,3,4]@[3,4,2]");
    grad_matmul(1, (int64_t[]){4}, 2, (int64_t[]){4, 5}, "[4]@[4,5]");
    grad_matmul(2, (int64_t[]){3, 4}, 1, (int64_t[]){4}, "[3,4]@[4]");
    grad_matmul(1, (int64_t[]){4}, 1, (int64_t[]){4}, "[4]@[4]");
    grad_matmul(1, (int64_t[]){4}, 3, (int64_t[]){2, 4, 5}, "[4]@[2,4,5]");
    grad_matmul(3, (int64_t[]){2, 3, 4}, 1, (int64_t[]){4}, "[2,3,4]@[4]");
}

static void check_shape(lz_tensor *t, int nd, const int64_t *s)
{
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_I(lz_ndim(t), nd);
    for (int d = 0; d < nd && d < lz_ndim(t); d++) CHECK_EQ_I(lz_dim(t, d), s[d]);
}

/* ---- linear: x @ w^T + b with the transposes inside sgemm --------------------- */

static lz_tensor *f_linear(void *ctx, lz_tensor *const *in)
{
    return lz_linear(in[0], in[1], ctx ? in[2] : NULL);
}

static void grad_linear(int nx, const int64_t *sx, int with_bias, const char *what)
{
    int64_t in_f = sx[nx - 1], sw[2] = {5, in_f}, sb[1] = {5};
    lz_tensor *in[3] = {rand_grad(21, nx, sx), rand_grad(22, 2, sw), rand_grad(23, 1, sb)};
    double e = lz_test_gradcheck(f_linear, with_bias ? "bias" : NULL, 2 + with_bias, in);
    if (!(e < GRAD_TOL)) fprintf(stderr, "linear %s: rel err %g\n", what, e);
    CHECK(e < GRAD_TOL);
    for (int i = 0; i < 2 + with_bias; i++) {
        lz_tensor *g = lz_grad(in[i]);
        CHECK(g && lz_ndim(g) == lz_ndim(in[i]));
        for (int d = 0; g && d < lz_ndim(g); d++) CHECK_EQ_I(lz_dim(g, d), lz_dim(in[i], d));
    }
    for (int i = 0; i < 3; i++) lz_free(in[i]);
}

static void linear(void)
{
    /* [1, 2] @ [[1,0],[0,1],[1,1]]^T + [1,2,3] = [2, 4, 6], by hand */
    float x[2] = {1, 2}, w[6] = {1, 0, 0, 1, 1, 1}, b[3] = {1, 2, 3};
    int64_t sx[2] = {1, 2}, sw[2] = {3, 2}, sb[1] = {3};
    lz_tensor *tx = lz_from_host(x, LZ_F32, 2, sx), *tw = lz_from_host(w, LZ_F32, 2, sw);
    lz_tensor *tb = lz_from_host(b, LZ_F32, 1, sb);
    lz_tensor *y = lz_linear(tx, tw, tb);
    float *got = y ? lz_test_read(y) : NULL;
    CHECK(got && got[0] == 2 && got[1] == 4 && got[2] == 6);
    free(got);
    lz_tensor *x1 = lz_reshape(tx, 1, (int64_t[]){2});   /* a 1-d input is one row */
    lz_tensor *y1 = lz_linear(x1, tw, NULL);
    check_shape(y1, 1, sb);
    got = y1 ? lz_test_read(y1) : NULL;
    CHECK(got && got[0] == 1 && got[1] == 2 && got[2] == 3);
    free(got);
    lz_tensor *bad = lz_linear(tb, tw, NULL);            /* [3] against in = 2 */
    CHECK(bad == NULL && strstr(lz_last_error(), "lz_linear: input [3] and weight [3, 2]"));
    bad = lz_linear(tx, tw, tx);                          /* bias [1, 2] */
    CHECK(bad == NULL && strstr(lz_last_error(), "bias [1, 2] does not match weight [3, 2]"));
    lz_free(tx); lz_free(tw); lz_free(tb); lz_free(y); lz_free(x1); lz_free(y1);

    grad_linear(2, (int64_t[]){3, 4}, 1, "[3,4], bias");
    grad_linear(3, (int64_t[]){2, 3, 4}, 1, "[2,3,4], bias");
    grad_linear(2, (int64_t[]){3, 4}, 0, "[3,4], no bias");
    grad_linear(1, (int64_t[]){4}, 1, "[4], bias");
}

static void matmul_values(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    int64_t s22[2] = {2, 2}, s2[1] = {2};
    lz_tensor *ta = lz_from_host(a, LZ_F32, 2, s22), *tb = lz_from_host(b, LZ_F32, 2, s22);
    lz_tensor *c = lz_matmul(ta, tb);
    float *got = c ? lz_test_read(c) : NULL;
    CHECK(got != NULL);
    if (got) {
        CHECK_NEAR(got[0], 19, 1e-5);
        CHECK_NEAR(got[1], 22, 1e-5);
        CHECK_NEAR(got[2], 43, 1e-5);
        CHECK_NEAR(got[3], 50, 1e-5);
    }
    free(got);
    /* numpy's 1-d rules: shapes and values */
    lz_tensor *va = lz_from_host(a, LZ_F32, 1, s2), *vb = lz_from_host(b, LZ_F32, 1, s2);
    lz_tensor *dot = lz_matmul(va, vb);                  /* 1*5 + 2*6 */
    check_shape(dot, 0, NULL);
    CHECK_NEAR(lz_item(dot), 17, 1e-5);
    lz_tensor *vm = lz_matmul(va, tb);                   /* [1,2] @ b = [19, 22] */
    check_shape(vm, 1, s2);
    got = vm ? lz_test_read(vm) : NULL;
    CHECK(got && got[0] == 19 && got[1] == 22);
    free(got);
    lz_tensor *mv = lz_matmul(ta, vb);                   /* a @ [5,6] = [17, 39] */
    check_shape(mv, 1, s2);
    got = mv ? lz_test_read(mv) : NULL;
    CHECK(got && got[0] == 17 && got[1] == 39);
    free(got);
    int64_t s324[3] = {3, 2, 4}, s34[2] = {3, 4};
    lz_tensor *bat = lz_test_rand(3, -1, 1, 3, s324);
    lz_tensor *vb3 = lz_matmul(va, bat);
    check_shape(vb3, 2, s34);
    lz_free(ta); lz_free(tb); lz_free(c); lz_free(va); lz_free(vb); lz_free(dot);
    lz_free(vm); lz_free(mv); lz_free(bat); lz_free(vb3);
}

/* Host reference for a batched product with broadcast batch dims. */
static void host_matmul(const float *a, int na, const int64_t *sa, const float *b, int nb,
                        const int64_t *sb, float *c, int nc, const int64_t *sc)
{
    int64_t M = sc[nc - 2], N = sc[nc - 1], K = sa[na - 1], nbatch = 1;
    for (int d = 0; d < nc - 2; d++) nbatch *= sc[d];
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t r = bi, oa = 0, ob = 0, stA = 1, stB = 1;
        for (int d = nc - 3; d >= 0; d--) {
            int64_t idx = r % sc[d];
            r /= sc[d];
            int da = d - (nc - na), db = d - (nc - nb);
            if (da >= 0) { oa += (sa[da] == 1 ? 0 : idx) * stA; stA *= sa[da]; }
            if (db >= 0) { ob += (sb[db] == 1 ? 0 : idx) * stB; stB *= sb[db]; }
        }
        const float *A = a + oa * M * K, *B = b + ob * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
                c[bi * M * N + i * N + j] = (float)s;
            }
    }
}

static void check_product(int na, const int64_t *sa, int nb, const int64_t *sb, int nc,
                          const int64_t *sc, const char *what)
{
    lz_tensor *a = lz_test_rand(21, -1, 1, na, sa), *b = lz_test_rand(22, -1, 1, nb, sb);
    lz_tensor *c = lz_matmul(a, b);
    check_shape(c, nc, sc);
    float *av = lz_test_read(a), *bv = lz_test_read(b), *cv = c ? lz_test_read(c) : NULL;
    int64_t n = 1;
    for (int d = 0; d < nc; d++) n *= sc[d];
    float *ref = malloc(sizeof(float) * (size_t)n);
    host_matmul(av, na, sa, bv, nb, sb, ref, nc, sc);
    double e = cv ? lz_test_rel_err(cv, ref, n) : INFINITY;
    if (!(e < 1e-5)) fprintf(stderr, "product %s: rel err %g\n", what, e);
    CHECK(e < 1e-5);
    free(av); free(bv); free(cv); free(ref);
    lz_free(a); lz_free(b); lz_free(c);
}

static void matmul_products(void)
{
    /* one shared b: folded into one tall product */
    check_product(3, (int64_t[]){5, 40, 30}, 2, (int64_t[]){30, 20}, 3, (int64_t[]){5, 40, 20}, "fold");
    /* many small products, broadcast on both sides: one per thread */
    check_product(4, (int64_t[]){8, 1, 16, 32}, 3, (int64_t[]){3, 32, 24}, 4,
                  (int64_t[]){8, 3, 16, 24}, "broadcast both");
    /* a shared a against batched b */
    check_product(2, (int64_t[]){70, 90}, 3, (int64_t[]){3, 90, 60}, 3, (int64_t[]){3, 70, 60}, "shared a");
    /* big enough that sgemm splits each product itself */
    check_product(3, (int64_t[]){2, 130, 120}, 3, (int64_t[]){2, 120, 110}, 3,
                  (int64_t[]){2, 130, 110}, "large");
    /* an empty inner dimension gives zeros */
    int64_t s20[2] = {2, 0}, s03[2] = {0, 3};
    lz_tensor *a = lz_zeros(LZ_F32, 2, s20), *b = lz_zeros(LZ_F32, 2, s03);
    lz_tensor *c = lz_matmul(a, b);
    float *cv = c ? lz_test_read(c) : NULL;
    CHECK(cv && cv[0] == 0 && cv[5] == 0);
    free(cv);
    lz_free(a); lz_free(b); lz_free(c);
}

/* ---- softmax ---------------------------------------------------------------- */

static lz_tensor *f_softmax(void *ctx, lz_tensor *const *in)
{
    return lz_softmax(in[0], *(const int *)ctx);
}

static lz_tensor *f_log_softmax(void *ctx, lz_tensor *const *in)
{
    return lz_log_softmax(in[0], *(const int *)ctx);
}

static void softmax_grads(void)
{
    int64_t s34[2] = {3, 4}, s234[3] = {2, 3, 4};
    lz_tensor *x = rand_grad(31, 2, s34), *x3 = rand_grad(32, 3, s234);
    const int axes[4] = {0, -1, 1, 1};
    for (int i = 0; i < 3; i++) {
        lz_tensor *t = i == 2 ? x3 : x;
        double e = lz_test_gradcheck(f_softmax, (void *)&axes[i], 1, &t);
        if (!(e < GRAD_TOL)) fprintf(stderr, "softmax axis %d: rel err %g\n", axes[i], e);
        CHECK(e < GRAD_TOL);
        e = lz_test_gradcheck(f_log_softmax, (void *)&axes[i], 1, &t);
        if (!(e < GRAD_TOL)) fprintf(stderr, "log_softmax axis %d: rel err %g\n", axes[i], e);
        CHECK(e < GRAD_TOL);
    }
    lz_free(x); lz_free(x3);
}

/* Reference softmax along an axis, in double. */
static void host_softmax(const float *x, float *y, int64_t outer, int64_t n, int64_t inner, int is_log)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            const float *xp = x + o * n * inner + c;
            float *yp = y + o * n * inner + c;
            double mx = -INFINITY, s = 0;
            for (int64_t i = 0; i < n; i++) mx = fmax(mx, xp[i * inner]);
            for (int64_t i = 0; i < n; i++) s += exp(xp[i * inner] - mx);
            for (int64_t i = 0; i < n; i++)
                yp[i * inner] = is_log ? (float)(xp[i * inner] - mx - log(s))
                                       : (float)(exp(xp[i * inner] - mx) / s);
        }
}

static void softmax_values(void)
{
    float x[3] = {1, 2, 3};
    int64_t s3[1] = {3};
    lz_tensor *t = lz_from_host(x, LZ_F32, 1, s3);
    lz_tensor *y = lz_softmax(t, 0), *ly = lz_log_softmax(t, -1);
    float *yv = y ? lz_test_read(y) : NULL, *lv = ly ? lz_test_read(ly) : NULL;
    CHECK(yv && lv);
    if (yv && lv) {
        const double want[3] = {0.0900305732, 0.2447284711, 0.6652409558};
        for (int i = 0; i < 3; i++) {
            CHECK_NEAR(yv[i], want[i], 1e-6);
            CHECK_NEAR(lv[i], log(want[i]), 1e-5);
        }
    }
    free(yv); free(lv);
    lz_free(t); lz_free(y); lz_free(ly);

    /* stable: huge logits must not overflow */
    float big[4] = {1000, 1000, 1000, 0};
    int64_t s22[2] = {2, 2};
    t = lz_from_host(big, LZ_F32, 2, s22);
    y = lz_softmax(t, 1);
    ly = lz_log_softmax(t, 1);
    yv = y ? lz_test_read(y) : NULL;
    lv = ly ? lz_test_read(ly) : NULL;
    CHECK(yv && lv);
    if (yv && lv) {
        CHECK_NEAR(yv[0], 0.5, 1e-6);
        CHECK_NEAR(yv[1], 0.5, 1e-6);
        CHECK_NEAR(yv[2], 1.0, 1e-6);
        CHECK_NEAR(yv[3], 0.0, 1e-6);
        CHECK_NEAR(lv[0], -log(2.0), 1e-5);
        CHECK_NEAR(lv[2], 0.0, 1e-5);
        CHECK_NEAR(lv[3], -1000.0, 1e-2);
    }
    free(yv); free(lv);
    lz_free(t); lz_free(y); lz_free(ly);

    /* every axis of a larger 3-d tensor, past the parallel threshold and
       with a ragged column block */
    int64_t s[3] = {7, 50, 130};
    lz_tensor *bx = lz_test_rand(41, -5, 5, 3, s);
    float *xv = lz_test_read(bx), *ref = malloc(sizeof(float) * 7 * 50 * 130);
    for (int axis = 0; axis < 3; axis++)
        for (int is_log = 0; is_log < 2; is_log++) {
            int64_t outer = 1, inner = 1;
            for (int d = 0; d < axis; d++) outer *= s[d];
            for (int d = axis + 1; d < 3; d++) inner *= s[d];
            host_softmax(xv, ref, outer, s[axis], inner, is_log);
            lz_tensor *r = is_log ? lz_log_softmax(bx, axis) : lz_softmax(bx, axis);
            float *rv = r ? lz_test_read(r) : NULL;
            double e = rv ? lz_test_rel_err(rv, ref, 7 * 50 * 130) : INFINITY;
            if (!(e < 1e-5)) fprintf(stderr, "softmax axis %d log %d: rel err %g\n", axis, is_log, e);
            CHECK(e < 1e-5);
            free(rv);
            lz_free(r);
        }
    free(xv); free(ref);
    lz_free(bx);
}

/* ---- cross-entropy --------------------------------------------------------------- */

static lz_tensor *f_ce(void *ctx, lz_tensor *const *in)
{
    return lz_cross_entropy(in[0], (lz_tensor *)ctx);
}

static void cross_entropy(void)
{
    int64_t s45[2] = {4, 5}, s4[1] = {4};
    int64_t tv[4] = {0, 4, 2, 2};
    lz_tensor *logits = rand_grad(51, 2, s45);
    lz_tensor *target = lz_from_host(tv, LZ_I64, 1, s4);
    double e = lz_test_gradcheck(f_ce, target, 1, &logits);
    if (!(e < GRAD_TOL)) fprintf(stderr, "cross_entropy: rel err %g\n", e);
    CHECK(e < GRAD_TOL);
    CHECK(lz_grad(target) == NULL);

    /* hand-computed: lse([1,2,3]) = 3.40760596 */
    float lv[6] = {1, 2, 3, 1, 2, 3};
    int64_t s23[2] = {2, 3}, s2[1] = {2};
    int64_t t64[2] = {2, 0};
    int32_t t32[2] = {2, 0};
    lz_tensor *l = lz_from_host(lv, LZ_F32, 2, s23);
    lz_tensor *ta = lz_from_host(t64, LZ_I64, 1, s2), *tb = lz_from_host(t32, LZ_I32, 1, s2);
    lz_tensor *ya = lz_cross_entropy(l, ta), *yb = lz_cross_entropy(l, tb);
    CHECK(ya && lz_ndim(ya) == 0);
    CHECK_NEAR(lz_item(ya), (0.40760596 + 2.40760596) / 2, 1e-5);
    CHECK_NEAR(lz_item(yb), (0.40760596 + 2.40760596) / 2, 1e-5);

    /* stable for huge logits */
    float hv[2] = {1000, 0};
    int64_t s12[2] = {1, 2}, s1[1] = {1}, t1 = 1;
    lz_tensor *h = lz_from_host(hv, LZ_F32, 2, s12), *ht = lz_from_host(&t1, LZ_I64, 1, s1);
    lz_tensor *hy = lz_cross_entropy(h, ht);
    CHECK_NEAR(lz_item(hy), 1000.0, 1e-2);

    /* an out-of-range class index fails the execution with a message that
       names it, and the process goes on */
    int64_t badv[2] = {1, 7};
    lz_tensor *bt = lz_from_host(badv, LZ_I64, 1, s2);
    lz_tensor *by = lz_cross_entropy(l, bt);
    CHECK(by != NULL);                  /* the index is data: known only when run */
    lz_clear_error();
    float v = by ? lz_item(by) : 0;
    CHECK(isnan(v));
    const char *msg = lz_last_error();
    CHECK(msg && strstr(msg, "7") && strstr(msg, "out of range"));
    int32_t negv[2] = {-1, 0};
    lz_tensor *nt = lz_from_host(negv, LZ_I32, 1, s2);
    lz_tensor *ny = lz_cross_entropy(l, nt);
    lz_clear_error();
    CHECK(isnan(ny ? lz_item(ny) : NAN));
    msg = lz_last_error();
    CHECK(msg && strstr(msg, "-1"));
    lz_clear_error();
    lz_wait();
    lz_clear_error();
    CHECK_NEAR(lz_item(ya), (0.40760596 + 2.40760596) / 2, 1e-5);
    lz_tensor *again = lz_cross_entropy(l, tb);
    CHECK_NEAR(lz_item(again), (0.40760596 + 2.40760596) / 2, 1e-5);

    lz_free(logits); lz_free(target); lz_free(l); lz_free(ta); lz_free(tb); lz_free(ya);
    lz_free(yb); lz_free(h); lz_free(ht); lz_free(hy); lz_free(bt); lz_free(by);
    lz_free(nt); lz_free(ny); lz_free(again);
}

int main(void)
{
    matmul_values();
    matmul_products();
    matmul_grads();
    linear();
    softmax_values();
    softmax_grads();
    cross_entropy();
    return lz_test_done();
}
