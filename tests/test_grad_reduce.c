/* Reductions: gradient checks of sum, mean and max over axis sets,
 * forward values by hand, the tie rule of max's gradient, and every kernel
 * path (all reduced, inner runs, outer rows, mixed axes, parallel sizes,
 * rows summed in bands) against a host loop in double. */
#include <math.h>
#include <stdlib.h>

#include "testlib.h"

typedef struct red_ctx {
    lz_tensor *(*f)(lz_tensor *, int, const int *, int);
    int naxes, keepdim;
    int axes[4];
} red_ctx;

static lz_tensor *call_red(void *ctx, lz_tensor *const *in)
{
    red_ctx *c = ctx;
    return c->f(in[0], c->naxes, c->axes, c->keepdim);
}
static lz_tensor *call_sum(void *ctx, lz_tensor *const *in) { (void)ctx; return lz_sum(in[0]); }
static lz_tensor *call_mean(void *ctx, lz_tensor *const *in) { (void)ctx; return lz_mean(in[0]); }
/* a reduction inside a chain, so its gradient is not all ones */
static lz_tensor *call_chain(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    const int ax[] = {1};
    return lz_tanh(lz_mul(lz_mean_axes(in[0], 1, ax, 1), in[0]));
}

static void check_grad(const char *what, lz_test_fn f, void *ctx, lz_tensor *x)
{
    lz_requires_grad(x, 1);
    double err = lz_test_gradcheck(f, ctx, 1, &x);
    if (!(err < 2e-2)) fprintf(stderr, "gradcheck %s: relative error %g\n", what, err);
    CHECK(err < 2e-2);
    CHECK(lz_grad(x) != NULL);
}

static void check_values(const char *what, lz_tensor *t, const float *want, int64_t n)
{
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_I(lz_numel(t), n);
    float *v = lz_test_read(t);
    CHECK(v != NULL);
    for (int64_t i = 0; v && i < n && i < lz_numel(t); i++) {
        if (fabs(v[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
            fprintf(stderr, "%s[%lld]: got %.9g want %.9g\n", what, (long long)i, v[i], want[i]);
        CHECK_NEAR(v[i], want[i], 1e-5 * (1 + fabs(want[i])));
    }
    free(v);
}

/* Values 0.1 apart in a scrambled order: max has a unique winner that a
   finite-difference step cannot overtake. */
static lz_tensor *distinct(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = 0.1f * (float)(i * 7 % n) - 0.05f * (float)n;
    lz_tensor *t = lz_from_host(v, LZ_F32, nd, shape);
    free(v);
    return t;
}

static void grads(void)
{
    const int64_t s34[] = {3, 4}, s234[] = {2, 3, 4};
    lz_tensor *x = lz_test_rand(1, -1, 1, 2, s34);
    check_grad("sum", call_sum, NULL, x);
    check_grad("mean", call_mean, NULL, x);
    check_grad("chain", call_chain, NULL, x);
    lz_free(x);
    lz_tensor *x0 = lz_test_rand(2, -1, 1, 0, NULL);
    check_grad("sum 0-d", call_sum, NULL, x0);
    lz_free(x0);

    lz_tensor *(*fs[])(lz_tensor *, int, const int *, int) = {lz_sum_axes, lz_mean_axes,
                                                              lz_max_axes};
    const char *names[] = {"sum_axes", "mean_axes", "max_axes"};
    struct { int naxes; int axes[3]; } sets[] = {
        {1, {1}}, {1, {0}}, {1, {-1}}, {2, {0, 2}}, {2, {1, 2}}, {3, {0, 1, 2}}, {0, {0}},
    };
    for (int f = 0; f < 3; f++) {
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            for (int keep = 0; keep < 2; keep++) {
                lz_tensor *t = f == 2 ? distinct(3, s234) : lz_test_rand(3 + (unsigned)k, -1, 1, 3, s234);
                red_ctx c = {.f = fs[f], .naxes = sets[k].naxes, .keepdim = keep};
                for (int i = 0; i < 3; i++) c.axes[i] = sets[k].axes[i];
                char what[64];
                snprintf(what, sizeof what, "%s set %zu keepdim %d", names[f], k, keep);
                check_grad(what, call_red, &c, t);
                lz_free(t);
            }
        }
    }
}

static void values(void)
{
    const int64_t s23[] = {2, 3};
    const float m[] = {1, 2, 3, 4, 5, 6};
    lz_tensor *x = lz_from_host(m, LZ_F32, 2, s23);
    const int a0[] = {0}, a1[] = {1}, an[] = {-1}, a01[] = {0, 1};
    const float w_sum[] = {21}, w_mean[] = {3.5f}, w_s0[] = {5, 7, 9}, w_s1[] = {6, 15},
                w_m1[] = {2, 5}, w_x1[] = {3, 6}, w_x0[] = {4, 5, 6}, w_m0[] = {2.5f, 3.5f, 4.5f};
    lz_tensor *s = lz_sum(x);
    check_values("sum", s, w_sum, 1);
    CHECK_EQ_I(lz_ndim(s), 0);
    CHECK_NEAR(lz_item(lz_mean(x)), 3.5, 1e-6);
    check_values("mean", lz_mean(x), w_mean, 1);
    check_values("sum_axes 0", lz_sum_axes(x, 1, a0, 0), w_s0, 3);
    check_values("sum_axes 1", lz_sum_axes(x, 1, a1, 0), w_s1, 2);
    check_values("sum_axes -1", lz_sum_axes(x, 1, an, 0), w_s1, 2);
    check_values("sum_axes 0,1", lz_sum_axes(x, 2, a01, 0), w_sum, 1);
    check_values("mean_axes 1", lz_mean_axes(x, 1, a1, 0), w_m1, 2);
    check_values("mean_axes 0", lz_mean_axes(x, 1, a0, 0), w_m0, 3);
    check_values("max_axes 1", lz_max_axes(x, 1, a1, 0), w_x1, 2);
    check_values("max_axes 0", lz_max_axes(x, 1, a0, 0), w_x0, 3);

    lz_tensor *k = lz_sum_axes(x, 1, a1, 1);
    CHECK(k && lz_ndim(k) == 2 && lz_dim(k, 0) == 2 && lz_dim(k, 1) == 1);
    check_values("sum_axes keepdim", k, w_s1, 2);
    lz_tensor *k0 = lz_max_axes(x, 1, a0, 1);
    CHECK(k0 && lz_ndim(k0) == 2 && lz_dim(k0, 0) == 1 && lz_dim(k0, 1) == 3);
    lz_tensor *n0 = lz_sum_axes(x, 1, a0, 0);
    CHECK(n0 && lz_ndim(n0) == 1 && lz_dim(n0, 0) == 3);

    /* negative values: max must not start from 0 */
    const float neg[] = {-5, -2, -9};
    const int64_t s3[] = {3};
    const float w_neg[] = {-2};
    check_values("max negative", lz_max_axes(lz_from_host(neg, LZ_F32, 1, s3), 1, a0, 0), w_neg, 1);

    /* integers keep their dtype */
    const int64_t s22[] = {2, 2};
    const int64_t iv[] = {1, 2, 3, -4};
    lz_tensor *xi = lz_from_host(iv, LZ_I64, 2, s22);
    int64_t out[2] = {0, 0};
    lz_tensor *si = lz_sum_axes(xi, 1, a0, 0);
    CHECK(si && lz_tensor_dtype(si) == LZ_I64 && lz_to_host(si, out, sizeof out) == 0);
    CHECK_EQ_I(out[0], 4);
    CHECK_EQ_I(out[1], -2);
    lz_tensor *mi = lz_max_axes(xi, 1, a1, 0);
    CHECK(mi && lz_to_host(mi, out, sizeof out) == 0);
    CHECK_EQ_I(out[0], 2);
    CHECK_EQ_I(out[1], 3);
    const int32_t jv[] = {-7, -3, -5};
    int32_t j = 0;
    lz_tensor *mj = lz_max_axes(lz_from_host(jv, LZ_I32, 1, s3), 1, a0, 0);
    CHECK(mj && lz_tensor_dtype(mj) == LZ_I32 && lz_to_host(mj, &j, sizeof j) == 0);
    CHECK_EQ_I(j, -3);
    /* a sum of int32 is int64, as in torch */
    lz_tensor *sj = lz_sum(lz_from_host(jv, LZ_I32, 1, s3));
    int64_t j64 = 0;
    CHECK(sj && lz_tensor_dtype(sj) == LZ_I64 && lz_to_host(sj, &j64, sizeof j64) == 0);
    CHECK_EQ_I(j64, -15);

    /* an empty axis sums to 0 */
    const int64_t s03[] = {0, 3};
    const float w_zero[] = {0, 0, 0};
    check_values("sum over empty axis", lz_sum_axes(lz_zeros(LZ_F32, 2, s03), 1, a0, 0), w_zero, 3);
    lz_free(x);
}

/* max's gradient is shared evenly among ties, like torch.amax */
static void tie_grads(void)
{
    const int64_t s4[] = {4}, s23[] = {2, 3};
    const float v[] = {1, 3, 3, 2};
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, s4);
    lz_requires_grad(x, 1);
    CHECK(lz_backward(lz_max_axes(x, 0, NULL, 0)) == 0);
    const float want[] = {0, 0.5f, 0.5f, 0};
    check_values("max tie grad", lz_grad(x), want, 4);

    const float m[] = {2, 2, 2, 1, 5, 0};
    lz_tensor *y = lz_from_host(m, LZ_F32, 2, s23);
    lz_requires_grad(y, 1);
    const int a1[] = {1};
    CHECK(lz_backward(lz_sum(lz_max_axes(y, 1, a1, 0))) == 0);
    const float want_y[] = {1.0f / 3, 1.0f / 3, 1.0f / 3, 0, 1, 0};
    check_values("max row tie grad", lz_grad(y), want_y, 6);

    /* mean's gradient is 1/n everywhere */
    lz_tensor *z = lz_from_host(m, LZ_F32, 2, s23);
    lz_requires_grad(z, 1);
    CHECK(lz_backward(lz_mean(z)) == 0);
    const float sixth[] = {1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f / 6};
    check_values("mean grad", lz_grad(z), sixth, 6);
    lz_free(x); lz_free(y); lz_free(z);
}

/* Reduces x over mask on the host in double and compares. */
static void kernel_case(int nd, const int64_t *shape, int naxes, const int *axes, unsigned seed)
{
    int64_t n = 1, mask = 0;
    for (int d = 0; d < nd; d++) n *= shape[d];
    for (int i = 0; i < naxes; i++) mask |= (int64_t)1 << axes[i];
    lz_tensor *x = lz_test_rand(seed, -1, 1, nd, shape);
    float *xv = lz_test_read(x);
    int64_t no = 1;
    for (int d = 0; d < nd; d++) if (!(mask >> d & 1)) no *= shape[d];
    double *sum = calloc((size_t)no, sizeof *sum), *mx = malloc(sizeof *mx * (size_t)no);
    for (int64_t o = 0; o < no; o++) mx[o] = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, o = 0, mul = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % shape[d];
            rem /= shape[d];
            if (mask >> d & 1) continue;
            o += c * mul;
            mul *= shape[d];
        }
        sum[o] += xv[i];
        if (xv[i] > mx[o]) mx[o] = xv[i];
    }
    float *rs = malloc(sizeof(float) * (size_t)no), *rm = malloc(sizeof(float) * (size_t)no),
          *rx = malloc(sizeof(float) * (size_t)no);
    int64_t cnt = n / no;
    for (int64_t o = 0; o < no; o++) {
        rs[o] = (float)sum[o];
        rm[o] = (float)(sum[o] / (double)cnt);
        rx[o] = (float)mx[o];
    }
    float *ys = lz_test_read(lz_sum_axes(x, naxes, axes, 0));
    float *ym = lz_test_read(lz_mean_axes(x, naxes, axes, 1));
    float *yx = lz_test_read(lz_max_axes(x, naxes, axes, 0));
    CHECK(ys && ym && yx);
    if (ys && ym && yx) {
        double es = lz_test_rel_err(ys, rs, no), em = lz_test_rel_err(ym, rm, no),
               ex = lz_test_rel_err(yx, rx, no);
        if (es > 1e-5 || em > 1e-5 || ex != 0)
            fprintf(stderr, "kernel case %d-d mask %lld: errors sum %g mean %g max %g\n", nd,
                    (long long)mask, es, em, ex);
        CHECK(es < 1e-5);
        CHECK(em < 1e-5);
        CHECK(ex == 0);
    }
    free(ys); free(ym); free(yx); free(rs); free(rm); free(rx); free(sum); free(mx); free(xv);
    lz_free(x);
}

static void kernel_paths(void)
{
    const int64_t nchw[] = {16, 3, 32, 32}, big[] = {300000}, col[] = {1000, 70},
                  row[] = {70, 1000}, mid[] = {4, 50, 300}, mixed[] = {6, 5, 4, 3},
                  ones[] = {3, 1, 4}, bias[] = {8, 65, 384}, outer[] = {3, 200, 5},
                  two[] = {40, 3, 50, 6}, uneven[] = {130, 7};
    const int a023[] = {0, 2, 3}, a0[] = {0}, a1[] = {1}, a13[] = {1, 3}, a02[] = {0, 2},
              a012[] = {0, 1, 2}, a3[] = {3};
    kernel_case(4, nchw, 3, a023, 300);   /* batch-norm style: reduced, kept, reduced */
    kernel_case(1, big, 1, a0, 301);      /* all reduced, chunks in parallel */
    kernel_case(2, col, 1, a0, 302);      /* outer rows into a kept row, in 15 bands of rows */
    kernel_case(2, row, 1, a1, 303);      /* contiguous inner runs */
    kernel_case(3, mid, 1, a1, 304);      /* middle axis: kept rows with an outer kept group */
    kernel_case(4, mixed, 2, a13, 305);   /* inner runs plus an outer reduced group */
    kernel_case(4, mixed, 2, a02, 306);   /* rows over two reduced groups */
    kernel_case(4, mixed, 1, a3, 307);
    kernel_case(3, ones, 1, a1, 308);     /* reducing a size-1 axis is a copy */
    kernel_case(3, ones, 3, a012, 309);
    kernel_case(4, nchw, 1, a1, 310);     /* large, middle axis, parallel rows */
    /* few output rows over many source rows: the rows summed in bands */
    const int a01[] = {0, 1};
    kernel_case(3, bias, 2, a01, 311);    /* a bias gradient, 8 bands */
    kernel_case(3, outer, 1, a1, 312);    /* an outer kept group, 3 bands */
    kernel_case(4, two, 2, a02, 313);     /* two reduced groups, 31 bands */
    kernel_case(2, uneven, 1, a0, 314);   /* 2 bands of 65 */
}

int main(void)
{
    grads();
    values();
    tie_grads();
    kernel_paths();
    return lz_test_done();
}
