/* Shape ops: forward values against index arithmetic done here, and
 * gradients against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define GRAD_TOL 2e-2

/* ---- functions under gradient check --------------------------------------- */

static lz_tensor *f_reshape(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    int64_t s[2] = {3, -1};
    return lz_reshape(in[0], 2, s);
}

static lz_tensor *f_permute(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    int perm[3] = {2, 0, 1};
    return lz_permute(in[0], perm);
}

static lz_tensor *f_transpose(void *ctx, lz_tensor *const *in)
{
    const int *ax = ctx;
    return lz_transpose(in[0], ax[0], ax[1]);
}

static lz_tensor *f_expand(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    int64_t s[3] = {2, 3, 4};
    return lz_expand(in[0], 3, s);
}

static lz_tensor *f_slice(void *ctx, lz_tensor *const *in)
{
    const int64_t *a = ctx;   /* axis, start, end */
    return lz_slice(in[0], (int)a[0], a[1], a[2]);
}

static lz_tensor *f_cat(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    return lz_cat(in, 3, 1);
}

/* A chain of shape ops, so that gradients pass through one another. */
static lz_tensor *f_chain(void *ctx, lz_tensor *const *in)
{
    (void)ctx;
    lz_scope_begin();
    int64_t s[2] = {4, 6};
    lz_tensor *r = lz_reshape(in[0], 2, s);                 /* [2,3,4] -> [4,6] */
    lz_tensor *t = lz_transpose(r, 0, 1);                   /* [6,4] */
    lz_tensor *sl = lz_slice(t, 0, 1, -1);                  /* [4,4] */
    lz_tensor *parts[2] = {sl, t};
    lz_tensor *c = lz_cat(parts, 2, 0);                     /* [10,4] */
    lz_tensor *y = lz_keep(lz_mul(c, c));
    lz_scope_end();
    return y;
}

static lz_tensor *rand_grad(unsigned seed, int nd, const int64_t *s)
{
    lz_tensor *t = lz_test_rand(seed, -1.0f, 1.0f, nd, s);
    lz_requires_grad(t, 1);
    return t;
}

static void gradchecks(void)
{
    int64_t s234[3] = {2, 3, 4};
    lz_tensor *x = rand_grad(1, 3, s234);
    double e;

    e = lz_test_gradcheck(f_reshape, NULL, 1, &x);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_permute, NULL, 1, &x);
    CHECK(e < GRAD_TOL);
    int ax02[2] = {0, 2}, axneg[2] = {-1, -2};
    e = lz_test_gradcheck(f_transpose, ax02, 1, &x);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_transpose, axneg, 1, &x);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_chain, NULL, 1, &x);
    CHECK(e < GRAD_TOL);

    int64_t s31[2] = {3, 1}, s4[1] = {4}, s1x4[3] = {1, 3, 4};
    lz_tensor *col = rand_grad(2, 2, s31), *row = rand_grad(3, 1, s4), *b = rand_grad(4, 3, s1x4);
    e = lz_test_gradcheck(f_expand, NULL, 1, &col);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_expand, NULL, 1, &row);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_expand, NULL, 1, &b);
    CHECK(e < GRAD_TOL);

    int64_t a1[3] = {1, 1, 3}, a2[3] = {-1, -3, -1}, a3[3] = {0, -100, 100};
    e = lz_test_gradcheck(f_slice, a1, 1, &x);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_slice, a2, 1, &x);
    CHECK(e < GRAD_TOL);
    e = lz_test_gradcheck(f_slice, a3, 1, &x);
    CHECK(e < GRAD_TOL);

    int64_t c1[3] = {2, 1, 3}, c2[3] = {2, 2, 3}, c3[3] = {2, 3, 3};
    lz_tensor *cs[3] = {rand_grad(5, 3, c1), rand_grad(6, 3, c2), rand_grad(7, 3, c3)};
    e = lz_test_gradcheck(f_cat, NULL, 3, cs);
    CHECK(e < GRAD_TOL);
    /* only the middle operand needs a gradient: the others get none */
    lz_requires_grad(cs[0], 0);
    lz_requires_grad(cs[2], 0);
    lz_zero_grad(cs[0]);
    lz_zero_grad(cs[2]);
    e = lz_test_gradcheck(f_cat, NULL, 3, cs);
    CHECK(e < GRAD_TOL);
    CHECK(lz_grad(cs[0]) == NULL);
    CHECK(lz_grad(cs[1]) != NULL);

    lz_free(x); lz_free(col); lz_free(row); lz_free(b);
    for (int i = 0; i < 3; i++) lz_free(cs[i]);
}

/* ---- forward values ----------------------------------------------------------- */

static float *iota(int64_t n)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    return v;
}

/* Reference permute on the host: out index -> in index. */
static void host_permute(const float *in, float *out, int nd, const int64_t *shape, const int *perm)
{
    int64_t st[8], os[8], n = 1;
    for (int d = nd - 1; d >= 0; d--) { st[d] = n; n *= shape[d]; }
    for (int d = 0; d < nd; d++) os[d] = shape[perm[d]];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += (r % os[d]) * st[perm[d]];
            r /= os[d];
        }
        out[i] = in[off];
    }
}

static void check_permute(int nd, const int64_t *shape, const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = iota(n), *ref = malloc(sizeof(float) * (size_t)n);
    host_permute(v, ref, nd, shape, perm);
    lz_tensor *x = lz_from_host(v, LZ_F32, nd, shape);
    lz_tensor *y = lz_permute(x, perm);
    CHECK(y != NULL);
    for (int d = 0; y && d < nd; d++) CHECK_EQ_I(lz_dim(y, d), shape[perm[d]]);
    float *got = y ? lz_test_read(y) : NULL;
    CHECK(got != NULL);
    if (got) {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += got[i] != ref[i];
        CHECK_EQ_I(bad, 0);
    }
    free(v); free(ref); free(got);
    lz_free(x); lz_free(y);
}

static void permute_values(void)
{
    int64_t s2[2] = {3, 5};
    int p2[2] = {1, 0};
    check_permute(2, s2, p2);
    int64_t s3[3] = {2, 3, 4};
    int p3[3] = {2, 0, 1};
    check_permute(3, s3, p3);
    /* large enough for the parallel, tiled paths and ragged tiles */
    int64_t big2[2] = {257, 301};
    check_permute(2, big2, p2);
    int64_t big3[3] = {3, 70, 190};
    int p3b[3] = {2, 0, 1}, p3c[3] = {0, 2, 1}, p3d[3] = {1, 0, 2};
    check_permute(3, big3, p3b);
    check_permute(3, big3, p3c);   /* batched transpose */
    check_permute(3, big3, p3d);   /* contiguous rows move */
    int64_t s4[4] = {2, 5, 3, 4};
    int p4[4] = {0, 2, 1, 3}, p4b[4] = {3, 1, 2, 0};
    check_permute(4, s4, p4);      /* attention head split */
    check_permute(4, s4, p4b);
    int64_t s1[3] = {1, 4, 1};
    int p1[3] = {2, 1, 0};
    check_permute(3, s1, p1);      /* unit axes only move */

    /* 8-byte elements */
    int64_t iv[6] = {0, 1, 2, 3, 4, 5}, s23[2] = {2, 3}, out[6];
    lz_tensor *xi = lz_from_host(iv, LZ_I64, 2, s23);
    lz_tensor *yi = lz_transpose(xi, 0, 1);
    CHECK(yi && lz_tensor_dtype(yi) == LZ_I64);
    CHECK(yi && lz_to_host(yi, out, sizeof out) == 0);
    int64_t want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(memcmp(out, want, sizeof want) == 0);
    lz_free(xi); lz_free(yi);
}

static void reshape_expand_values(void)
{
    float *v = iota(24);
    int64_t s[3] = {2, 3, 4}, r[2] = {-1, 6};
    lz_tensor *x = lz_from_host(v, LZ_F32, 3, s);
    lz_tensor *y = lz_reshape(x, 2, r);
    CHECK(y && lz_ndim(y) == 2 && lz_dim(y, 0) == 4 && lz_dim(y, 1) == 6);
    float *got = y ? lz_test_read(y) : NULL;
    CHECK(got && memcmp(got, v, sizeof(float) * 24) == 0);
    free(got);
    /* to 0-d and back */
    float one = 7.5f;
    int64_t s1[2] = {1, 1};
    lz_tensor *o = lz_from_host(&one, LZ_F32, 2, s1);
    lz_tensor *z = lz_reshape(o, 0, NULL);
    CHECK(z && lz_ndim(z) == 0);
    CHECK_NEAR(lz_item(z), 7.5, 0);

    float col[3] = {10, 20, 30};
    int64_t s31[2] = {3, 1}, se[3] = {2, 3, 4};
    lz_tensor *c = lz_from_host(col, LZ_F32, 2, s31);
    lz_tensor *e = lz_expand(c, 3, se);
    got = e ? lz_test_read(e) : NULL;
    CHECK(got != NULL);
    if (got) {
        int bad = 0;
        for (int i = 0; i < 24; i++) bad += got[i] != col[(i / 4) % 3];
        CHECK_EQ_I(bad, 0);
    }
    free(got);
    /* -1 keeps a size; a row broadcast down many rows (parallel path) */
    int64_t sm[2] = {-1, 4}, big[3] = {300, 40, 24};
    lz_tensor *e2 = lz_expand(c, 2, sm);
    CHECK(e2 && lz_dim(e2, 0) == 3 && lz_dim(e2, 1) == 4);
    lz_tensor *e3 = lz_expand(x, 3, (int64_t[3]){1, 3, 4}) ; /* no-op expand */
    CHECK(e3 == NULL);  /* [2,3,4] cannot become [1,3,4] */
    lz_clear_error();
    float *rowv = iota(24);
    int64_t s24[1] = {24};
    lz_tensor *rw = lz_from_host(rowv, LZ_F32, 1, s24);
    lz_tensor *eb = lz_expand(rw, 3, big);
    got = eb ? lz_test_read(eb) : NULL;
    CHECK(got != NULL);
    if (got) {
        int64_t bad = 0;
        for (int64_t i = 0; i < 300 * 40 * 24; i++) bad += got[i] != (float)(i % 24);
        CHECK_EQ_I(bad, 0);
    }
    free(got); free(rowv); free(v);
    lz_free(x); lz_free(y); lz_free(o); lz_free(z); lz_free(c); lz_free(e); lz_free(e2);
    lz_free(rw); lz_free(eb);
}

static void slice_cat_values(void)
{
    float *v = iota(10);
    int64_t s[2] = {2, 5};
    lz_tensor *x = lz_from_host(v, LZ_F32, 2, s);
    lz_tensor *a = lz_slice(x, 1, -3, -1);          /* columns 2, 3 */
    CHECK(a && lz_dim(a, 0) == 2 && lz_dim(a, 1) == 2);
    float *got = a ? lz_test_read(a) : NULL;
    float wa[4] = {2, 3, 7, 8};
    CHECK(got && memcmp(got, wa, sizeof wa) == 0);
    free(got);
    lz_tensor *b = lz_slice(x, -1, -100, 100);       /* clamped: everything */
    CHECK(b && lz_dim(b, 1) == 5);
    got = b ? lz_test_read(b) : NULL;
    CHECK(got && memcmp(got, v, sizeof(float) * 10) == 0);
    free(got);
    lz_tensor *c = lz_slice(x, 1, 4, 2);             /* empty, like Python */
    CHECK(c && lz_dim(c, 1) == 0);
    lz_tensor *d = lz_slice(x, 0, 1, 2);             /* the second row */
    got = d ? lz_test_read(d) : NULL;
    CHECK(got && got[0] == 5 && got[4] == 9);
    free(got);

    lz_tensor *parts[3] = {a, x, d};
    lz_tensor *r = lz_cat(parts, 2, 1);              /* [2,2] ++ [2,5] -> [2,7] */
    CHECK(r && lz_dim(r, 1) == 7);
    got = r ? lz_test_read(r) : NULL;
    float wr[14] = {2, 3, 0, 1, 2, 3, 4, 7, 8, 5, 6, 7, 8, 9};
    CHECK(got && memcmp(got, wr, sizeof wr) == 0);
    free(got);
    parts[0] = x;
    parts[1] = d;
    lz_tensor *q = lz_cat(parts, 2, 0);              /* [3,5] */
    CHECK(q && lz_dim(q, 0) == 3);
    got = q ? lz_test_read(q) : NULL;
    CHECK(got && got[9] == 9 && got[10] == 5 && got[14] == 9);
    free(got);
    free(v);
    lz_free(x); lz_free(a); lz_free(b); lz_free(c); lz_free(d); lz_free(r); lz_free(q);
}

int main(void)
{
    permute_values();
    reshape_expand_values();
    slice_cat_values();
    gradchecks();
    return lz_test_done();
}
