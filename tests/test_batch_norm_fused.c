/* Training-mode batch norm: the fused kernels (BATCH_NORM_* ops) give the
 * values of the composed reductions and element-wise ops they replace:
 * output, gradients of x, weight and bias, and the running statistics,
 * for both channel layouts the kernels walk (long rows and tiny ones),
 * with and without weight and bias, lazily and eagerly. Every shape has
 * at least 256 values per channel: below that lz_batch_norm stays composed. */
#include <math.h>
#include <stdlib.h>

#include "ops/batch_norm.h"
#include "testlib.h"

#define TOL 2e-5

enum { R_Y, R_GX, R_GW, R_GB, R_RM, R_RV, N_RES };

typedef struct result { float *v[N_RES]; int64_t n[N_RES]; } result;

static void run(int fused, int nd, const int64_t *xs, int has_w, int has_b, int x_grad,
                result *r)
{
    int was = lz_batch_norm_set_fused(fused);
    int64_t cs[1] = {xs[1]};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(11, -2, 3, nd, xs);
    lz_tensor *mix = lz_test_rand(12, -1, 1, nd, xs);   /* sum(y) alone has dx = 0 */
    lz_tensor *w = has_w ? lz_test_rand(13, 0.5f, 1.5f, 1, cs) : NULL;
    lz_tensor *b = has_b ? lz_test_rand(14, -0.5f, 0.5f, 1, cs) : NULL;
    lz_tensor *rm = lz_test_rand(15, -0.5f, 0.5f, 1, cs), *rv = lz_test_rand(16, 0.5f, 2, 1, cs);
    lz_requires_grad(x, x_grad);
    if (w) lz_requires_grad(w, 1);
    if (b) lz_requires_grad(b, 1);
    lz_tensor *y = lz_batch_norm(x, w, b, rm, rv, 1, 0.1f, 1e-5f);
    CHECK(y != NULL);
    CHECK(lz_backward(lz_sum(lz_mul(y, mix))) == 0);
    lz_mark_step();
    lz_tensor *t[N_RES] = {y, x_grad ? lz_grad(x) : NULL, w ? lz_grad(w) : NULL,
                           b ? lz_grad(b) : NULL, rm, rv};
    for (int k = 0; k < N_RES; k++) {
        r->v[k] = t[k] ? lz_test_read(t[k]) : NULL;
        r->n[k] = t[k] ? lz_numel(t[k]) : 0;
        CHECK(!t[k] || r->v[k]);
    }
    lz_scope_end();   /* frees every tensor made above */
    lz_batch_norm_set_fused(was);
}

static void compare(const char *what, int nd, const int64_t *xs, int has_w, int has_b, int x_grad)
{
    static const char *const names[N_RES] = {"y", "grad x", "grad w", "grad b", "running mean",
                                             "running var"};
    result f = {0}, c = {0};
    run(1, nd, xs, has_w, has_b, x_grad, &f);
    run(0, nd, xs, has_w, has_b, x_grad, &c);
    for (int k = 0; k < N_RES; k++) {
        CHECK_EQ_I(f.n[k], c.n[k]);
        CHECK(!f.v[k] == !c.v[k]);
        if (f.v[k] && c.v[k] && f.n[k] == c.n[k]) {
            double e = lz_test_rel_err(f.v[k], c.v[k], f.n[k]);
            if (!(e < TOL)) fprintf(stderr, "%s: %s rel err %g\n", what, names[k], e);
            CHECK(e < TOL);
        }
        free(f.v[k]);
        free(c.v[k]);
    }
}

static void all_cases(void)
{
    compare("4-d long rows", 4, (int64_t[]){4, 3, 8, 8}, 1, 1, 1);
    compare("4-d short rows", 4, (int64_t[]){64, 4, 2, 2}, 1, 1, 1);
    compare("2-d", 2, (int64_t[]){256, 5}, 1, 1, 1);
    compare("3-d", 3, (int64_t[]){8, 3, 40}, 1, 1, 1);
    compare("no affine", 4, (int64_t[]){4, 3, 8, 8}, 0, 0, 1);
    compare("weight only", 4, (int64_t[]){4, 3, 8, 8}, 1, 0, 1);
    compare("bias only", 4, (int64_t[]){4, 3, 8, 8}, 0, 1, 1);
    compare("x needs no grad", 4, (int64_t[]){4, 3, 8, 8}, 1, 1, 0);
    compare("big, threaded", 4, (int64_t[]){8, 16, 20, 20}, 1, 1, 1);
}

int main(void)
{
    all_cases();
    lz_set_eager(1);
    all_cases();
    lz_set_eager(0);
    return lz_test_done();
}
