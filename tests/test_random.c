/* Random tensors (lz_rand, lz_randn): the same seed gives the same numbers
 * in lazy, eager and captured mode, consecutive draws differ, the moments
 * are those of uniform [0, 1) and normal(0, 1), bad shapes are errors
 * naming the call, and a parameter drawn with lz_randn trains. Values are
 * not compared with PyTorch: the generator is lazyc's own (see
 * test_dropout.c); the distributions are what must match. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

enum { BIG = 200000 };

static float *draw(int normal, int64_t n)
{
    lz_tensor *t = normal ? lz_randn(1, &n) : lz_rand(1, &n);
    CHECK(t != NULL && lz_tensor_dtype(t) == LZ_F32 && lz_numel(t) == n);
    float *v = t ? lz_test_read(t) : NULL;
    lz_free(t);
    return v;
}

static int same(const float *a, const float *b, int64_t n)
{
    return a && b && memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static void test_moments(void)
{
    lz_manual_seed(11);
    float *u = draw(0, BIG), *z = draw(1, BIG);
    if (!u || !z) {
        CHECK(0);
        free(u);
        free(z);
        return;
    }
    double su = 0, suu = 0, sz = 0, szz = 0, sz4 = 0, umin = 1, umax = 0;
    int64_t within1 = 0;
    for (int64_t i = 0; i < BIG; i++) {
        su += u[i], suu += (double)u[i] * u[i];
        umin = fmin(umin, u[i]), umax = fmax(umax, u[i]);
        sz += z[i], szz += (double)z[i] * z[i], sz4 += pow(z[i], 4);
        within1 += fabsf(z[i]) < 1.0f;
    }
    double mu = su / BIG, vu = suu / BIG - mu * mu, mz = sz / BIG, vz = szz / BIG - mz * mz;
    /* tolerances: 5 standard errors of each estimate at n = 200000 */
    CHECK(umin >= 0 && umax < 1);
    CHECK_NEAR(mu, 0.5, 5 * sqrt(1.0 / 12 / BIG));
    CHECK_NEAR(vu, 1.0 / 12, 5 * sqrt(1.0 / 180 / BIG));
    CHECK_NEAR(mz, 0.0, 5 * sqrt(1.0 / BIG));
    CHECK_NEAR(vz, 1.0, 5 * sqrt(2.0 / BIG));
    CHECK_NEAR(sz4 / BIG, 3.0, 5 * sqrt(96.0 / BIG));   /* normal's kurtosis */
    CHECK_NEAR((double)within1 / BIG, 0.682689, 5 * sqrt(0.2166 / BIG));
    free(u);
    free(z);
}

/* seed, then uniform 1000, normal 1000, normal 1000 */
static void draws(uint64_t seed, float *out[3])
{
    lz_manual_seed(seed);
    out[0] = draw(0, 1000);
    out[1] = draw(1, 1000);
    out[2] = draw(1, 1000);
}

static void free3(float *v[3]) { for (int i = 0; i < 3; i++) free(v[i]); }

static int draw_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx, (void)in;
    int64_t n = 1000;
    out[0] = lz_randn(1, &n);
    return out[0] ? 0 : -1;
}

static void test_seeds(void)
{
    float *a[3], *b[3], *c[3];
    draws(5, a);
    draws(5, b);
    for (int i = 0; i < 3; i++) CHECK(same(a[i], b[i], 1000));
    CHECK(!same(a[1], a[2], 1000));         /* the counter advanced */
    draws(6, c);
    CHECK(!same(a[1], c[1], 1000));
    free3(c);

    lz_set_eager(1);
    draws(5, c);
    lz_set_eager(0);
    for (int i = 0; i < 3; i++) CHECK(same(a[i], c[i], 1000));
    free3(c);

    /* captured: each replay draws anew, in the lazy sequence */
    lz_manual_seed(5);
    float *u = draw(0, 1000);
    lz_fn *f = lz_capture(draw_step, NULL, 0, 1);
    CHECK(f != NULL);
    for (int call = 0; f && call < 2; call++) {
        lz_tensor *out = NULL;
        CHECK_EQ_I(lz_call(f, NULL, &out), 0);
        float *v = out ? lz_test_read(out) : NULL;
        CHECK(same(v, a[1 + call], 1000));
        free(v);
        lz_free(out);
    }
    lz_fn_free(f);
    CHECK(same(u, a[0], 1000));
    free(u);
    free3(a);
    free3(b);
}

static void test_errors(void)
{
    lz_clear_error();
    CHECK(lz_rand(-1, NULL) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_rand"));
    lz_clear_error();
    CHECK(lz_randn(2, (int64_t[]){3, -2}) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_randn"));
    lz_clear_error();
    CHECK(lz_randn(1, NULL) == NULL);
    lz_clear_error();
    lz_tensor *s = lz_rand(0, NULL);   /* 0-d: one number */
    CHECK(s && lz_numel(s) == 1);
    float v = lz_item(s);
    CHECK(v >= 0 && v < 1);
    lz_free(s);
}

/* w = 0.1 * randn is a leaf: backward reaches it and SGD moves it. */
static void test_parameter(void)
{
    lz_manual_seed(1);
    int64_t shape[2] = {4, 3};
    lz_tensor *r = lz_randn(2, shape), *k = lz_scalar(0.1f);
    lz_tensor *w = lz_mul(r, k);
    lz_free(r);
    lz_free(k);
    lz_requires_grad(w, 1);
    lz_tensor *loss = lz_sum(lz_mul(w, w));
    CHECK_EQ_I(lz_backward(loss), 0);
    lz_tensor *g = lz_grad(w);
    CHECK(g != NULL);
    float *gv = g ? lz_test_read(g) : NULL, *wv = lz_test_read(w);
    for (int i = 0; gv && wv && i < 12; i++) CHECK_NEAR(gv[i], 2 * wv[i], 1e-6);
    free(gv);
    free(wv);
    lz_free(loss);
    lz_free(w);
}

int main(void)
{
    test_moments();
    test_seeds();
    test_errors();
    test_parameter();
    lz_shutdown();
    return lz_test_done();
}
