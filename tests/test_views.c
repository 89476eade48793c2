/* Reshapes as views (src/compile/views.c): a reshape whose result is a
 * temporary runs no kernel, the memory it views stays alive until its last
 * use even while other temporaries come and go, and a reshape that is a
 * graph output still hands the caller a buffer with the right values. */
#include <math.h>
#include <stdlib.h>

#include "compile/program.h"
#include "testlib.h"

static const int64_t xs[3] = {2, 3, 4}, flat[2] = {6, 4};

/* Kernels of one step of sum((x * x).reshape? * x'), fusion off so that
   every element-wise op is its own kernel. */
static int64_t kernels_of_step(int with_reshape, float *loss)
{
    lz_tensor *x = lz_test_rand(7, -1, 1, 3, xs);
    lz_metrics m0 = lz_metrics_get();
    lz_tensor *sq = lz_mul(x, x);
    lz_tensor *r = with_reshape ? lz_reshape(sq, 2, flat) : sq;
    lz_tensor *x2 = with_reshape ? lz_reshape(x, 2, flat) : x;
    lz_tensor *p = lz_mul(r, x2), *s = lz_sum(p);
    /* dropped before the barrier: temporaries, not results to keep */
    lz_free(p);
    if (with_reshape) {
        lz_free(x2);
        lz_free(r);
    }
    lz_free(sq);
    lz_mark_step();
    float *v = lz_test_read(s);
    *loss = v ? v[0] : NAN;
    free(v);
    int64_t k = lz_metrics_get().kernels - m0.kernels;
    lz_free(s);
    lz_free(x);
    return k;
}

/* v views sq, a temporary; six same-sized temporaries are made and dropped
   before v's last use. Were sq's memory freed at its own last use, one of
   them would take it and v would read their values. */
static void check_view_outlives(void)
{
    lz_tensor *x = lz_test_rand(8, 0.5f, 1.5f, 3, xs);
    float *hx = lz_test_read(x);
    lz_tensor *sq = lz_mul(x, x), *v = lz_reshape(sq, 2, flat);
    lz_free(sq);
    lz_tensor *t = lz_exp(x);
    for (int i = 0; i < 5; i++) {
        lz_tensor *u = lz_add(t, x);
        lz_free(t);
        t = u;
    }
    lz_tensor *back = lz_reshape(v, 3, xs);   /* a view of a view */
    lz_free(v);
    lz_tensor *y = lz_add(back, t);
    lz_free(back);
    lz_free(t);
    const int64_t k0 = lz_metrics_get().kernels;
    lz_mark_step();
    CHECK_EQ_I(lz_metrics_get().kernels - k0, 8);   /* mul, exp, 5 adds, add: no reshape */
    float *hy = lz_test_read(y);
    CHECK(hx && hy);
    int ok = hx && hy;
    for (int i = 0; ok && i < 24; i++) {
        double want = (double)hx[i] * hx[i] + exp((double)hx[i]) + 5.0 * hx[i];
        ok = fabs(hy[i] - want) <= 1e-5 * fabs(want);
    }
    CHECK(ok);
    free(hx);
    free(hy);
    lz_free(y);
    lz_free(x);
}

/* A reshape that is read (a graph output) gets its own buffer with the
   reshaped values, and its source is still right too. */
static void check_output_reshape(void)
{
    lz_tensor *x = lz_test_rand(9, -2, 2, 3, xs);
    float *hx = lz_test_read(x);
    lz_tensor *d = lz_add(x, x), *r = lz_reshape(d, 2, flat);
    lz_mark_step();
    CHECK_EQ_I(lz_dim(r, 0), 6);
    float *hr = lz_test_read(r), *hd = lz_test_read(d);
    CHECK(hx && hr && hd);
    int ok = hx && hr && hd;
    for (int i = 0; ok && i < 24; i++) ok = hr[i] == 2 * hx[i] && hd[i] == 2 * hx[i];
    CHECK(ok);
    free(hx);
    free(hr);
    free(hd);
    lz_free(r);
    lz_free(d);
    lz_free(x);
}

int main(void)
{
    lz_fusion_set(0);
    float with = 0, without = 0;
    const int64_t k_with = kernels_of_step(1, &with), k_without = kernels_of_step(0, &without);
    printf("kernels per step: %lld with two reshapes, %lld without\n", (long long)k_with,
           (long long)k_without);
    CHECK_EQ_I(k_with, k_without);
    CHECK(with == without);
    check_view_outlives();
    check_output_reshape();
    lz_fusion_set(-1);
    lz_shutdown();
    return lz_test_done();
}
