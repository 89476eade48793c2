/* Bad shapes are caught when an op is recorded: the op returns NULL with a
 * message naming the shapes, nothing runs, and the program goes on. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* The last error mentions every one of the given strings. */
static int error_has(const char *a, const char *b)
{
    const char *m = lz_last_error();
    if (!m) return 0;
    if (a && !strstr(m, a)) { fprintf(stderr, "error \"%s\" lacks \"%s\"\n", m, a); return 0; }
    if (b && !strstr(m, b)) { fprintf(stderr, "error \"%s\" lacks \"%s\"\n", m, b); return 0; }
    return 1;
}

int main(void)
{
    lz_metrics_reset();
    int64_t s23[2] = {2, 3}, s45[2] = {4, 5}, s33[2] = {3, 3};
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, s23);
    lz_tensor *b = lz_test_rand(2, -1, 1, 2, s45);
    lz_tensor *c = lz_test_rand(3, -1, 1, 2, s33);
    lz_tensor *r;

    lz_clear_error();
    r = lz_matmul(a, b);
    CHECK(r == NULL);
    CHECK(error_has("lz_matmul", "[2, 3]"));
    CHECK(error_has("[4, 5]", NULL));

    lz_clear_error();
    int64_t s42[2] = {4, 2};
    r = lz_reshape(a, 2, s42);
    CHECK(r == NULL);
    CHECK(error_has("lz_reshape", "[2, 3]"));
    CHECK(error_has("[4, 2]", NULL));

    lz_clear_error();
    int64_t two_infer[2] = {-1, -1}, s4x[2] = {4, -1};
    CHECK(lz_reshape(a, 2, two_infer) == NULL);
    CHECK(error_has("lz_reshape", NULL));
    lz_clear_error();
    CHECK(lz_reshape(a, 2, s4x) == NULL);     /* 6 is not a multiple of 4 */
    CHECK(error_has("[2, 3]", "[4, -1]"));

    lz_clear_error();
    lz_tensor *ac[2] = {a, c};
    r = lz_cat(ac, 2, 1);                      /* [2,3] and [3,3] differ on axis 0 */
    CHECK(r == NULL);
    CHECK(error_has("lz_cat", "[3, 3]"));
    lz_clear_error();
    int64_t s2[1] = {2};
    lz_tensor *v = lz_test_rand(4, -1, 1, 1, s2);
    lz_tensor *av[2] = {a, v};
    CHECK(lz_cat(av, 2, 0) == NULL);           /* ndim differs */
    CHECK(error_has("lz_cat", NULL));
    lz_clear_error();
    CHECK(lz_cat(ac, 0, 0) == NULL);
    lz_clear_error();
    CHECK(lz_cat(ac, 2, 2) == NULL);           /* axis out of range */
    CHECK(lz_last_error() != NULL);

    lz_clear_error();
    int dup[2] = {0, 0}, out_of_range[2] = {0, 2};
    CHECK(lz_permute(a, dup) == NULL);
    CHECK(error_has("lz_permute", "[0, 0]"));
    lz_clear_error();
    CHECK(lz_permute(a, out_of_range) == NULL);
    CHECK(error_has("lz_permute", "[2, 3]"));
    lz_clear_error();
    CHECK(lz_transpose(a, 0, 5) == NULL);
    CHECK(lz_last_error() != NULL);

    lz_clear_error();
    int64_t s24[2] = {2, 4};
    CHECK(lz_expand(a, 2, s24) == NULL);
    CHECK(error_has("lz_expand", "[2, 4]"));
    lz_clear_error();
    CHECK(lz_expand(a, 1, s2) == NULL);        /* fewer dims than the source */
    CHECK(error_has("lz_expand", NULL));

    lz_clear_error();
    CHECK(lz_slice(a, 2, 0, 1) == NULL);
    CHECK(lz_last_error() != NULL);

    lz_clear_error();
    int64_t s234[3] = {2, 3, 4}, s345[3] = {3, 4, 5};
    lz_tensor *x3 = lz_test_rand(5, -1, 1, 3, s234), *y3 = lz_test_rand(6, -1, 1, 3, s345);
    CHECK(lz_matmul(x3, y3) == NULL);          /* batch 2 vs 3 */
    CHECK(error_has("[2, 3, 4]", "[3, 4, 5]"));
    lz_clear_error();
    CHECK(lz_matmul(v, b) == NULL);            /* 1-d [2] against [4, 5] */
    CHECK(error_has("[2]", "[4, 5]"));

    lz_clear_error();
    CHECK(lz_softmax(a, 2) == NULL);
    CHECK(lz_last_error() != NULL);
    lz_clear_error();
    CHECK(lz_log_softmax(a, -3) == NULL);
    CHECK(lz_last_error() != NULL);

    lz_clear_error();
    float tf[2] = {0, 1};
    lz_tensor *ft = lz_from_host(tf, LZ_F32, 1, s2);
    CHECK(lz_cross_entropy(a, ft) == NULL);    /* float targets */
    CHECK(error_has("lz_cross_entropy", "f32"));
    lz_clear_error();
    int64_t t3[3] = {0, 1, 2}, s3[1] = {3};
    lz_tensor *it = lz_from_host(t3, LZ_I64, 1, s3);
    CHECK(lz_cross_entropy(a, it) == NULL);    /* 3 targets for 2 rows */
    CHECK(error_has("[2, 3]", "[3]"));
    lz_clear_error();
    CHECK(lz_cross_entropy(x3, it) == NULL);   /* 3-d logits */
    CHECK(error_has("lz_cross_entropy", NULL));

    /* a NULL operand passes through a chain; the first error is kept */
    lz_clear_error();
    lz_tensor *bad = lz_matmul(a, b);
    lz_tensor *chain = lz_softmax(lz_transpose(lz_reshape(bad, 1, (int64_t[]){-1}), 0, 0), 0);
    CHECK(chain == NULL);
    CHECK(error_has("lz_matmul", NULL));

    /* nothing ran for any of it, and valid ops still work */
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.executions, 0);
    lz_clear_error();
    lz_tensor *ok = lz_matmul(a, lz_transpose(c, 0, 1));
    CHECK(ok != NULL);
    float *okv = ok ? lz_test_read(ok) : NULL;
    CHECK(okv != NULL && !isnan(okv[0]));
    CHECK(lz_last_error() == NULL);
    free(okv);

    lz_free(a); lz_free(b); lz_free(c); lz_free(v); lz_free(x3); lz_free(y3);
    lz_free(ft); lz_free(it); lz_free(ok);
    return lz_test_done();
}
