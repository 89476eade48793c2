/* Ownership is the same whichever way a step runs: called directly, traced
 * by lz_call or replayed, the caller gets the same handles, scopes drop
 * the same ones, and lz_keep inside the step lands in the same scope. Also:
 * lz_retain gives a distinct handle the caller owns, in or out of a scope
 * (lz_free(lz_retain(t)) in a scope leaves t to the scope), and lz_call
 * reports the error of an op the step did not check. */
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/tensor.h"

/* t is still allocated (compares pointers only: never reads a freed one) */
static int alive(const lz_tensor *t)
{
    for (lz_tensor *u = lz_all_first(); u; u = u->all_next)
        if (u == t) return 1;
    return 0;
}

static lz_tensor *vec2(float a, float b)
{
    return lz_from_host((float[]){a, b}, LZ_F32, 1, (int64_t[]){2});
}

/* The three ways: 0 direct, then lz_call (the first call traces, the
   following ones replay). */
typedef struct way { lz_fn *f; lz_step_fn fn; void *ctx; } way;

static int call(way *w, int direct, lz_tensor *const *in, lz_tensor **out)
{
    if (direct) {
        int rc = w->fn(w->ctx, in, out);
        lz_mark_step();
        return rc;
    }
    return lz_call(w->f, in, out);
}

/* ---- a step returning its input --------------------------------------- */

static int identity(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = in[0];
    return 0;
}

static void test_returned_input(void)
{
    way w = {lz_capture(identity, NULL, 1, 1), identity, NULL};
    lz_tensor *x = vec2(1, 2);
    int refs = x->refs;
    for (int i = 0; i < 4; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(call(&w, i == 0, &x, out), 0);
        CHECK(out[0] == x);              /* the same handle, no new reference */
        CHECK_EQ_I(x->refs - x->capture_refs, refs);
    }
    CHECK(lz_metrics_get().capture_replays >= 2);
    lz_fn_free(w.f);
    lz_free(x);                          /* once: the caller held one handle */
    CHECK(!alive(x));
}

/* ---- a step returning lz_retain(w) after updating w ------------------- */

static int bump_and_return(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lz_tensor **w = ctx;
    if (lz_assign(*w, lz_add(*w, in[0]))) return -1;
    out[0] = lz_retain(*w);
    return 0;
}

static void test_returned_retain(void)
{
    lz_tensor *w = vec2(0, 0), *one = vec2(1, 1);
    way wy = {lz_capture(bump_and_return, &w, 1, 1), bump_and_return, &w};
    int refs = w->refs;
    for (int i = 0; i < 5; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(call(&wy, i == 0, &one, out), 0);
        /* a distinct handle on the live tensor, with the step's reference */
        CHECK(out[0] != w && lz_tensor_of(out[0]) == w);
        CHECK_EQ_I(w->refs - w->capture_refs, refs + 1);   /* captures hold it too */
        float v[2];
        CHECK_EQ_I(lz_to_host(out[0], v, sizeof v), 0);
        CHECK(v[0] == (float)(i + 1) && v[1] == (float)(i + 1));
        lz_free(out[0]);
        CHECK_EQ_I(w->refs - w->capture_refs, refs);
    }
    lz_fn_free(wy.f);
    lz_free(one);
    lz_free(w);
    CHECK(!alive(w));
}

/* ---- lz_keep inside the step, lz_call wrapped in a scope -------------- */

/* the README's step body: the loss is kept, the temporaries are not */
static int keep_loss(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_tensor *h = lz_mul(in[0], in[0]);
    out[0] = lz_keep(lz_sum(h));
    return out[0] ? 0 : -1;
}

static int plain_loss(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_sum(lz_mul(in[0], in[0]));
    return out[0] ? 0 : -1;
}

static void test_scopes(void)
{
    way kept = {lz_capture(keep_loss, NULL, 1, 1), keep_loss, NULL};
    way plain = {lz_capture(plain_loss, NULL, 1, 1), plain_loss, NULL};
    lz_tensor *x = vec2(3, 4);
    for (int i = 0; i < 4; i++) {
        lz_tensor *out[1] = {NULL};
        lz_scope_begin();
        CHECK_EQ_I(call(&kept, i == 0, &x, out), 0);
        lz_scope_end();
        CHECK(alive(out[0]));            /* kept by the step: it outlives the caller's scope */
        if (alive(out[0])) {
            CHECK(lz_item(out[0]) == 25.0f);
            CHECK_EQ_I(out[0]->refs, 1);
            lz_free(out[0]);
        }

        lz_scope_begin();
        CHECK_EQ_I(call(&plain, i == 0, &x, out), 0);
        CHECK(lz_item(out[0]) == 25.0f);
        lz_tensor *was = out[0];
        lz_scope_end();
        CHECK(!alive(was));              /* not kept: the caller's scope owned it */
    }
    /* nested: kept inside two scopes lands in the outer one */
    lz_tensor *out[1] = {NULL};
    lz_scope_begin();
    lz_scope_begin();
    CHECK_EQ_I(lz_call(kept.f, &x, out), 0);
    lz_scope_end();
    CHECK(alive(out[0]));
    lz_tensor *was = out[0];
    lz_scope_end();
    CHECK(!alive(was));
    lz_fn_free(kept.f);
    lz_fn_free(plain.f);
    lz_free(x);
}

/* ---- lz_retain in a scope --------------------------------------------- */

static void test_retain_in_scope(void)
{
    lz_scope_begin();
    lz_tensor *t = lz_scalar(1.0f);
    lz_tensor *r = lz_retain(t);
    CHECK(r && r != t);                  /* a handle of its own */
    lz_free(r);                          /* the fuzzer's leak */
    lz_scope_end();
    CHECK(!alive(t));

    /* the creation handle freed inside the scope, the retained one used
       past it with no lz_keep: the caller owns it */
    lz_scope_begin();
    t = lz_scalar(2.0f);
    r = lz_retain(t);
    lz_free(t);
    lz_scope_end();
    CHECK(alive(t));
    if (alive(t)) {
        CHECK(lz_item(r) == 2.0f);
        lz_free(r);
    }
    CHECK(!alive(t));

    /* shared state: an assign through either handle is seen by both, and
       the gradient and requires-grad are the tensor's */
    lz_tensor *w = vec2(1, 2);
    lz_requires_grad(w, 1);
    lz_tensor *rw = lz_retain(w);
    CHECK(rw != w);
    lz_tensor *sq = lz_mul(rw, rw), *loss = lz_sum(sq);
    CHECK_EQ_I(lz_backward(loss), 0);
    CHECK(lz_grad(rw) != NULL && lz_grad(rw) == lz_grad(w));
    float g[2] = {0, 0}, v[2] = {0, 0};
    CHECK_EQ_I(lz_to_host(lz_grad(w), g, sizeof g), 0);
    CHECK(g[0] == 2.0f && g[1] == 4.0f);
    lz_tensor *three = vec2(3, 3);
    CHECK_EQ_I(lz_assign(rw, three), 0);
    CHECK_EQ_I(lz_to_host(w, v, sizeof v), 0);
    CHECK(v[0] == 3.0f && v[1] == 3.0f);
    lz_zero_grad(rw);
    CHECK(lz_grad(w) == NULL);
    lz_free(w);                          /* the tensor lives on in rw */
    CHECK_EQ_I(lz_to_host(rw, v, sizeof v), 0);
    CHECK(v[0] == 3.0f);
    lz_free(rw);
    CHECK(!alive(w));
    lz_free(three);
    lz_free(sq);
    lz_free(loss);
}

/* ---- the step's own error --------------------------------------------- */

static int bad_matmul(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_matmul(in[0], in[0]);    /* [2] x [2] is fine; [2,3] x [2,3] is not */
    return 0;                            /* the error is not checked */
}

static void test_step_error(void)
{
    lz_fn *f = lz_capture(bad_matmul, NULL, 1, 1);
    lz_tensor *x = lz_from_host((float[6]){0}, LZ_F32, 2, (int64_t[]){2, 3});
    lz_tensor *out[1] = {NULL};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_I(lz_call(f, &x, out), -1);
        CHECK(out[0] == NULL);
        const char *e = lz_last_error();
        CHECK(e && strstr(e, "lz_matmul") && strstr(e, "left output 0 NULL"));
        if (e && i == 0) printf("step error: %s\n", e);
    }
    lz_fn_free(f);
    lz_free(x);
}

int main(void)
{
    test_returned_input();
    test_returned_retain();
    test_scopes();
    test_retain_in_scope();
    test_step_error();
    lz_shutdown();
    return lz_test_done();
}
