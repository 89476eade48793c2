/* Options structs beside positional calls: lz_batch_norm_opt and
 * lz_from_random_opt give the values of lz_batch_norm and lz_from_random
 * to the bit, read zero fields as torch's defaults and LZ_OPT_ZERO as 0,
 * and refuse bad options with errors naming themselves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* lz_from_random takes these as plain ints: the values must not move. */
_Static_assert(LZ_RANDOM_UNIFORM == 0 && LZ_RANDOM_NORMAL == 1, "lz_from_random's dist values");

static int same_bits(lz_tensor *a, lz_tensor *b)
{
    float *va = lz_test_read(a), *vb = lz_test_read(b);
    int same = va && vb && lz_numel(a) == lz_numel(b) &&
               memcmp(va, vb, sizeof(float) * (size_t)lz_numel(a)) == 0;
    free(va);
    free(vb);
    return same;
}

static void expect_error(const char *what, const void *made, const char *text)
{
    const char *e = lz_last_error();
    int ok = !made && e && strstr(e, text);
    if (!ok) fprintf(stderr, "%s: expected \"%s\", got %s\n", what, text, e ? e : "no error");
    CHECK(ok);
    lz_clear_error();
}

/* ---- batch norm ---- */

enum { C = 3 };
static const int64_t XS[4] = {4, C, 2, 2}, CS[1] = {C};

typedef struct bn_run {
    lz_tensor *x, *w, *b, *rm, *rv, *y;
} bn_run;

static void bn_make(bn_run *r)
{
    r->x = lz_test_rand(1, -2, 2, 4, XS);
    r->w = lz_test_rand(2, 0.5f, 1.5f, 1, CS);
    r->b = lz_test_rand(3, -0.5f, 0.5f, 1, CS);
    r->rm = lz_test_rand(4, -0.1f, 0.1f, 1, CS);
    r->rv = lz_test_rand(5, 0.9f, 1.1f, 1, CS);
    lz_requires_grad(r->x, 1);
    lz_requires_grad(r->w, 1);
    r->y = NULL;
}

static void bn_free(bn_run *r)
{
    lz_tensor *all[] = {r->x, r->w, r->b, r->rm, r->rv, r->y};
    for (int i = 0; i < 6; i++) lz_free(all[i]);
}

/* y, the running statistics after the call and the gradients of x and w
   (loss: sum of y * y) agree to the bit. */
static void bn_compare(lz_batch_norm_opts o, int training, float momentum, float eps)
{
    bn_run a, b;
    bn_make(&a);
    bn_make(&b);
    a.y = lz_batch_norm_opt(a.x, a.w, a.b, a.rm, a.rv, o);
    b.y = lz_batch_norm(b.x, b.w, b.b, b.rm, b.rv, training, momentum, eps);
    CHECK(a.y && b.y);
    lz_tensor *la = lz_sum(lz_mul(a.y, a.y)), *lb = lz_sum(lz_mul(b.y, b.y));
    CHECK(la && lb && lz_backward(la) == 0 && lz_backward(lb) == 0);
    CHECK(same_bits(a.y, b.y));
    CHECK(same_bits(a.rm, b.rm));
    CHECK(same_bits(a.rv, b.rv));
    CHECK(same_bits(lz_grad(a.x), lz_grad(b.x)));
    CHECK(same_bits(lz_grad(a.w), lz_grad(b.w)));
    lz_free(la), lz_free(lb);
    bn_free(&a), bn_free(&b);
}

static void test_batch_norm_same_op(void)
{
    bn_compare((lz_batch_norm_opts){.training = 1}, 1, 0.1f, 1e-5f);   /* zero fields: torch's */
    bn_compare((lz_batch_norm_opts){.training = 0}, 0, 0.1f, 1e-5f);
    bn_compare((lz_batch_norm_opts){.training = 1, .momentum = 0.3f, .eps = 1e-3f}, 1, 0.3f, 1e-3f);
    bn_compare((lz_batch_norm_opts){.training = 0, .eps = LZ_OPT_ZERO}, 0, 0.1f, 0.0f);
    bn_compare((lz_batch_norm_opts){.training = 1, .momentum = 1.0f}, 1, 1.0f, 1e-5f);
}

/* momentum LZ_OPT_ZERO: training mode leaves the running statistics as
   they were (0.1 would move them). */
static void test_batch_norm_zero_momentum(void)
{
    bn_run r, ref;
    bn_make(&r);
    bn_make(&ref);
    r.y = lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.training = 1, .momentum = LZ_OPT_ZERO});
    CHECK(r.y != NULL);
    CHECK(same_bits(r.rm, ref.rm));
    CHECK(same_bits(r.rv, ref.rv));
    lz_tensor *y = lz_batch_norm_opt(ref.x, ref.w, ref.b, ref.rm, ref.rv, (lz_batch_norm_opts){.training = 1});
    CHECK(y && !same_bits(r.rm, ref.rm));
    lz_free(y);
    bn_free(&r), bn_free(&ref);
}

static void test_batch_norm_errors(void)
{
    bn_run r;
    bn_make(&r);
    lz_clear_error();
    expect_error("training", lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.training = 2}),
                 "lz_batch_norm_opt: training is 2, expected 0 (eval) or 1");
    expect_error("momentum", lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.momentum = 1.5f}),
                 "lz_batch_norm_opt: invalid momentum 1.5: must be in [0, 1]");
    expect_error("momentum nan", lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.momentum = NAN}),
                 "lz_batch_norm_opt: invalid momentum nan");
    expect_error("eps", lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.eps = -1}),
                 "lz_batch_norm_opt: invalid eps -1: must be finite and >= 0");
    expect_error("eps inf", lz_batch_norm_opt(r.x, r.w, r.b, r.rm, r.rv, (lz_batch_norm_opts){.eps = INFINITY}),
                 "lz_batch_norm_opt: invalid eps inf");
    /* the op's own checks, under this call's name */
    lz_tensor *flat = lz_test_rand(6, 0, 1, 1, CS);
    expect_error("1-d input", lz_batch_norm_opt(flat, NULL, NULL, NULL, NULL, (lz_batch_norm_opts){.training = 1}),
                 "lz_batch_norm_opt: input [3] must have at least 2 dimensions");
    expect_error("eval without statistics", lz_batch_norm_opt(r.x, NULL, NULL, NULL, NULL, (lz_batch_norm_opts){0}),
                 "lz_batch_norm_opt: input [4, 3, 2, 2]: eval mode needs running_mean and running_var");
    /* a NULL input keeps the error of the op that failed first */
    lz_set_error("lz_earlier: the first failure");
    expect_error("NULL x", lz_batch_norm_opt(NULL, NULL, NULL, NULL, NULL, (lz_batch_norm_opts){.training = 7}),
                 "lz_earlier: the first failure");
    lz_free(flat);
    bn_free(&r);
}

/* ---- random fills ---- */

static const int64_t RS[2] = {64, 33};

static void random_compare(lz_random_opts o, int dist, float a, float b)
{
    lz_tensor *x = lz_from_random_opt(2, RS, o), *y = lz_from_random(o.seed, dist, a, b, 2, RS);
    CHECK(x && y && same_bits(x, y));
    lz_free(x), lz_free(y);
}

static void test_random_same_values(void)
{
    random_compare((lz_random_opts){.seed = 7}, 0, 0.0f, 1.0f);   /* torch.rand's [0, 1) */
    random_compare((lz_random_opts){.seed = 7, .dist = LZ_RANDOM_NORMAL}, 1, 0.0f, 1.0f);
    random_compare((lz_random_opts){.seed = 3, .low = -2, .high = 5}, 0, -2.0f, 5.0f);
    random_compare((lz_random_opts){.seed = 3, .low = -1, .high = LZ_OPT_ZERO}, 0, -1.0f, 0.0f);
    random_compare((lz_random_opts){.seed = 9, .dist = LZ_RANDOM_NORMAL, .mean = 1, .std = 0.5f}, 1, 1.0f, 0.5f);
    /* the defaults really are [0, 1) and a normal around 0 */
    lz_tensor *u = lz_from_random_opt(2, RS, (lz_random_opts){.seed = 11});
    float *v = lz_test_read(u);
    int in_range = v != NULL;
    double mean = 0;
    for (int i = 0; v && i < RS[0] * RS[1]; i++) {
        in_range &= v[i] >= 0.0f && v[i] < 1.0f;
        mean += v[i] / (double)(RS[0] * RS[1]);
    }
    CHECK(in_range);
    CHECK_NEAR(mean, 0.5, 0.05);
    free(v), lz_free(u);
    /* std LZ_OPT_ZERO: every value is the mean */
    lz_tensor *c = lz_from_random_opt(2, RS, (lz_random_opts){.seed = 1, .dist = LZ_RANDOM_NORMAL,
                                                             .mean = 2.5f, .std = LZ_OPT_ZERO});
    float *cv = lz_test_read(c);
    int all_mean = cv != NULL;
    for (int i = 0; cv && i < RS[0] * RS[1]; i++) all_mean &= cv[i] == 2.5f;
    CHECK(all_mean);
    free(cv), lz_free(c);
}

static void test_random_errors(void)
{
    lz_clear_error();
    expect_error("dist", lz_from_random_opt(2, RS, (lz_random_opts){.dist = (lz_random_dist)2}),
                 "lz_from_random_opt: dist 2 is neither LZ_RANDOM_UNIFORM (0) nor LZ_RANDOM_NORMAL (1)");
    expect_error("low > high", lz_from_random_opt(2, RS, (lz_random_opts){.low = 2}),
                 "lz_from_random_opt: invalid uniform range [2, 1)");
    expect_error("nan high", lz_from_random_opt(2, RS, (lz_random_opts){.high = NAN}),
                 "lz_from_random_opt: invalid uniform range [0, nan)");
    expect_error("std", lz_from_random_opt(2, RS, (lz_random_opts){.dist = LZ_RANDOM_NORMAL, .std = -1}),
                 "lz_from_random_opt: invalid normal mean 0, std -1");
    expect_error("uniform with std", lz_from_random_opt(2, RS, (lz_random_opts){.std = 2}),
                 "lz_from_random_opt: mean and std are for LZ_RANDOM_NORMAL");
    expect_error("normal with high", lz_from_random_opt(2, RS, (lz_random_opts){.dist = LZ_RANDOM_NORMAL, .high = 3}),
                 "lz_from_random_opt: low and high are for LZ_RANDOM_UNIFORM");
    const int64_t bad[1] = {-1};
    expect_error("shape", lz_from_random_opt(1, bad, (lz_random_opts){0}), "lz_from_random_opt: ");
}

int main(void)
{
    test_batch_norm_same_op();
    test_batch_norm_zero_momentum();
    test_batch_norm_errors();
    test_random_same_values();
    test_random_errors();
    return lz_test_done();
}
