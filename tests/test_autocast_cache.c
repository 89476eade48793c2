/* Autocast's cast cache never hands out a cast that does not hold: a
 * parameter assigned since (whatever address its new value's node gets:
 * glibc's allocator reuses a freed node's address for the next one of that
 * size, so the loops below reuse them on nearly every step) is cast again;
 * a cast made under no_grad is not reused where a gradient must flow; and a
 * captured step that leaves a region (or a no-grad section) open fails and
 * leaves the caller's modes as they were. */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "testlib.h"

static lz_tensor *scalar2d(float v)
{
    return lz_from_host(&v, LZ_F32, 2, (const int64_t[]){1, 1});
}

/* Each step assigns W twice inside one region (once from a fresh tensor,
   once from host memory, a barrier between) and then reads it through a
   product under no_grad: the product must see the last value. */
static int stale_reads(int steps)
{
    lz_tensor *I = scalar2d(1), *W = scalar2d(1);
    lz_requires_grad(W, 1);
    int stale = 0;
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    for (int k = 0; k < steps; k++) {
        lz_scope_begin();
        lz_no_grad_begin();
        lz_tensor *before = lz_matmul(I, W);   /* caches W's cast */
        lz_no_grad_end();
        CHECK(before != NULL);
        const float a = (float)(2 * k + 2), b = (float)(2 * k + 3);
        CHECK(lz_assign(W, scalar2d(a)) == 0);
        lz_mark_step();
        CHECK(lz_copy_from_host(W, &b, sizeof b) == 0);
        lz_no_grad_begin();
        float got = lz_item(lz_matmul(I, W));
        lz_no_grad_end();
        stale += got != b;   /* small integers: exact in bf16 */
        lz_scope_end();
        lz_mark_step();
    }
    CHECK(lz_autocast_end() == 0);
    lz_free(I);
    lz_free(W);
    return stale;
}

static void assignments_recast(void)
{
    CHECK_EQ_I(stale_reads(30), 0);
    lz_set_eager(1);
    CHECK_EQ_I(stale_reads(30), 0);
    lz_set_eager(0);
}

/* x [2, 3] = 1..6, W [2, 3], b [2]: d sum(x W^T + b) / dW = column sums of
   x in every row, [[5, 7, 9], [5, 7, 9]]. */
typedef struct lin { lz_tensor *x, *w, *b; } lin;

static lin make_lin(void)
{
    lin m = {lz_from_host((const float[]){1, 2, 3, 4, 5, 6}, LZ_F32, 2, (const int64_t[]){2, 3}),
             lz_from_host((const float[]){1, 0, 0, 0, 1, 0}, LZ_F32, 2, (const int64_t[]){2, 3}),
             lz_from_host((const float[]){0, 0}, LZ_F32, 1, (const int64_t[]){2})};
    lz_requires_grad(m.w, 1);
    lz_requires_grad(m.b, 1);
    return m;
}

static void check_grad_w(lz_tensor *w)
{
    lz_tensor *g = lz_grad(w);
    CHECK(g != NULL);
    if (!g) return;
    float v[6];
    CHECK(lz_to_host(g, v, sizeof v) == 0);
    const float want[6] = {5, 7, 9, 5, 7, 9};
    for (int i = 0; i < 6; i++) CHECK(v[i] == want[i]);
}

/* an eval metric under no_grad, then the training product, one region */
static int eval_then_train(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)in;
    lin *m = ctx;
    lz_zero_grad(m->w);
    lz_zero_grad(m->b);
    lz_no_grad_begin();
    lz_tensor *metric = lz_linear(m->x, m->w, m->b);
    lz_no_grad_end();
    lz_tensor *loss = lz_sum(lz_linear(m->x, m->w, m->b));
    if (!metric || lz_backward(loss) != 0) return -1;
    out[0] = loss;
    return 0;
}

static void no_grad_cast_not_reused(void)
{
    lz_scope_begin();
    lin m = make_lin();
    lz_tensor *loss = NULL;
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    CHECK(eval_then_train(&m, NULL, &loss) == 0);
    CHECK(lz_autocast_end() == 0);
    check_grad_w(m.w);
    /* the same inside a capture: traced, then replayed */
    lz_fn *f = lz_capture(eval_then_train, &m, 0, 1);
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(lz_call(f, NULL, &loss) == 0);
        lz_mark_step();
        check_grad_w(m.w);
    }
    CHECK(lz_autocast_end() == 0);
    lz_fn_free(f);
    lz_scope_end();
}

static int opens_region(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_autocast_begin(LZ_BF16);
    out[0] = lz_sum(lz_matmul(in[0], in[0]));
    return out[0] ? 0 : -1;
}

static int closes_region(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_autocast_end();
    out[0] = lz_sum(lz_matmul(in[0], in[0]));
    return out[0] ? 0 : -1;
}

static int opens_no_grad(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_no_grad_begin();
    out[0] = lz_sum(in[0]);
    return out[0] ? 0 : -1;
}

static int mentions(const char *needle)
{
    const char *e = lz_last_error();
    int ok = e && strstr(e, needle);
    if (!ok) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", e ? e : "(none)", needle);
    return ok;
}

/* after the call, a product outside any region is float32: 1/3 * 3 is not
   bf16's rounding of 1/3 times 3 */
static int products_are_f32(void)
{
    lz_scope_begin();
    lz_tensor *a = scalar2d(1.0f / 3.0f), *b = scalar2d(3.0f);
    float v = lz_item(lz_matmul(a, b));
    lz_scope_end();
    return v == (1.0f / 3.0f) * 3.0f;
}

static void step_leaves_modes_as_found(void)
{
    lz_scope_begin();
    lz_tensor *x = scalar2d(1.0f / 3.0f), *o = NULL;
    lz_fn *f = lz_capture(opens_region, NULL, 1, 1);
    for (int k = 0; k < 2; k++) {
        lz_clear_error();
        CHECK(lz_call(f, &x, &o) == -1);
        CHECK(mentions("autocast regions changed (0 open when it was called, 1 when it returned)"));
        CHECK(products_are_f32());
    }
    lz_fn_free(f);
    f = lz_capture(closes_region, NULL, 1, 1);
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_clear_error();
    CHECK(lz_call(f, &x, &o) == -1);
    CHECK(mentions("(1 open when it was called, 0 when it returned)"));
    CHECK(lz_autocast_end() == 0);   /* the caller's region is still open */
    CHECK(products_are_f32());
    lz_fn_free(f);
    f = lz_capture(opens_no_grad, NULL, 1, 1);
    lz_clear_error();
    CHECK(lz_call(f, &x, &o) == -1);
    CHECK(mentions("left 1 lz_no_grad_begin section(s) open"));
    lz_tensor *w = scalar2d(2);
    lz_requires_grad(w, 1);
    CHECK(lz_backward(lz_sum(lz_mul(w, w))) == 0);   /* grad mode is on again */
    lz_fn_free(f);
    lz_scope_end();
}

int main(void)
{
    /* the bf16 machinery itself: every product bf16, whatever this CPU runs
       faster (which products autocast keeps float32: test_product_choice) */
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);
    assignments_recast();
    no_grad_cast_not_reused();
    step_leaves_modes_as_found();
    return lz_test_done();
}
