/* Element-wise ops: gradient checks for every op with a backward rule
 * (broadcasting and 0-d operands included), forward values against
 * hand-computed numbers, and the kernels' broadcast paths against a plain
 * host loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

typedef lz_tensor *(*un_op)(lz_tensor *);
typedef lz_tensor *(*bin_op)(lz_tensor *, lz_tensor *);
typedef struct op_ctx {
    un_op u;
    bin_op b;
    float p;
} op_ctx;

static lz_tensor *call_unary(void *ctx, lz_tensor *const *in) { return ((op_ctx *)ctx)->u(in[0]); }
static lz_tensor *call_binary(void *ctx, lz_tensor *const *in)
{
    return ((op_ctx *)ctx)->b(in[0], in[1]);
}
static lz_tensor *call_pow(void *ctx, lz_tensor *const *in) { return lz_pow(in[0], ((op_ctx *)ctx)->p); }
static lz_tensor *call_cast(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    return lz_cast(in[0], LZ_F32);
}
static lz_tensor *call_where(void *ctx, lz_tensor *const *in)
{
    return lz_where((lz_tensor *)ctx, in[0], in[1]);
}
/* x used three times and y twice: gradients from several paths must add */
static lz_tensor *call_composite(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    lz_tensor *x = in[0], *y = in[1];
    return lz_sub(lz_sigmoid(lz_mul(x, y)), lz_mul(lz_exp(lz_neg(x)), lz_tanh(lz_add(x, y))));
}

static lz_tensor *from(const float *v, int nd, const int64_t *shape)
{
    return lz_from_host(v, LZ_F32, nd, shape);
}

/* Runs the gradient check and also insists that every input got a
   gradient: the check alone skips inputs without one. */
static void check_grad(const char *what, lz_test_fn f, void *ctx, int n, lz_tensor *const *in)
{
    for (int i = 0; i < n; i++) lz_requires_grad(in[i], 1);
    double err = lz_test_gradcheck(f, ctx, n, in);
    if (!(err < 2e-2)) fprintf(stderr, "gradcheck %s: relative error %g\n", what, err);
    CHECK(err < 2e-2);
    for (int i = 0; i < n; i++) {
        if (!lz_grad(in[i])) fprintf(stderr, "gradcheck %s: input %d has no gradient\n", what, i);
        CHECK(lz_grad(in[i]) != NULL);
    }
}

static void check_values(const char *what, lz_tensor *t, const float *want, int64_t n)
{
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_I(lz_numel(t), n);
    CHECK_EQ_I(lz_tensor_dtype(t), LZ_F32);
    float *v = lz_test_read(t);
    CHECK(v != NULL);
    if (!v) return;
    for (int64_t i = 0; i < n && i < lz_numel(t); i++) {
        if (fabs(v[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
            fprintf(stderr, "%s[%lld]: got %.9g want %.9g\n", what, (long long)i, v[i], want[i]);
        CHECK_NEAR(v[i], want[i], 1e-5 * (1 + fabs(want[i])));
    }
    free(v);
}

static void check_i64(lz_tensor *t, const int64_t *want, int64_t n)
{
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_I(lz_tensor_dtype(t), LZ_I64);
    int64_t v[16];
    CHECK(n <= 16 && lz_to_host(t, v, sizeof(int64_t) * (size_t)n) == 0);
    for (int64_t i = 0; i < n; i++) CHECK_EQ_I(v[i], want[i]);
}

/* ---- gradient checks ------------------------------------------------------ */

static void grad_unary(void)
{
    const int64_t s34[] = {3, 4};
    struct { const char *name; un_op f; float lo, hi; } ops[] = {
        {"neg", lz_neg, -2, 2},         {"exp", lz_exp, -2, 2},
        {"log", lz_log, 0.5f, 3},       {"sqrt", lz_sqrt, 0.5f, 3},
        {"rsqrt", lz_rsqrt, 0.5f, 3},   {"tanh", lz_tanh, -2, 2},
        {"sigmoid", lz_sigmoid, -3, 3}, {"gelu", lz_gelu, -3, 3},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        lz_tensor *x = lz_test_rand(10 + (unsigned)i, ops[i].lo, ops[i].hi, 2, s34);
        op_ctx c = {.u = ops[i].f};
        check_grad(ops[i].name, call_unary, &c, 1, &x);
        lz_free(x);
    }
    /* relu: values kept 0.1 or more away from the kink, where the finite
       difference would straddle it */
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (i % 2 ? 1.0f : -1.0f) * (0.1f + 0.15f * (float)i);
    lz_tensor *x = from(xv, 2, s34);
    op_ctx c = {.u = lz_relu};
    check_grad("relu", call_unary, &c, 1, &x);
    lz_free(x);

    const float exps[] = {3.0f, 2.0f, 0.5f, -1.5f, 1.0f, 2.5f};
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++) {
        lz_tensor *xp = lz_test_rand(30 + (unsigned)i, 0.5f, 2.0f, 2, s34);
        op_ctx cp = {.p = exps[i]};
        check_grad("pow", call_pow, &cp, 1, &xp);
        lz_free(xp);
    }
    lz_tensor *xc = lz_test_rand(40, -1, 1, 2, s34);
    check_grad("cast", call_cast, NULL, 1, &xc);
    lz_free(xc);
    /* 0-d input */
    lz_tensor *x0 = lz_test_rand(41, 0.5f, 1.5f, 0, NULL);
    op_ctx ct = {.u = lz_tanh};
    check_grad("tanh 0-d", call_unary, &ct, 1, &x0);
    lz_free(x0);
}

static void grad_binary(void)
{
    struct { const char *name; bin_op f; } ops[] = {
        {"add", lz_add}, {"sub", lz_sub}, {"mul", lz_mul}, {"div", lz_div},
    };
    /* shape pairs: same, [3,4]+[4], [2,1,3]*[4,1], 0-d on either side */
    struct { int na, nb; int64_t sa[3], sb[3]; } pairs[] = {
        {2, 2, {3, 4}, {3, 4}},
        {2, 1, {3, 4}, {4}},
        {3, 2, {2, 1, 3}, {4, 1}},
        {2, 0, {3, 4}, {0}},
        {0, 2, {0}, {3, 4}},
        {1, 2, {4}, {3, 1}},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        for (size_t j = 0; j < sizeof pairs / sizeof pairs[0]; j++) {
            unsigned seed = (unsigned)(100 + 10 * i + j);
            lz_tensor *in[2] = {
                lz_test_rand(seed, -2, 2, pairs[j].na, pairs[j].sa),
                /* divisors stay away from 0 */
                lz_test_rand(seed + 500, 0.5f, 2, pairs[j].nb, pairs[j].sb),
            };
            char what[64];
            snprintf(what, sizeof what, "%s pair %zu", ops[i].name, j);
            op_ctx c = {.b = ops[i].f};
            check_grad(what, call_binary, &c, 2, in);
            lz_free(in[0]);
            lz_free(in[1]);
        }
    }
    /* maximum: a takes odd tenths, b values 0.05 off any of them, so no
       pair is within a finite-difference step of a tie */
    const int64_t s34[] = {3, 4}, s4[] = {4};
    float av[12], bv[4] = {-0.45f, -0.25f, -0.05f, 0.15f};
    for (int k = 0; k < 12; k++) av[k] = 0.2f * (float)(k * 7 % 12) - 1.1f;
    lz_tensor *in[2] = {from(av, 2, s34), from(bv, 1, s4)};
    op_ctx c = {.b = lz_maximum};
    check_grad("maximum [3,4],[4]", call_binary, &c, 2, in);
    lz_tensor *swap[2] = {in[1], in[0]};
    check_grad("maximum [4],[3,4]", call_binary, &c, 2, swap);
    lz_free(in[0]);
    lz_free(in[1]);
}

static void grad_where_and_composite(void)
{
    const int64_t s34[] = {3, 4}, s31[] = {3, 1}, s4[] = {4};
    float cv[12];
    for (int k = 0; k < 12; k++) cv[k] = (float)(k * 5 % 3 == 0);
    lz_tensor *cond = from(cv, 2, s34);
    lz_tensor *in[2] = {lz_test_rand(50, -1, 1, 2, s31), lz_test_rand(51, -1, 1, 1, s4)};
    check_grad("where", call_where, cond, 2, in);
    lz_free(in[0]);
    lz_free(in[1]);
    lz_free(cond);

    lz_tensor *xy[2] = {lz_test_rand(52, -1, 1, 2, s34), lz_test_rand(53, -1, 1, 1, s4)};
    check_grad("composite", call_composite, NULL, 2, xy);
    lz_free(xy[0]);
    lz_free(xy[1]);
}

/* Gradients at hand-picked points: relu at a kink side, maximum on ties
   (split evenly, like torch.maximum). */
static void grad_values(void)
{
    const int64_t s3[] = {3}, s2[] = {2};
    const float xv[] = {-1, 0, 2};
    lz_tensor *x = from(xv, 1, s3);
    lz_requires_grad(x, 1);
    CHECK(lz_backward(lz_sum(lz_relu(x))) == 0);
    const float want_relu[] = {0, 0, 1};
    check_values("relu grad", lz_grad(x), want_relu, 3);

    const float av[] = {1, 2}, bv[] = {1, 1};
    lz_tensor *a = from(av, 1, s2), *b = from(bv, 1, s2);
    lz_requires_grad(a, 1);
    lz_requires_grad(b, 1);
    CHECK(lz_backward(lz_sum(lz_maximum(a, b))) == 0);
    const float want_a[] = {0.5f, 1}, want_b[] = {0.5f, 0};
    check_values("maximum grad a", lz_grad(a), want_a, 2);
    check_values("maximum grad b", lz_grad(b), want_b, 2);

    /* d/dx (x * y) with y broadcast [2] over x [3, 2]: dy = column sums of x */
    const int64_t s32[] = {3, 2};
    const float mv[] = {1, 2, 3, 4, 5, 6}, yv[] = {10, 100};
    lz_tensor *m = from(mv, 2, s32), *y = from(yv, 1, s2);
    lz_requires_grad(m, 1);
    lz_requires_grad(y, 1);
    CHECK(lz_backward(lz_sum(lz_mul(m, y))) == 0);
    const float want_m[] = {10, 100, 10, 100, 10, 100}, want_y[] = {9, 12};
    check_values("mul grad m", lz_grad(m), want_m, 6);
    check_values("mul grad y", lz_grad(y), want_y, 2);
    lz_free(x); lz_free(a); lz_free(b); lz_free(m); lz_free(y);
}

/* ---- forward values ------------------------------------------------------- */

static void forward_values(void)
{
    const int64_t s23[] = {2, 3}, s3[] = {3}, s21[] = {2, 1}, s13[] = {1, 3}, s2[] = {2};
    const float m23[] = {1, 2, 3, 4, 5, 6}, v3[] = {10, 20, 30};
    lz_tensor *a = from(m23, 2, s23), *b = from(v3, 1, s3);
    const float want_add[] = {11, 22, 33, 14, 25, 36};
    check_values("add", lz_add(a, b), want_add, 6);
    CHECK_EQ_I(lz_ndim(lz_add(b, a)), 2);

    const float c21[] = {2, 3}, c13[] = {1, 2, 4};
    const float want_outer[] = {2, 4, 8, 3, 6, 12};
    check_values("mul outer", lz_mul(from(c21, 2, s21), from(c13, 2, s13)), want_outer, 6);

    const float v57[] = {5, 7};
    lz_tensor *two = lz_scalar(2);
    const float want_sub1[] = {3, 5}, want_sub2[] = {-3, -5};
    check_values("sub scalar", lz_sub(from(v57, 1, s2), two), want_sub1, 2);
    check_values("scalar sub", lz_sub(two, from(v57, 1, s2)), want_sub2, 2);
    CHECK_EQ_I(lz_ndim(lz_add(two, two)), 0);

    const float v13[] = {1, 3}, v4[] = {4};
    const int64_t s1[] = {1};
    const float want_div[] = {0.25f, 0.75f};
    check_values("div", lz_div(from(v13, 1, s2), from(v4, 1, s1)), want_div, 2);

    const float ma[] = {1, 5, -2}, mb[] = {3, 3, 3};
    const float want_max[] = {3, 5, 3};
    check_values("maximum", lz_maximum(from(ma, 1, s3), from(mb, 1, s3)), want_max, 3);

    /* unary functions at points whose values are known */
    const float pts[] = {-1, 0, 1};
    lz_tensor *p = from(pts, 1, s3);
    const float want_neg[] = {1, 0, -1}, want_exp[] = {0.36787944f, 1, 2.71828183f},
                want_tanh[] = {-0.76159416f, 0, 0.76159416f},
                want_sig[] = {0.26894142f, 0.5f, 0.73105858f}, want_relu[] = {0, 0, 1},
                want_gelu[] = {-0.15865525f, 0, 0.84134475f};
    check_values("neg", lz_neg(p), want_neg, 3);
    check_values("exp", lz_exp(p), want_exp, 3);
    check_values("tanh", lz_tanh(p), want_tanh, 3);
    check_values("sigmoid", lz_sigmoid(p), want_sig, 3);
    check_values("relu", lz_relu(p), want_relu, 3);
    check_values("gelu", lz_gelu(p), want_gelu, 3);

    const float pos[] = {1, 4, 9};
    lz_tensor *q = from(pos, 1, s3);
    const float want_log[] = {0, 1.38629436f, 2.19722458f}, want_sqrt[] = {1, 2, 3},
                want_rsqrt[] = {1, 0.5f, 0.33333333f}, want_p3[] = {1, 64, 729},
                want_p15[] = {1, 8, 27}, want_pm1[] = {1, 0.25f, 0.11111111f},
                want_p0[] = {1, 1, 1}, want_p2[] = {1, 16, 81};
    check_values("log", lz_log(q), want_log, 3);
    check_values("sqrt", lz_sqrt(q), want_sqrt, 3);
    check_values("rsqrt", lz_rsqrt(q), want_rsqrt, 3);
    check_values("pow 3", lz_pow(q, 3), want_p3, 3);
    check_values("pow 1.5", lz_pow(q, 1.5f), want_p15, 3);
    check_values("pow 0.5", lz_pow(q, 0.5f), want_sqrt, 3);
    check_values("pow -1", lz_pow(q, -1), want_pm1, 3);
    check_values("pow 0", lz_pow(q, 0), want_p0, 3);
    check_values("pow 2", lz_pow(q, 2), want_p2, 3);

    /* comparisons give f32 0/1 */
    const float ca[] = {1, 2, 3}, cb[] = {2, 2, 2};
    lz_tensor *x = from(ca, 1, s3), *y = from(cb, 1, s3);
    const float gt[] = {0, 0, 1}, lt[] = {1, 0, 0}, ge[] = {0, 1, 1}, le[] = {1, 1, 0},
                eq[] = {0, 1, 0};
    check_values("gt", lz_gt(x, y), gt, 3);
    check_values("lt", lz_lt(x, y), lt, 3);
    check_values("ge", lz_ge(x, y), ge, 3);
    check_values("le", lz_le(x, y), le, 3);
    check_values("eq", lz_eq(x, y), eq, 3);
    check_values("gt scalar", lz_gt(x, two), gt, 3);

    /* where with broadcasting and an f32 and an i64 condition */
    const float cond[] = {1, 0, 1}, ten[] = {10};
    const float want_where[] = {1, 10, 3};
    check_values("where", lz_where(from(cond, 1, s3), x, from(ten, 1, s1)), want_where, 3);
    const int64_t icond[] = {0, 5, 0};
    const float want_iwhere[] = {10, 2, 10};
    check_values("where i64 cond",
                 lz_where(lz_from_host(icond, LZ_I64, 1, s3), x, from(ten, 1, s1)),
                 want_iwhere, 3);

    /* integers: add, mul, maximum, neg keep the dtype; comparisons give f32 */
    const int64_t i1[] = {1, 2, 3}, i2[] = {10, -20, 30};
    lz_tensor *ia = lz_from_host(i1, LZ_I64, 1, s3), *ib = lz_from_host(i2, LZ_I64, 1, s3);
    const int64_t want_iadd[] = {11, -18, 33}, want_imul[] = {10, -40, 90},
                  want_imax[] = {10, 2, 30}, want_ineg[] = {-1, -2, -3}, want_isub[] = {-9, 22, -27};
    check_i64(lz_add(ia, ib), want_iadd, 3);
    check_i64(lz_sub(ia, ib), want_isub, 3);
    check_i64(lz_mul(ia, ib), want_imul, 3);
    check_i64(lz_maximum(ia, ib), want_imax, 3);
    check_i64(lz_neg(ia), want_ineg, 3);
    const float want_igt[] = {0, 1, 0};
    check_values("i64 gt", lz_gt(ia, ib), want_igt, 3);
    const int32_t j1[] = {7, -3}, j2[] = {2, 2};
    lz_tensor *ja = lz_from_host(j1, LZ_I32, 1, s2), *jb = lz_from_host(j2, LZ_I32, 1, s2);
    int32_t jv[2] = {0, 0};
    lz_tensor *jm = lz_mul(ja, jb);
    CHECK(jm && lz_tensor_dtype(jm) == LZ_I32 && lz_to_host(jm, jv, sizeof jv) == 0);
    CHECK_EQ_I(jv[0], 14);
    CHECK_EQ_I(jv[1], -6);

    /* casts truncate toward zero, like C and torch */
    const float fc[] = {2.7f, -1.5f, 3.0f};
    const int64_t want_cast[] = {2, -1, 3};
    check_i64(lz_cast(from(fc, 1, s3), LZ_I64), want_cast, 3);
    const float want_back[] = {1, 2, 3};
    check_values("cast i64 f32", lz_cast(ia, LZ_F32), want_back, 3);
    const float want_i32[] = {7, -3};
    check_values("cast i32 f32", lz_cast(ja, LZ_F32), want_i32, 2);
}

/* ---- kernels against a host loop ------------------------------------------ */

/* index of out element i in a broadcast operand */
static int64_t bcast_index(int64_t i, int nd, const int64_t *oshape, int ind, const int64_t *ishape)
{
    int64_t idx = 0, mul = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = i % oshape[d];
        i /= oshape[d];
        int id = d - (nd - ind);
        if (id < 0) continue;
        idx += (ishape[id] == 1 ? 0 : c) * mul;
        mul *= ishape[id];
    }
    return idx;
}

static void broadcast_case(int na, const int64_t *sa, int nb, const int64_t *sb, int nd,
                           const int64_t *so, unsigned seed)
{
    lz_tensor *a = lz_test_rand(seed, -1, 1, na, sa), *b = lz_test_rand(seed + 1, 0.5f, 2, nb, sb);
    float *av = lz_test_read(a), *bv = lz_test_read(b);
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= so[d];
    bin_op ops[] = {lz_add, lz_sub, lz_mul, lz_div, lz_maximum, lz_gt};
    for (int k = 0; k < 6; k++) {
        lz_tensor *y = ops[k](a, b);
        CHECK(y && lz_numel(y) == n && lz_ndim(y) == nd);
        float *yv = y ? lz_test_read(y) : NULL;
        float *ref = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            float x = av[bcast_index(i, nd, so, na, sa)], z = bv[bcast_index(i, nd, so, nb, sb)];
            ref[i] = k == 0 ? x + z : k == 1 ? x - z : k == 2 ? x * z : k == 3 ? x / z
                   : k == 4 ? (x > z ? x : z) : (float)(x > z);
        }
        CHECK(yv && lz_test_rel_err(yv, ref, n) < 1e-6);
        free(yv);
        free(ref);
        lz_free(y);
    }
    free(av);
    free(bv);
    lz_free(a);
    lz_free(b);
}

static void kernel_paths(void)
{
    /* general strided path: both operands broadcast on different axes */
    const int64_t a1[] = {2, 3, 1, 5}, b1[] = {3, 4, 1}, o1[] = {2, 3, 4, 5};
    broadcast_case(4, a1, 3, b1, 4, o1, 200);
    const int64_t a2[] = {5, 1, 7}, b2[] = {1, 6, 1}, o2[] = {5, 6, 7};
    broadcast_case(3, a2, 3, b2, 3, o2, 210);
    /* large enough for the OpenMP path: row broadcast, column broadcast,
       same shape (one long row cut in chunks) and a 0-d operand */
    const int64_t a3[] = {300, 400}, b3[] = {400}, b4[] = {300, 1}, b5[] = {0};
    broadcast_case(2, a3, 1, b3, 2, a3, 220);
    broadcast_case(2, a3, 2, b4, 2, a3, 230);
    broadcast_case(2, a3, 2, a3, 2, a3, 240);
    broadcast_case(2, a3, 0, b5, 2, a3, 250);
    broadcast_case(0, b5, 2, a3, 2, a3, 260);

    /* large unary and where: values against the C library */
    lz_tensor *x = lz_test_rand(270, -3, 3, 2, a3);
    float *xv = lz_test_read(x);
    float *gv = lz_test_read(lz_gelu(x)), *tv = lz_test_read(lz_where(lz_gt(x, lz_scalar(0)), x, lz_neg(x)));
    int gelu_ok = gv && tv;
    for (int64_t i = 0; gelu_ok && i < 120000; i++) {
        double want = 0.5 * xv[i] * (1 + erf(xv[i] / sqrt(2.0)));
        gelu_ok = fabs(gv[i] - want) < 1e-5 && tv[i] == fabsf(xv[i]);
    }
    CHECK(gelu_ok);
    free(xv); free(gv); free(tv);
    lz_free(x);
}

int main(void)
{
    grad_unary();
    grad_binary();
    grad_where_and_composite();
    grad_values();
    forward_values();
    kernel_paths();
    return lz_test_done();
}
