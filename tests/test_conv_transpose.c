/* lz_conv_transpose2d: values against the definition (every input pixel
 * scatters its kernel-weighted channels into the output, in float64),
 * gradients against finite differences, the refused arguments, and a
 * captured training step against the lazy one. torch's values are
 * python/tests' (test_bridge_conv_transpose). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

typedef struct tcase {
    int64_t x[4], w[4];
    lz_conv2d_opts o;
    int op[2], bias;
    const char *what;
} tcase;

static const tcase cases[] = {
    {{2, 3, 4, 5}, {3, 2, 3, 3}, {.stride = {1, 1}}, {0, 0}, 1, "stride 1"},
    {{2, 4, 3, 4}, {4, 3, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, {1, 1}, 1,
     "stride 2, padding 1, output padding 1"},
    {{1, 4, 3, 3}, {4, 1, 2, 3}, {.stride = {2, 3}, .padding = {0, 1}, .groups = 2}, {1, 0}, 0,
     "groups 2, stride 2 x 3, 2x3 kernel"},
    {{2, 2, 4, 4}, {2, 3, 3, 3}, {.stride = {1, 1}, .padding = {2, 1}, .dilation = {2, 2}}, {0, 0}, 1,
     "dilation 2"},
};

static int64_t numel4(const int64_t *s) { return s[0] * s[1] * s[2] * s[3]; }

/* out[n][g*Og+o][y][x] += in[n][g*Cg+c][i][j] w[g*Cg+c][o][ki][kj]
   at y = i*s - p + ki*d (and likewise x) */
static double *reference(const tcase *t, const float *x, const float *w, const float *b, int64_t *ys)
{
    const int s[2] = {t->o.stride[0] ? t->o.stride[0] : 1, t->o.stride[1] ? t->o.stride[1] : 1};
    const int d[2] = {t->o.dilation[0] ? t->o.dilation[0] : 1, t->o.dilation[1] ? t->o.dilation[1] : 1};
    const int G = t->o.groups ? t->o.groups : 1;
    const int64_t N = t->x[0], C = t->x[1], H = t->x[2], W = t->x[3];
    const int64_t Og = t->w[1], KH = t->w[2], KW = t->w[3], Cg = C / G, O = Og * G;
    ys[0] = N;
    ys[1] = O;
    ys[2] = (H - 1) * s[0] - 2 * t->o.padding[0] + d[0] * (KH - 1) + t->op[0] + 1;
    ys[3] = (W - 1) * s[1] - 2 * t->o.padding[1] + d[1] * (KW - 1) + t->op[1] + 1;
    double *y = calloc((size_t)numel4(ys), sizeof *y);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++)
                    for (int64_t o = 0; o < Og; o++)
                        for (int64_t ki = 0; ki < KH; ki++)
                            for (int64_t kj = 0; kj < KW; kj++) {
                                int64_t yy = i * s[0] - t->o.padding[0] + ki * d[0];
                                int64_t xx = j * s[1] - t->o.padding[1] + kj * d[1];
                                if (yy < 0 || yy >= ys[2] || xx < 0 || xx >= ys[3]) continue;
                                int64_t oc = (c / Cg) * Og + o;
                                y[((n * O + oc) * ys[2] + yy) * ys[3] + xx] +=
                                    (double)x[((n * C + c) * H + i) * W + j] *
                                    (double)w[((c * Og + o) * KH + ki) * KW + kj];
                            }
    if (b)
        for (int64_t i = 0; i < numel4(ys); i++) y[i] += b[(i / (ys[2] * ys[3])) % O];
    return y;
}

static void values(const tcase *t)
{
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(1, -1, 1, 4, t->x), *w = lz_test_rand(2, -1, 1, 4, t->w);
    const int64_t O = t->w[1] * (t->o.groups ? t->o.groups : 1);
    lz_tensor *b = t->bias ? lz_test_rand(3, -1, 1, 1, &O) : NULL;
    lz_tensor *y = lz_conv_transpose2d(x, w, b, t->o, t->op);
    CHECK(y != NULL);
    float *xh = lz_test_read(x), *wh = lz_test_read(w), *bh = b ? lz_test_read(b) : NULL;
    float *yh = y ? lz_test_read(y) : NULL;
    int64_t ys[4];
    double *want = reference(t, xh, wh, bh, ys);
    for (int k = 0; y && k < 4; k++) CHECK_EQ_I(lz_dim(y, k), ys[k]);
    double err = 0;
    for (int64_t i = 0; yh && i < numel4(ys); i++) err = fmax(err, fabs(yh[i] - want[i]));
    printf("%-42s output [%lld, %lld, %lld, %lld], max error %.2e\n", t->what, (long long)ys[0],
           (long long)ys[1], (long long)ys[2], (long long)ys[3], err);
    CHECK(yh && err < 1e-5);
    free(xh);
    free(wh);
    free(bh);
    free(yh);
    free(want);
    lz_scope_end();
}

static lz_tensor *f_transpose(void *ctx, lz_tensor *const *in)
{
    const tcase *t = ctx;
    return lz_conv_transpose2d(in[0], in[1], t->bias ? in[2] : NULL, t->o, t->op);
}

static void grads(const tcase *t)
{
    const int64_t O = t->w[1] * (t->o.groups ? t->o.groups : 1);
    lz_tensor *in[3] = {lz_test_rand(4, -1, 1, 4, t->x), lz_test_rand(5, -0.5f, 0.5f, 4, t->w),
                        lz_test_rand(6, -0.5f, 0.5f, 1, &O)};
    for (int i = 0; i < 3; i++) lz_requires_grad(in[i], 1);
    double e = lz_test_gradcheck(f_transpose, (void *)t, t->bias ? 3 : 2, in);
    printf("%-42s gradient rel err %.2e\n", t->what, e);
    CHECK(e < 1e-2);
    for (int i = 0; i < 3; i++) lz_free(in[i]);
}

static void refused(void)
{
    const int64_t xs[4] = {1, 4, 3, 3}, ws[4] = {4, 2, 3, 3}, bad_w[4] = {3, 2, 3, 3};
    lz_tensor *x = lz_test_rand(7, -1, 1, 4, xs), *w = lz_test_rand(8, -1, 1, 4, ws);
    lz_tensor *w3 = lz_test_rand(9, -1, 1, 4, bad_w);
    const int big[2] = {2, 0};
    CHECK(lz_conv_transpose2d(x, w, NULL, (lz_conv2d_opts){.stride = {2, 2}}, big) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "output padding must be below the stride"));
    lz_clear_error();
    CHECK(lz_conv_transpose2d(x, w3, NULL, (lz_conv2d_opts){0}, NULL) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "the weight's first axis must be the input's 4 channels"));
    lz_clear_error();
    CHECK(lz_conv_transpose2d(x, w, NULL, (lz_conv2d_opts){.padding = {3, 3}}, NULL) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "empty output"));
    lz_clear_error();
    lz_free(x);
    lz_free(w);
    lz_free(w3);
}

/* Under autocast (every product bf16, set in main): bf16 operands, float32
   results within bf16's rounding of the float32 op's, gradients too. */
static void autocast(void)
{
    const tcase *t = &cases[1];
    float *got[2][2];
    for (int ac = 0; ac < 2; ac++) {
        lz_scope_begin();
        lz_tensor *x = lz_test_rand(12, -1, 1, 4, t->x), *w = lz_test_rand(13, -1, 1, 4, t->w);
        lz_requires_grad(w, 1);
        if (ac) CHECK(lz_autocast_begin(LZ_BF16) == 0);
        lz_tensor *y = lz_conv_transpose2d(x, w, NULL, t->o, t->op);
        if (ac) CHECK(lz_autocast_end() == 0);
        CHECK(y && lz_tensor_dtype(y) == LZ_F32);
        CHECK(y && lz_backward(lz_mean(lz_mul(y, y))) == 0);
        got[ac][0] = y ? lz_test_read(y) : NULL;
        got[ac][1] = lz_grad(w) ? lz_test_read(lz_grad(w)) : NULL;
        CHECK(got[ac][0] && got[ac][1]);
        lz_scope_end();
    }
    const int64_t ny = 2 * 3 * 6 * 8, nw = numel4(t->w);
    double ey = got[0][0] && got[1][0] ? lz_test_rel_err(got[1][0], got[0][0], ny) : 1;
    double ew = got[0][1] && got[1][1] ? lz_test_rel_err(got[1][1], got[0][1], nw) : 1;
    printf("autocast: output rel err %.2e, weight gradient %.2e (bf16 rounding)\n", ey, ew);
    CHECK(ey > 0 && ey < 2e-2 && ew > 0 && ew < 2e-2);   /* rounded, and only by bf16 */
    for (int i = 0; i < 4; i++) free(got[i / 2][i % 2]);
}

/* A decoder's step: conv_transpose2d, relu, mean of squares, SGD on w. */
typedef struct step_ctx { lz_tensor *w; lz_sgd *opt; } step_ctx;

static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    step_ctx *c = ctx;
    lz_sgd_zero_grad(c->opt);
    lz_conv2d_opts o = {.stride = {2, 2}, .padding = {1, 1}};
    const int op[2] = {1, 1};
    lz_tensor *y = lz_relu(lz_conv_transpose2d(in[0], c->w, NULL, o, op));
    lz_tensor *loss = lz_mean(lz_mul(y, y));
    if (!loss || lz_backward(loss) || lz_sgd_step(c->opt)) return -1;
    out[0] = loss;
    return 0;
}

static void captured_matches_lazy(void)
{
    const int64_t xs[4] = {2, 4, 5, 5}, ws[4] = {4, 3, 3, 3};
    float last[2][4];
    for (int mode = 0; mode < 2; mode++) {
        step_ctx c = {lz_test_rand(10, -0.5f, 0.5f, 4, ws), NULL};
        lz_requires_grad(c.w, 1);
        c.opt = lz_sgd_new(&c.w, 1, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
        lz_tensor *x = lz_test_rand(11, -1, 1, 4, xs);
        lz_fn *f = mode ? lz_capture(train_step, &c, 1, 1) : NULL;
        const int64_t replays0 = lz_metrics_get().capture_replays;
        for (int s = 0; s < 4; s++) {
            lz_tensor *in[1] = {x}, *out[1] = {NULL};
            lz_scope_begin();
            CHECK_EQ_I(mode ? lz_call(f, in, out) : train_step(&c, in, out), 0);
            last[mode][s] = out[0] ? lz_item(out[0]) : NAN;
            if (!mode) lz_scope_end();
            else {
                lz_free(out[0]);
                lz_scope_end();
            }
        }
        if (f) {
            CHECK_EQ_I(lz_metrics_get().capture_replays - replays0, 2);   /* warm-up (makes the momentum), trace, 2 replays */
            lz_fn_free(f);
        }
        lz_sgd_free(c.opt);
        lz_free(c.w);
        lz_free(x);
    }
    for (int s = 0; s < 4; s++) CHECK_NEAR(last[1][s], last[0][s], 1e-6 * fabs(last[0][s]) + 1e-7);
    CHECK(last[0][3] < last[0][0]);   /* it trains */
}

int main(void)
{
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);   /* every product bf16, whatever this CPU measured */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) values(&cases[i]);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) grads(&cases[i]);
    refused();
    autocast();
    captured_matches_lazy();
    return lz_test_done();
}
