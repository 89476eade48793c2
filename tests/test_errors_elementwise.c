/* Shape and dtype errors of element-wise ops and reductions: caught when the
 * op is recorded, NULL returned with a message that names what is wrong,
 * nothing executed, and the program goes on. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static int mentions(const char *needle)
{
    const char *e = lz_last_error();
    int ok = e && strstr(e, needle);
    if (!ok) fprintf(stderr, "error message \"%s\" lacks \"%s\"\n", e ? e : "(none)", needle);
    return ok;
}

int main(void)
{
    const int64_t s23[] = {2, 3}, s4[] = {4}, s3[] = {3};
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, s23), *b = lz_test_rand(2, -1, 1, 1, s4);
    const int64_t iv[] = {1, 2, 3};
    lz_tensor *i64 = lz_from_host(iv, LZ_I64, 1, s3);
    const int32_t jv[] = {1, 2, 3};
    lz_tensor *i32 = lz_from_host(jv, LZ_I32, 1, s3);
    lz_tensor *f3 = lz_test_rand(3, 0.5f, 1, 1, s3);
    /* the counts below are about lazy recording */
    lz_set_eager(0);
    lz_metrics_reset();

    /* broadcasting mismatch names the op and both shapes */
    lz_clear_error();
    CHECK(lz_add(a, b) == NULL);
    CHECK(mentions("lz_add"));
    CHECK(mentions("[2, 3]"));
    CHECK(mentions("[4]"));
    lz_clear_error();
    CHECK(lz_where(f3, a, a) != NULL);   /* [3] against [2, 3] broadcasts; [4] does not */
    lz_clear_error();
    CHECK(lz_where(b, a, a) == NULL);
    CHECK(mentions("lz_where"));

    /* a NULL operand gives NULL; a chain keeps the first error */
    lz_clear_error();
    CHECK(lz_exp(NULL) == NULL);
    CHECK(lz_last_error() != NULL);
    lz_clear_error();
    CHECK(lz_mul(a, NULL) == NULL);
    CHECK(mentions("lz_mul"));
    lz_clear_error();
    CHECK(lz_sum(lz_relu(lz_add(a, b))) == NULL);
    CHECK(mentions("lz_add"));
    lz_clear_error();
    CHECK(lz_where(NULL, a, a) == NULL && lz_cast(NULL, LZ_F32) == NULL);
    CHECK(lz_max_axes(NULL, 0, NULL, 0) == NULL && lz_pow(NULL, 2) == NULL);

    /* dtype errors name the op and the dtype */
    const char *f32_only[] = {"lz_exp", "lz_log", "lz_sqrt", "lz_rsqrt", "lz_tanh",
                              "lz_sigmoid", "lz_relu", "lz_gelu"};
    lz_tensor *(*fs[])(lz_tensor *) = {lz_exp, lz_log, lz_sqrt, lz_rsqrt, lz_tanh,
                                       lz_sigmoid, lz_relu, lz_gelu};
    for (int i = 0; i < 8; i++) {
        lz_clear_error();
        CHECK(fs[i](i64) == NULL);
        CHECK(mentions(f32_only[i]));
        CHECK(mentions("i64"));
    }
    lz_clear_error();
    CHECK(lz_pow(i32, 2) == NULL);
    CHECK(mentions("i32"));
    lz_clear_error();
    CHECK(lz_add(f3, i64) == NULL);      /* mixed dtypes name both */
    CHECK(mentions("f32"));
    CHECK(mentions("i64"));
    lz_clear_error();
    CHECK(lz_gt(i32, i64) == NULL);
    CHECK(mentions("i32"));
    CHECK(mentions("i64"));
    lz_clear_error();
    CHECK(lz_div(i64, i64) == NULL);     /* integer division is not offered */
    CHECK(mentions("lz_div"));
    lz_clear_error();
    CHECK(lz_where(f3, f3, i64) == NULL);
    CHECK(mentions("i64"));
    lz_clear_error();
    CHECK(lz_cast(f3, (lz_dtype)7) == NULL);
    CHECK(mentions("lz_cast"));
    lz_clear_error();
    CHECK(lz_mean(i64) == NULL);
    CHECK(mentions("lz_mean"));

    /* reduction axes */
    const int bad[] = {2}, neg_bad[] = {-3}, twice[] = {1, -1}, a0[] = {0};
    lz_clear_error();
    CHECK(lz_sum_axes(a, 1, bad, 0) == NULL);
    CHECK(mentions("lz_sum_axes"));
    lz_clear_error();
    CHECK(lz_mean_axes(a, 1, neg_bad, 0) == NULL);
    CHECK(mentions("-3"));
    lz_clear_error();
    CHECK(lz_max_axes(a, 2, twice, 0) == NULL);
    CHECK(mentions("twice"));
    lz_clear_error();
    CHECK(lz_sum_axes(a, 3, twice, 0) == NULL);
    lz_clear_error();
    CHECK(lz_sum_axes(a, 1, NULL, 0) == NULL);
    const int64_t s03[] = {0, 3};
    lz_clear_error();
    CHECK(lz_max_axes(lz_zeros(LZ_F32, 2, s03), 1, a0, 0) == NULL);
    CHECK(mentions("size 0"));

    /* none of that recorded or ran anything */
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.executions, 0);
    CHECK_EQ_I(m.graphs, 0);

    /* and the program goes on: a correct op still works */
    lz_clear_error();
    const float x[] = {1, 2, 3}, y[] = {10};
    const int64_t s1[] = {1};
    lz_tensor *z = lz_add(lz_from_host(x, LZ_F32, 1, s3), lz_from_host(y, LZ_F32, 1, s1));
    float out[3] = {0, 0, 0};
    CHECK(z && lz_to_host(z, out, sizeof out) == 0);
    CHECK_NEAR(out[0], 11, 0);
    CHECK_NEAR(out[2], 13, 0);
    CHECK(lz_last_error() == NULL);
    return lz_test_done();
}
