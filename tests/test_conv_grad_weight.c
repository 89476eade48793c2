/* conv2d's weight gradient against a direct sum, for the shapes that take
 * each of the CPU kernel's paths: per-image products summed by the team,
 * one image at a time, and the gathered [K, N*P] product that deep layers
 * on small images (few output pixels, many channels) take. Stride,
 * padding, dilation and groups included. Also the 2x2 max pool fast path
 * against torch's rules: ties go to the first maximum, NaN wins (the last
 * one takes the gradient), and rows or columns no window covers get 0. */
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

static void max_pool_2x2(void)
{
    enum { N = 2, C = 3, H = 5, W = 7, OH = 2, OW = 3 };
    float xv[N * C * H * W], gv[N * C * OH * OW];
    for (int i = 0; i < N * C * H * W; i++) xv[i] = (float)(i * 7 % 3);   /* many ties */
    xv[3] = NAN;
    xv[W + 3] = NAN;   /* two NaNs in one window: the later one takes the gradient */
    for (int i = 0; i < N * C * OH * OW; i++) gv[i] = (float)(i + 1);
    lz_scope_begin();
    lz_tensor *x = lz_from_host(xv, LZ_F32, 4, (int64_t[]){N, C, H, W});
    lz_tensor *g = lz_from_host(gv, LZ_F32, 4, (int64_t[]){N, C, OH, OW});
    lz_requires_grad(x, 1);
    lz_tensor *y = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {2, 2}});
    CHECK(lz_backward(lz_sum(lz_mul(y, g))) == 0);
    float *yv = lz_test_read(y), *dx = lz_test_read(lz_grad(x));
    CHECK(yv && dx);
    float ref_dx[N * C * H * W] = {0};
    int bad_y = 0;
    for (int pl = 0; yv && pl < N * C; pl++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int best = -1, nan_at = -1;
                for (int k = 0; k < 4; k++) {
                    int i = pl * H * W + (2 * oh + k / 2) * W + 2 * ow + k % 2;
                    if (isnan(xv[i])) nan_at = i;
                    else if (best < 0 || xv[i] > xv[best]) best = i;
                }
                int pick = nan_at >= 0 ? nan_at : best;
                float want = xv[pick], got = yv[(pl * OH + oh) * OW + ow];
                bad_y += isnan(want) ? !isnan(got) : got != want;
                ref_dx[pick] += gv[(pl * OH + oh) * OW + ow];
            }
    CHECK_EQ_I(bad_y, 0);
    int bad_dx = 0;
    for (int i = 0; dx && i < N * C * H * W; i++) bad_dx += dx[i] != ref_dx[i];
    CHECK_EQ_I(bad_dx, 0);
    free(yv);
    free(dx);
    lz_scope_end();
}

int main(void)
{
    max_pool_2x2();
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
