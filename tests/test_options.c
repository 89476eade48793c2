/* Options structs (issue "Trust", item 4): a zero field is PyTorch's
 * default, LZ_OPT_ZERO an exact zero where zero differs from the default,
 * invalid values are errors naming the field, and an optimizer refuses a
 * tensor that does not require grad, naming it. */
#include <math.h>
#include <string.h>

#include "testlib.h"

/* loss = sum(p * p * w) over 4 elements: a gradient that is exactly 0 at
   one element, which gives NaN with eps 0 (0 / 0). */
static const float W[4] = {1.0f, 0.5f, 0.0f, 2.0f};

typedef struct run { float p[4]; int ok; } run;

static run adam_run(lz_adamw_opts o, int steps)
{
    run r = {{0}, 0};
    const int64_t shape[1] = {4};
    const float init[4] = {1.0f, -2.0f, 3.0f, 0.5f};
    lz_tensor *p = lz_from_host(init, LZ_F32, 1, shape), *w = lz_from_host(W, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_adamw *opt = lz_adamw_new(&p, 1, o);
    CHECK(opt != NULL);
    r.ok = opt != NULL;
    for (int s = 0; s < steps && opt; s++) {
        lz_scope_begin();
        lz_adamw_zero_grad(opt);
        lz_tensor *loss = lz_sum(lz_mul(lz_mul(p, p), w));
        r.ok &= loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0;
        lz_scope_end();
        lz_mark_step();
    }
    r.ok &= lz_to_host(p, r.p, sizeof r.p) == 0;
    lz_adamw_free(opt);
    lz_free(p);
    lz_free(w);
    return r;
}

/* The case: only lr set. It must equal the explicit torch
   defaults bit for bit and stay finite. */
static void test_adamw_zero_is_default(void)
{
    run zero = adam_run((lz_adamw_opts){.lr = 1e-3f}, 50);
    run dflt = adam_run((lz_adamw_opts){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                        .eps = 1e-8f}, 50);
    CHECK(zero.ok && dflt.ok);
    CHECK(memcmp(zero.p, dflt.p, sizeof zero.p) == 0);
    for (int i = 0; i < 4; i++) CHECK(isfinite(zero.p[i]));
    /* an all-zero struct: lr 1e-3 too */
    run all = adam_run((lz_adamw_opts){0}, 50);
    CHECK(all.ok && memcmp(all.p, dflt.p, sizeof all.p) == 0);
    /* LZ_OPT_ZERO asks for the zero itself: eps 0 makes 0/0 at the element
       whose gradient is 0, as torch would */
    run exact = adam_run((lz_adamw_opts){.lr = 1e-3f, .eps = LZ_OPT_ZERO}, 2);
    CHECK(exact.ok && isnan(exact.p[2]) && isfinite(exact.p[0]));
}

/* lz_sgd_opts{0}: lr 1e-3, no momentum: p - 1e-3 * 2p w after one step. */
static void test_sgd_zero_is_default(void)
{
    const int64_t shape[1] = {4};
    const float init[4] = {1.0f, -2.0f, 3.0f, 0.5f};
    lz_tensor *p = lz_from_host(init, LZ_F32, 1, shape), *w = lz_from_host(W, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_sgd *opt = lz_sgd_new(&p, 1, (lz_sgd_opts){0});
    CHECK(opt != NULL);
    lz_scope_begin();
    CHECK(lz_backward(lz_sum(lz_mul(lz_mul(p, p), w))) == 0 && lz_sgd_step(opt) == 0);
    lz_scope_end();
    float got[4];
    CHECK(lz_to_host(p, got, sizeof got) == 0);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(got[i], init[i] - 1e-3f * 2.0f * init[i] * W[i], 1e-7);
    lz_sgd_free(opt);
    /* LZ_OPT_ZERO: an optimizer whose rate starts at 0 (a warm-up) */
    opt = lz_sgd_new(&p, 1, (lz_sgd_opts){.lr = LZ_OPT_ZERO});
    CHECK(opt != NULL);
    lz_scope_begin();
    lz_sgd_zero_grad(opt);
    CHECK(lz_backward(lz_sum(lz_mul(lz_mul(p, p), w))) == 0 && lz_sgd_step(opt) == 0);
    lz_scope_end();
    float same[4];
    CHECK(lz_to_host(p, same, sizeof same) == 0);
    CHECK(memcmp(same, got, sizeof got) == 0);
    lz_sgd_free(opt);
    lz_free(p);
    lz_free(w);
}

static void expect_error(const void *made, const char *words)
{
    const char *e = lz_last_error();
    CHECK(made == NULL && e && strstr(e, words));
    if (!e || !strstr(e, words))
        fprintf(stderr, "  expected an error with \"%s\", got \"%s\"\n", words, e ? e : "none");
    lz_clear_error();
}

static void test_invalid(void)
{
    const int64_t shape[1] = {2};
    lz_tensor *p = lz_zeros(LZ_F32, 1, shape), *frozen = lz_zeros(LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_tensor *both[2] = {p, frozen};
    lz_clear_error();
    lz_sgd *s;
    lz_adamw *a;
    expect_error(s = lz_sgd_new(both, 2, (lz_sgd_opts){.lr = 0.1f}),
                 "lz_sgd_new: parameter 1 does not require grad");
    lz_sgd_free(s);
    expect_error(a = lz_adamw_new(both, 2, (lz_adamw_opts){0}),
                 "lz_adamw_new: parameter 1 does not require grad");
    lz_adamw_free(a);
    /* a mistaken -1 is an error, not LZ_OPT_ZERO */
    expect_error(s = lz_sgd_new(&p, 1, (lz_sgd_opts){.lr = -1.0f}), "(lr) -1");
    lz_sgd_free(s);
    expect_error(s = lz_sgd_new(&p, 1, (lz_sgd_opts){.weight_decay = -0.5f}), "weight_decay -0.5");
    lz_sgd_free(s);
    expect_error(s = lz_sgd_new(&p, 1, (lz_sgd_opts){.momentum = 0.9f, .nesterov = 2}),
                 "nesterov is 2");
    lz_sgd_free(s);
    expect_error(a = lz_adamw_new(&p, 1, (lz_adamw_opts){.lr = -1.0f}), "(lr) -1");
    lz_adamw_free(a);
    expect_error(a = lz_adamw_new(&p, 1, (lz_adamw_opts){.beta1 = -0.5f}), "beta1 -0.5");
    lz_adamw_free(a);
    expect_error(a = lz_adamw_new(&p, 1, (lz_adamw_opts){.beta2 = 1.0f}), "beta2 1");
    lz_adamw_free(a);
    expect_error(a = lz_adamw_new(&p, 1, (lz_adamw_opts){.eps = -1.0f}), "(eps) -1");
    lz_adamw_free(a);
    expect_error(a = lz_adamw_new(&p, 1, (lz_adamw_opts){.eps = NAN}), "(eps) nan");
    lz_adamw_free(a);
    lz_free(p);
    lz_free(frozen);
}

static void test_schedules(void)
{
    CHECK_NEAR(lz_lr_step(1.0f, 3, 3, 0.0f), 0.1, 1e-7);          /* gamma 0: torch's 0.1 */
    CHECK_NEAR(lz_lr_step(1.0f, 3, 3, LZ_OPT_ZERO), 0.0, 0);
    CHECK_NEAR(lz_lr_step(1.0f, 2, 3, LZ_OPT_ZERO), 1.0, 0);
    CHECK_NEAR(lz_lr_cosine(1.0f, 10, 10, LZ_OPT_ZERO), 0.0, 1e-7);
    lz_clear_error();
    CHECK(isnan(lz_lr_step(1.0f, 3, 0, 0.5f)) && strstr(lz_last_error(), "step_size 0"));
    lz_clear_error();
    CHECK(isnan(lz_lr_step(1.0f, 3, 3, -2.0f)) && strstr(lz_last_error(), "gamma -2"));
    lz_clear_error();
    CHECK(isnan(lz_lr_cosine(1.0f, 3, 0, 0.0f)) && strstr(lz_last_error(), "t_max 0"));
    lz_clear_error();
}

int main(void)
{
    test_adamw_zero_is_default();
    test_sgd_zero_is_default();
    test_invalid();
    test_schedules();
    return lz_test_done();
}
