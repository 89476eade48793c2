/* Autograd differentiates the forward that ran: a saved value is the one
 * the op saw when it was recorded, whatever happens to the tensor later;
 * a backward through a graph already freed, or through a value overwritten
 * since, fails and says so. Expected numbers are PyTorch 1.13's. */
#include <math.h>
#include <string.h>

#include "testlib.h"

static const int64_t s2[] = {2};

static lz_tensor *vec2(float a, float b, int grad)
{
    const float v[2] = {a, b};
    lz_tensor *t = lz_from_host(v, LZ_F32, 1, s2);
    if (grad) lz_requires_grad(t, 1);
    return t;
}

static void check2(const char *what, lz_tensor *t, float a, float b)
{
    float v[2] = {NAN, NAN};
    CHECK(t && lz_to_host(t, v, sizeof v) == 0);
    if (v[0] != a || v[1] != b)
        fprintf(stderr, "%s: got %.9g %.9g, want %.9g %.9g\n", what, v[0], v[1], a, b);
    CHECK(v[0] == a && v[1] == b);
}

static int error_has(const char *s)
{
    const char *e = lz_last_error();
    if (!e || !strstr(e, s)) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", e ? e : "(none)", s);
    return e && strstr(e, s);
}

/* case 8: loss = sum(W*x); W changed under no-grad; backward */
static void weight_changed_after_forward(void)
{
    lz_tensor *W = vec2(3, 4, 1), *x = vec2(1, 2, 1);
    lz_tensor *loss = lz_sum(lz_mul(W, x));
    lz_no_grad_begin();
    lz_tensor *ten = lz_scalar(10.0f);
    CHECK(lz_assign(W, lz_mul(W, ten)) == 0);   /* W = 30 40, as an optimizer step would */
    lz_no_grad_end();
    CHECK(lz_backward(loss) == 0);
    check2("x.grad after W changed", lz_grad(x), 3, 4);
    check2("W.grad after W changed", lz_grad(W), 1, 2);
    check2("W's new value", W, 30, 40);
    lz_free(W); lz_free(x); lz_free(ten);
}

/* case 8 with an optimizer: the step's update does not leak into the
   gradient of a loss recorded before it */
static void sgd_step_between(void)
{
    lz_tensor *W = vec2(3, 4, 1), *x = vec2(1, 2, 1);
    lz_sgd *opt = lz_sgd_new(&W, 1, (lz_sgd_opts){.lr = 0.5f});
    CHECK(lz_backward(lz_sum(lz_mul(W, x))) == 0);   /* W.grad = 1 2 */
    lz_tensor *loss = lz_sum(lz_mul(W, x));
    lz_zero_grad(x);
    CHECK(lz_sgd_step(opt) == 0);                     /* W = 2.5 3 */
    /* the update runs before the backward: it may not write the new W
       over the buffer the record saved (donation) */
    lz_mark_step();
    CHECK(lz_backward(loss) == 0);
    check2("x.grad after an SGD step", lz_grad(x), 3, 4);
    check2("W after the step", W, 2.5f, 3);
    lz_sgd_free(opt);
    lz_free(W); lz_free(x);
}

/* case 8: new data copied into an input after the forward */
static void input_copied_after_forward(void)
{
    lz_tensor *W = vec2(3, 4, 1), *x = vec2(1, 2, 0);
    lz_tensor *loss = lz_sum(lz_mul(W, x));
    const float big[2] = {30, 40};
    CHECK(lz_copy_from_host(x, big, sizeof big) == 0);
    CHECK(lz_backward(loss) == 0);
    check2("W.grad after x was copied over", lz_grad(W), 1, 2);
    lz_free(W); lz_free(x);
}

/* case 8: tanh's saved output overwritten; its rule uses the old one */
static void output_overwritten_after_forward(void)
{
    lz_tensor *x = vec2(0.5f, -1.0f, 1);
    lz_tensor *y = lz_tanh(x);
    lz_tensor *loss = lz_sum(y);
    const float junk[2] = {7, 8};
    CHECK(lz_copy_from_host(y, junk, sizeof junk) == 0);
    CHECK(lz_backward(loss) == 0);
    /* torch: 1 - tanh(x)^2 */
    float g[2];
    CHECK(lz_to_host(lz_grad(x), g, sizeof g) == 0);
    CHECK_NEAR(g[0], 0.78644773, 1e-6);
    CHECK_NEAR(g[1], 0.41997434, 1e-6);
    lz_free(x); lz_free(y);
}

/* an overwritten tensor used afterwards: its new value's gradient is
   unknown, so the backward refuses (torch: "modified by an inplace
   operation") instead of sending the gradient through the old op */
static void overwritten_then_used(void)
{
    lz_tensor *x = vec2(0.5f, -1.0f, 1), *V = vec2(2, 3, 1);
    lz_tensor *y = lz_tanh(x);
    lz_no_grad_begin();
    lz_tensor *z = vec2(5, 6, 0);
    CHECK(lz_assign(y, z) == 0);
    lz_no_grad_end();
    CHECK(lz_backward(lz_sum(lz_mul(y, V))) == -1);
    CHECK(error_has("lz_tanh was overwritten"));
    CHECK(lz_grad(V) == NULL && lz_grad(x) == NULL);   /* nothing half-done */
    CHECK(lz_backward(lz_sum(y)) == -1);
    CHECK(error_has("overwritten"));
    lz_free(x); lz_free(V); lz_free(y); lz_free(z);
}

/* case 9: a second backward through a freed graph is an error that says so */
static void second_backward(void)
{
    lz_tensor *x = vec2(0.5f, -1.0f, 1), *V = vec2(2, 3, 1);
    lz_tensor *y = lz_tanh(x);
    lz_tensor *loss = lz_sum(y);
    CHECK(lz_backward(loss) == 0);
    CHECK(lz_backward(loss) == -1);
    CHECK(error_has("already freed by an earlier lz_backward"));
    /* a path through the freed graph, beside a live one */
    CHECK(lz_backward(lz_sum(lz_mul(y, V))) == -1);
    CHECK(error_has("the graph through lz_tanh was already freed"));
    CHECK(lz_grad(V) == NULL);
    /* only through the freed graph: not "does not depend on ..." */
    lz_tensor *two = lz_scalar(2.0f);
    CHECK(lz_backward(lz_sum(lz_mul(y, two))) == -1);
    CHECK(error_has("already freed"));
    /* a fresh forward backs up again */
    lz_zero_grad(x);
    CHECK(lz_backward(lz_sum(lz_tanh(x))) == 0);
    CHECK(lz_grad(x) != NULL);
    lz_free(x); lz_free(V); lz_free(y); lz_free(two);
}

/* case 10: pow's gradient at 0 as torch computes it */
static void pow_at_zero(void)
{
    lz_tensor *x = vec2(0.0f, 2.0f, 1);
    CHECK(lz_backward(lz_sum(lz_pow(x, 0.0f))) == 0);
    check2("d pow(x, 0)", lz_grad(x), 0, 0);
    lz_tensor *z = vec2(-0.0f, 0.0f, 1);
    CHECK(lz_backward(lz_sum(lz_pow(z, 0.5f))) == 0);
    check2("d pow(+-0, 0.5)", lz_grad(z), -INFINITY, INFINITY);
    lz_tensor *w = vec2(2.0f, 4.0f, 1);
    CHECK(lz_backward(lz_sum(lz_pow(w, 0.5f))) == 0);
    float g[2];
    CHECK(lz_to_host(lz_grad(w), g, sizeof g) == 0);
    CHECK(g[0] == 0.353553385f && g[1] == 0.25f);   /* torch: 0.3536, 0.2500 */
    /* the forward at -0.0 as torch: pow(-0.0, -0.5) = -inf, pow(-0.0, -2) = +inf */
    lz_tensor *m = vec2(-0.0f, 4.0f, 0);
    check2("pow(-0, -0.5), pow(4, -0.5)", lz_pow(m, -0.5f), -INFINITY, 0.5f);
    check2("pow(-0, -2), pow(4, -2)", lz_pow(m, -2.0f), INFINITY, 0.0625f);
    lz_free(x); lz_free(z); lz_free(w); lz_free(m);
}

/* case 11: int32 sums are int64, as in torch */
static void int32_sum_widens(void)
{
    const int32_t v[2] = {2000000000, 2000000000};
    lz_tensor *t = lz_from_host(v, LZ_I32, 1, s2);
    lz_tensor *s = lz_sum(t);
    int64_t got = 0;
    CHECK(s && lz_tensor_dtype(s) == LZ_I64 && lz_to_host(s, &got, sizeof got) == 0);
    CHECK_EQ_I(got, 4000000000LL);
    const int axis = 0;
    lz_tensor *sa = lz_sum_axes(t, 1, &axis, 1);
    CHECK(sa && lz_tensor_dtype(sa) == LZ_I64 && lz_to_host(sa, &got, sizeof got) == 0);
    CHECK_EQ_I(got, 4000000000LL);
    lz_free(t); lz_free(s); lz_free(sa);
}

/* A captured forward over a parameter that requires grad: the output value
   its record saves does not count as state the trace left pending, so the
   step still replays. (With two ops the first's output, held for the
   second's backward, is such state, as it was before values were saved.) */
static lz_tensor *cap_w;
static int forward_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_mul(cap_w, in[0]);
    return out[0] ? 0 : -1;
}

static void captured_forward_replays(void)
{
    cap_w = vec2(3, 4, 1);
    lz_fn *f = lz_capture(forward_step, NULL, 1, 1);
    lz_metrics_reset();
    for (int i = 0; i < 4; i++) {
        lz_tensor *x = vec2(0.25f * (float)i, 0.5f, 0), *out[1] = {NULL};
        CHECK(lz_call(f, &x, out) == 0);
        float v[2];
        CHECK(lz_to_host(out[0], v, sizeof v) == 0);
        CHECK(v[1] == 2.0f);
        lz_free(out[0]);
        lz_free(x);
    }
    CHECK(lz_metrics_get().capture_replays >= 2);
    lz_fn_free(f);
    lz_free(cap_w);
}

int main(void)
{
    for (int eager = 0; eager < 2; eager++) {
        lz_set_eager(eager);
        lz_scope_begin();
        weight_changed_after_forward();
        sgd_step_between();
        input_copied_after_forward();
        output_overwritten_after_forward();
        overwritten_then_used();
        second_backward();
        pow_at_zero();
        int32_sum_widens();
        lz_scope_end();
        if (!eager) captured_forward_replays();
    }
    lz_shutdown();
    return lz_test_done();
}
