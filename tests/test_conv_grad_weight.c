/* conv2d's weight gradient against a direct sum, for the shapes that take
 * each of the CPU kernel's paths: per-image products summed by the team,
 * one image at a time, and the gathered [K, N*P] product that deep layers
 * on small images (few output pixels, many channels) take. Stride,
 * padding, dilation and groups included. Also max pooling's fast paths
 * (2x2, and 3x3 windows inside the input) and its edges against torch's
 * rules: ties go to the first maximum, NaN wins (the last one takes the
 * gradient), and rows or columns no window covers get 0. */
#include <math.h>
#include <stdlib.h>

#include "testlib.h"

typedef struct conv_case {
    const char *what;
    int64_t N, C, H, W, O, K;
    int stride, pad, dil, groups;
} conv_case;

static void check_case(const conv_case *c)
{
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C / c->groups, c->K, c->K};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(21, -1, 1, 4, xs), *w = lz_test_rand(22, -1, 1, 4, ws);
    lz_requires_grad(w, 1);
    lz_conv2d_opts o = {.stride = {c->stride, c->stride}, .padding = {c->pad, c->pad},
                        .dilation = {c->dil, c->dil}, .groups = c->groups};
    lz_tensor *y = lz_conv2d(x, w, NULL, o);
    CHECK(y != NULL);
    int64_t OH = y ? lz_dim(y, 2) : 0, OW = y ? lz_dim(y, 3) : 0;
    int64_t ys[4] = {c->N, c->O, OH, OW};
    lz_tensor *mix = lz_test_rand(23, -1, 1, 4, ys);
    CHECK(lz_backward(lz_sum(lz_mul(y, mix))) == 0);
    float *got = lz_test_read(lz_grad(w)), *xv = lz_test_read(x), *gv = lz_test_read(mix);
    CHECK(got && xv && gv);
    const int64_t Cg = c->C / c->groups, Og = c->O / c->groups, wn = c->O * Cg * c->K * c->K;
    float *ref = calloc((size_t)wn, sizeof *ref);
    for (int64_t o = 0; ref && got && xv && gv && o < c->O; o++)
        for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t kh = 0; kh < c->K; kh++)
                for (int64_t kw = 0; kw < c->K; kw++) {
                    double acc = 0;
                    int64_t cin = o / Og * Cg + ci;
                    for (int64_t n = 0; n < c->N; n++)
                        for (int64_t oh = 0; oh < OH; oh++)
                            for (int64_t ow = 0; ow < OW; ow++) {
                                int64_t ih = oh * c->stride - c->pad + kh * c->dil;
                                int64_t iw = ow * c->stride - c->pad + kw * c->dil;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                acc += (double)gv[((n * c->O + o) * OH + oh) * OW + ow] *
                                       xv[((n * c->C + cin) * c->H + ih) * c->W + iw];
                            }
                    ref[((o * Cg + ci) * c->K + kh) * c->K + kw] = (float)acc;
                }
    if (ref && got) {
        double e = lz_test_rel_err(got, ref, wn);
        printf("%-32s rel err %.2e\n", c->what, e);
        CHECK(e < 1e-5);
    }
    free(ref); free(got); free(xv); free(gv);
    lz_scope_end();
}

/* Max pooling against torch's rules on data full of ties and NaNs, for a
   window size, stride, padding and ceil mode: the 2x2 fast path, the 3x3
   path for windows inside the input, and the generic windows at edges. */
static void max_pool_rules(int k, int st, int pad, int ceil)
{
    enum { N = 2, C = 3, H = 9, W = 11, MAXO = 16 };
    const int OH = (H + 2 * pad - k + (ceil ? st - 1 : 0)) / st + 1;
    const int OW = (W + 2 * pad - k + (ceil ? st - 1 : 0)) / st + 1;
    float xv[N * C * H * W], gv[N * C * MAXO * MAXO];
    for (int i = 0; i < N * C * H * W; i++) xv[i] = (float)(i * 7 % 3);   /* many ties */
    xv[3] = NAN;
    xv[W + 3] = NAN;   /* two NaNs in one window: the later one takes the gradient */
    xv[4 * W + 5] = NAN;   /* one inside the input, away from every edge */
    for (int i = 0; i < N * C * OH * OW; i++) gv[i] = (float)(i + 1);
    lz_scope_begin();
    lz_tensor *x = lz_from_host(xv, LZ_F32, 4, (int64_t[]){N, C, H, W});
    lz_tensor *g = lz_from_host(gv, LZ_F32, 4, (int64_t[]){N, C, OH, OW});
    lz_requires_grad(x, 1);
    lz_tensor *y = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {k, k}, .stride = {st, st},
                                                     .padding = {pad, pad}, .ceil_mode = ceil});
    CHECK(y && lz_ndim(y) == 4 && lz_dim(y, 2) == OH && lz_dim(y, 3) == OW);
    CHECK(lz_backward(lz_sum(lz_mul(y, g))) == 0);
    float *yv = lz_test_read(y), *dx = lz_test_read(lz_grad(x));
    CHECK(yv && dx);
    float ref_dx[N * C * H * W] = {0};
    int bad_y = 0;
    for (int pl = 0; yv && pl < N * C; pl++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int best = -1, nan_at = -1;
                for (int ih = oh * st - pad; ih < oh * st - pad + k; ih++)
                    for (int iw = ow * st - pad; iw < ow * st - pad + k; iw++) {
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        int i = pl * H * W + ih * W + iw;
                        if (isnan(xv[i])) nan_at = i;
                        else if (best < 0 || xv[i] > xv[best]) best = i;
                    }
                int pick = nan_at >= 0 ? nan_at : best;
                float want = xv[pick], got = yv[(pl * OH + oh) * OW + ow];
                bad_y += isnan(want) ? !isnan(got) : got != want;
                ref_dx[pick] += gv[(pl * OH + oh) * OW + ow];
            }
    int bad_dx = 0;
    for (int i = 0; dx && i < N * C * H * W; i++) bad_dx += dx[i] != ref_dx[i];
    printf("max_pool k%d s%d p%d ceil %d: %d outputs, %d gradients wrong\n", k, st, pad, ceil,
           bad_y, bad_dx);
    CHECK_EQ_I(bad_y, 0);
    CHECK_EQ_I(bad_dx, 0);
    free(yv);
    free(dx);
    lz_scope_end();
}

int main(void)
{
    max_pool_rules(2, 2, 0, 0);
    max_pool_rules(3, 2, 1, 0);   /* ResNet's */
    max_pool_rules(3, 2, 0, 1);   /* SqueezeNet's */
    max_pool_rules(3, 1, 1, 0);
    max_pool_rules(3, 3, 0, 0);
    static const conv_case cases[] = {
        {"gathered 2x2 out", 3, 8, 4, 4, 64, 3, 2, 1, 1, 1},
        {"gathered 1x1 kernel", 4, 16, 2, 2, 32, 1, 1, 0, 1, 1},
        {"gathered groups", 2, 8, 3, 3, 64, 3, 1, 1, 1, 2},
        {"gathered dilated", 2, 4, 5, 5, 64, 3, 1, 2, 2, 1},
        {"per image, team", 4, 3, 12, 12, 8, 3, 1, 1, 1, 1},
        {"one image", 1, 4, 6, 6, 64, 3, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
    return lz_test_done();
}
