/* CPU kernels for 2-d convolution (NCHW) and its two gradients.
 *
 * The general case is im2col per image and group followed by one
 * dnnl_sgemm (row-major): out[Og, P] = w[Og, K] @ col[K, P], with
 * K = Cg*KH*KW and P = OH*OW. The gradients reuse the same column layout:
 * grad input is col2im of w^T @ g, grad weight is g @ col^T summed over the
 * batch. A 1x1, stride-1, unpadded convolution needs no columns at all: the
 * image itself is the column matrix.
 *
 * Threading: when the (image, group) items split evenly over the OpenMP
 * team, each thread takes whole items with its own column buffer and a
 * single-threaded sgemm (oneDNN runs sgemm on the calling thread alone
 * inside a parallel region), so im2col/col2im run in parallel too: on a
 * resnet-like layer that was faster than one threaded sgemm per item in
 * all three directions (docs/performance.md, "Convolution measurements").
 * With one item (a single image, one group) sgemm takes the whole team
 * instead.
 *
 * Depthwise convolution (one input channel per group) runs as a direct
 * loop: its column matrix would have KH*KW rows and turn each product into
 * a matrix-vector one, all memory traffic and no reuse. */
#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/k_pool.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/scratch.h"

#define PAR_MIN 32768   /* below this much work a parallel region costs more than it saves */

typedef struct geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int64_t sh, sw, ph, pw, dh, dw, G;
    int64_t Cg, Og, K, P;   /* per-group channels, K = Cg*KH*KW, P = OH*OW */
    int direct_1x1;         /* the image is its own column matrix */
} geom;

static geom make_geom(const lz_value *x, const lz_value *w, const lz_value *y, const lz_instr *s)
{
    geom g;
    g.N = x->shape[0]; g.C = x->shape[1]; g.H = x->shape[2]; g.W = x->shape[3];
    g.O = w->shape[0]; g.KH = w->shape[2]; g.KW = w->shape[3];
    g.OH = y->shape[2]; g.OW = y->shape[3];
    g.sh = s->iattr[0]; g.sw = s->iattr[1]; g.ph = s->iattr[2]; g.pw = s->iattr[3];
    g.dh = s->iattr[4]; g.dw = s->iattr[5]; g.G = s->iattr[6];
    g.Cg = g.C / g.G; g.Og = g.O / g.G;
    g.K = g.Cg * g.KH * g.KW; g.P = g.OH * g.OW;
    g.direct_1x1 = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    return g;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

/* The outputs ow in [*lo, *hi) whose input column ow*sw + off lies in [0, W). */
static void valid_cols(const geom *g, int64_t off, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : ceil_div(-off, g->sw);
    int64_t b = ceil_div(g->W - off, g->sw);
    if (b > g->OW) b = g->OW;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* Row r = (c*KH + kh)*KW + kw of one image's column matrix, as im2col
   writes it. */
static void gather_col_row(const geom *g, const float *x, int64_t r, float *dst_row)
{
    int64_t c = r / (g->KH * g->KW), kh = r / g->KW % g->KH, kw = r % g->KW;
    int64_t off = kw * g->dw - g->pw, lo, hi;
    valid_cols(g, off, &lo, &hi);
    for (int64_t oh = 0; oh < g->OH; oh++) {
        float *dst = dst_row + oh * g->OW;
        int64_t ih = oh * g->sh - g->ph + kh * g->dh;
        if (ih < 0 || ih >= g->H) {
            memset(dst, 0, sizeof(float) * (size_t)g->OW);
            continue;
        }
        const float *src = x + (c * g->H + ih) * g->W + off;
        for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0;
        if (g->sw == 1)
            memcpy(dst + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
        else
            for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * g->sw];
        for (int64_t ow = hi; ow < g->OW; ow++) dst[ow] = 0;
    }
}

/* col[(c*KH + kh)*KW + kw][oh*OW + ow] = x[c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw] */
static void im2col(const geom *g, const float *x, float *col)
{
    for (int64_t r = 0; r < g->K; r++) gather_col_row(g, x, r, col + r * g->P);
}

/* The adjoint of im2col: x += every column entry at the input it came from
   (x must be zeroed first). Row r of the columns starts at col + r * ld. */
static void col2im(const geom *g, const float *col, int64_t ld, float *x)
{
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                const float *row = col + ((c * g->KH + kh) * g->KW + kw) * ld;
                int64_t off = kw * g->dw - g->pw, lo, hi;
                valid_cols(g, off, &lo, &hi);
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                    if (ih < 0 || ih >= g->H) continue;
                    const float *src = row + oh * g->OW;
                    float *dst = x + (c * g->H + ih) * g->W + off;
                    if (g->sw == 1)
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] += src[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow * g->sw] += src[ow];
                }
            }
}

/* ---- depthwise: direct loops -------------------------------------------- */

/* out_plane += conv of one input plane with one KHxKW filter. */
static void dw_forward_plane(const geom *g, const float *x, const float *k, float *out)
{
    for (int64_t kh = 0; kh < g->KH; kh++)
        for (int64_t kw = 0; kw < g->KW; kw++) {
            float wv = k[kh * g->KW + kw];
            int64_t off = kw * g->dw - g->pw, lo, hi;
            valid_cols(g, off, &lo, &hi);
            for (int64_t oh = 0; oh < g->OH; oh++) {
                int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                if (ih < 0 || ih >= g->H) continue;
                const float *src = x + ih * g->W + off;
                float *dst = out + oh * g->OW;
                if (g->sw == 1)
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow] += wv * src[ow];
                else
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow] += wv * src[ow * g->sw];
            }
        }
}

/* dx_plane += the adjoint of dw_forward_plane applied to one gradient plane. */
static void dw_grad_input_plane(const geom *g, const float *gy, const float *k, float *dx)
{
    for (int64_t kh = 0; kh < g->KH; kh++)
        for (int64_t kw = 0; kw < g->KW; kw++) {
            float wv = k[kh * g->KW + kw];
            int64_t off = kw * g->dw - g->pw, lo, hi;
            valid_cols(g, off, &lo, &hi);
            for (int64_t oh = 0; oh < g->OH; oh++) {
                int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                if (ih < 0 || ih >= g->H) continue;
                const float *src = gy + oh * g->OW;
                float *dst = dx + ih * g->W + off;
                if (g->sw == 1)
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow] += wv * src[ow];
                else
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow * g->sw] += wv * src[ow];
            }
        }
}

static void dw_forward(const geom *g, const float *x, const float *w, float *y)
{
    const int64_t KK = g->KH * g->KW, planes = g->N * g->O;
    memset(y, 0, sizeof(float) * (size_t)(planes * g->P));
    #pragma omp parallel for schedule(static) if (planes * g->P * KK > PAR_MIN)
    for (int64_t i = 0; i < planes; i++) {
        int64_t n = i / g->O, o = i % g->O, c = o / g->Og;
        dw_forward_plane(g, x + (n * g->C + c) * g->H * g->W, w + o * KK, y + i * g->P);
    }
}

static void dw_grad_input(const geom *g, const float *gy, const float *w, float *dx)
{
    const int64_t KK = g->KH * g->KW, planes = g->N * g->C;
    memset(dx, 0, sizeof(float) * (size_t)(planes * g->H * g->W));
    /* one task per input plane: the Og outputs that read it write nowhere else */
    #pragma omp parallel for schedule(static) if (g->N * g->O * g->P * KK > PAR_MIN)
    for (int64_t i = 0; i < planes; i++) {
        int64_t n = i / g->C, c = i % g->C;
        for (int64_t j = 0; j < g->Og; j++) {
            int64_t o = c * g->Og + j;
            dw_grad_input_plane(g, gy + (n * g->O + o) * g->P, w + o * KK, dx + i * g->H * g->W);
        }
    }
}

/* Where lane l of a depthwise block lies in image n of a value [N, C, H,
   W] with channel block B (0: plain; channels-last: B = C): element
   (n, c, q) at the returned offset; the pixels q of a channel are
   `*step` apart. */
static int64_t dw_lane(int64_t C, int64_t HW, int B, int64_t n, int64_t c, int64_t *step)
{
    if (!B) {
        *step = 1;
        return (n * C + c) * HW;
    }
    *step = B;
    return ((n * (C / B) + c / B) * HW) * B + c % B;
}

/* dw[o][kh][kw] = sum over images and output pixels of gy * x at the tap.
   Each tap's sum is a float sum along an output row (the pixels whose
   input is inside the image), added into a double row by row in (image,
   row) order. DW_LANES output channels go at once: a block's planes of an
   image are first copied channel-minor, so each multiply-add is one
   vector over the block's channels, and a tap's row sum stays in
   registers. Where both activations are blocked with the lanes side by
   side in a pixel (channels-last, nChw16c, nChw8c; one output a channel)
   the copy takes a pixel's lanes at once, else lane by lane (read in
   place instead, with a channels-last row's stride between pixels, the
   1152-channel step ran at half the speed). One channel at a time the
   loops would pay per row and tap, and a row of a deep layer's 4x4 plane
   is 4 pixels (docs/performance.md, "Depthwise weight gradients"). The sums and their order are the same in every layout, so
   are the bits. xb, gb: the blocks of x and gy (0: plain). */
#define DW_LANES 8
static const char *dw_grad_weight(const geom *g, const float *x, int xb, const float *gy, int gb,
                                  float *dw)
{
    const int64_t KK = g->KH * g->KW, HW = g->H * g->W, blocks = (g->O + DW_LANES - 1) / DW_LANES;
    const size_t floats = (size_t)((HW + g->P) * DW_LANES);
    const int lanes_together = g->Og == 1 && xb && xb == gb && xb % DW_LANES == 0;
    int oom = 0;
    #pragma omp parallel if (g->N * g->O * g->P * KK > PAR_MIN) reduction(|:oom)
    {
        /* acc (doubles) first, then the copies of x and gy */
        double *acc = lz_cpu_scratch(LZ_SCRATCH_PARTIALS,
                                     sizeof(double) * (size_t)(KK * DW_LANES) + sizeof(float) * floats);
        float *xt = acc ? (float *)(acc + KK * DW_LANES) : NULL;
        float *gt = acc ? xt + HW * DW_LANES : NULL;
        oom = !acc;
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t o0 = b * DW_LANES, L = g->O - o0 < DW_LANES ? g->O - o0 : DW_LANES;
            if (oom) continue;
            for (int64_t t = 0; t < KK * DW_LANES; t++) acc[t] = 0;
            for (int64_t n = 0; n < g->N; n++) {
                if (lanes_together && L == DW_LANES) {   /* a pixel's lanes at once */
                    int64_t xq, gq;
                    const float *xl = x + dw_lane(g->C, HW, xb, n, o0, &xq);
                    const float *gl = gy + dw_lane(g->O, g->P, gb, n, o0, &gq);
                    for (int64_t q = 0; q < HW; q++)
                        memcpy(xt + q * DW_LANES, xl + q * xq, sizeof(float) * DW_LANES);
                    for (int64_t q = 0; q < g->P; q++)
                        memcpy(gt + q * DW_LANES, gl + q * gq, sizeof(float) * DW_LANES);
                } else {
                    for (int64_t l = 0; l < DW_LANES; l++) {
                        const int64_t o = o0 + (l < L ? l : 0);
                        int64_t xq, gq;
                        const float *xl = x + dw_lane(g->C, HW, xb, n, o / g->Og, &xq);
                        const float *gl = gy + dw_lane(g->O, g->P, gb, n, o, &gq);
                        for (int64_t q = 0; q < HW; q++) xt[q * DW_LANES + l] = xl[q * xq];
                        for (int64_t q = 0; q < g->P; q++) gt[q * DW_LANES + l] = gl[q * gq];
                    }
                }
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    const float *grow = gt + oh * g->OW * DW_LANES;
                    for (int64_t kh = 0; kh < g->KH; kh++) {
                        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                        if (ih < 0 || ih >= g->H) continue;
                        const float *xrow = xt + ih * g->W * DW_LANES;
                        for (int64_t kw = 0; kw < g->KW; kw++) {
                            int64_t off = kw * g->dw - g->pw, lo, hi;
                            valid_cols(g, off, &lo, &hi);
                            float r[DW_LANES] = {0};
                            for (int64_t ow = lo; ow < hi; ow++) {
                                const float *gv = grow + ow * DW_LANES;
                                const float *xv = xrow + (ow * g->sw + off) * DW_LANES;
                                for (int l = 0; l < DW_LANES; l++) r[l] += gv[l] * xv[l];
                            }
                            double *a = acc + (kh * g->KW + kw) * DW_LANES;
                            for (int l = 0; l < DW_LANES; l++) a[l] += r[l];
                        }
                    }
                }
            }
            for (int64_t l = 0; l < L; l++)
                for (int64_t t = 0; t < KK; t++) dw[(o0 + l) * KK + t] = (float)acc[t * DW_LANES + l];
        }
    }
    return oom ? "lz_conv2d (grad weight): out of memory for a depthwise step's copies" : NULL;
}

/* ---- im2col + sgemm ------------------------------------------------------ */

/* The team takes whole items whenever there is one per thread: even an
   uneven split (3 or 5 images on 2 threads) measured no slower than
   threading each sgemm, whose own split of a product this size is poor. */
static int use_team(const geom *g)
{
    const int64_t items = g->N * g->G;
    return items > 1 && items >= omp_get_max_threads() &&
           (double)g->N * g->O * g->P * g->K > PAR_MIN;
}

static int forward_item(const geom *g, int64_t item, const float *x, const float *w,
                        float *y, float *col)
{
    int64_t n = item / g->G, gi = item % g->G;
    const float *xg = x + (n * g->C + gi * g->Cg) * g->H * g->W;
    const float *b = xg;
    if (!g->direct_1x1) {
        im2col(g, xg, col);
        b = col;
    }
    return dnnl_sgemm('N', 'N', g->Og, g->P, g->K, 1.0f, w + gi * g->Og * g->K, g->K, b, g->P,
                      0.0f, y + (n * g->O + gi * g->Og) * g->P, g->P) != dnnl_success;
}

static int grad_input_item(const geom *g, int64_t item, const float *gy, const float *w,
                           float *dx, float *col)
{
    int64_t n = item / g->G, gi = item % g->G;
    float *dxg = dx + (n * g->C + gi * g->Cg) * g->H * g->W;
    float *c = g->direct_1x1 ? dxg : col;
    if (dnnl_sgemm('T', 'N', g->K, g->P, g->Og, 1.0f, w + gi * g->Og * g->K, g->K,
                   gy + (n * g->O + gi * g->Og) * g->P, g->P, 0.0f, c, g->P) != dnnl_success)
        return 1;
    if (!g->direct_1x1) {
        memset(dxg, 0, sizeof(float) * (size_t)(g->Cg * g->H * g->W));
        col2im(g, col, g->P, dxg);
    }
    return 0;
}

/* dw[gi] = g[n, gi] @ col(x[n, gi])^T + beta * dw[gi]: beta 0 for the
   first image of a group, 1 to sum the others in. */
static int grad_weight_item(const geom *g, int64_t item, const float *x, const float *gy,
                            float *dw, float *col, float beta)
{
    int64_t n = item / g->G, gi = item % g->G;
    const float *xg = x + (n * g->C + gi * g->Cg) * g->H * g->W;
    const float *b = xg;
    if (!g->direct_1x1) {
        im2col(g, xg, col);
        b = col;
    }
    return dnnl_sgemm('N', 'T', g->Og, g->K, g->P, 1.0f, gy + (n * g->O + gi * g->Og) * g->P,
                      g->P, b, g->P, beta, dw + gi * g->Og * g->K, g->K) != dnnl_success;
}

static size_t col_bytes(const geom *g)
{
    return g->direct_1x1 ? 0 : sizeof(float) * (size_t)(g->K * g->P);
}

typedef int (*item_fn)(const geom *g, int64_t item, const float *a, const float *b,
                       float *out, float *col);

/* Runs fn over every (image, group) item, on the team or in turn. */
static const char *run_items(const geom *g, item_fn fn, const float *a, const float *b,
                             float *out, const char *what)
{
    const int64_t items = g->N * g->G;
    int failed = 0, oom = 0;
    if (use_team(g)) {
        #pragma omp parallel reduction(|:failed, oom)
        {
            float *col = col_bytes(g) ? lz_cpu_scratch(LZ_SCRATCH_COLUMNS, col_bytes(g)) : NULL;
            if (col_bytes(g) && !col) oom = 1;
            #pragma omp for schedule(static)
            for (int64_t i = 0; i < items; i++)
                if (!oom) failed |= fn(g, i, a, b, out, col);
        }
    } else {
        float *col = col_bytes(g) ? lz_cpu_scratch(LZ_SCRATCH_COLUMNS, col_bytes(g)) : NULL;
        if (col_bytes(g) && !col) return "lz_conv2d: out of memory for the column buffer";
        for (int64_t i = 0; i < items && !failed; i++) failed = fn(g, i, a, b, out, col);
    }
    if (oom) return "lz_conv2d: out of memory for the column buffer";
    return failed ? what : NULL;
}

/* Whether all images' columns fit side by side (and the step is not
   depthwise, which has its own loops). */
static int can_gather(const geom *g)
{
    return g->N > 1 && !(g->Cg == 1 && g->G > 1) &&
           (double)g->K * g->N * g->P + (double)g->O * g->N * g->P < (double)(64 << 20) / sizeof(float);
}

/* When the weight outweighs an image's columns (deep layers on small
   images: P = OH*OW of a few pixels), one product per image is a thin
   sgemm (N = P columns) that runs far from peak, and for the weight
   gradient private per-thread copies of dw cost more to clear and add up
   than the products themselves. Then every image's columns go side by side
   into one [K, N*P] matrix, the output or its gradient into one [Og, N*P],
   and a single threaded sgemm per group does the work (figures in
   docs/performance.md). */
static int use_gathered(const geom *g, lz_conv_path path)
{
    if (path != LZ_CONV_BY_RULE) return path == LZ_CONV_GATHERED && can_gather(g);
    return can_gather(g) && g->Og * g->K >= 2 * g->K * g->P;
}

/* col[K, N*P] of group gi: im2col writes rows of P; image n's go to
   columns [n*P, (n+1)*P). */
static void gather_cols(const geom *g, const float *x, int64_t gi, float *col)
{
    const int64_t NP = g->N * g->P;
    #pragma omp parallel for schedule(static) if ((double)g->K * NP > PAR_MIN)
    for (int64_t r = 0; r < g->K; r++)
        for (int64_t n = 0; n < g->N; n++) {
            const float *xg = x + (n * g->C + gi * g->Cg) * g->H * g->W;
            gather_col_row(g, xg, r, col + r * NP + n * g->P);
        }
}

/* Between [N, O, P] and group gi's [Og, N*P]: to_cat 1 gathers, 0 scatters. */
static void move_cat(const geom *g, int64_t gi, float *nop, float *cat, int to_cat)
{
    const int64_t NP = g->N * g->P;
    const size_t row = sizeof(float) * (size_t)g->P;
    #pragma omp parallel for schedule(static) if ((double)g->Og * NP > PAR_MIN)
    for (int64_t o = 0; o < g->Og; o++)
        for (int64_t n = 0; n < g->N; n++) {
            float *a = nop + (n * g->O + gi * g->Og + o) * g->P, *b = cat + o * NP + n * g->P;
            if (to_cat) memcpy(b, a, row);
            else memcpy(a, b, row);
        }
}

/* One direction of the convolution with every image's columns side by side
   ([K, N*P]) and the output or its gradient gathered into [Og, N*P] (cat):
   conv2d (x, w) -> y, grad input (gy, w) -> dx, grad weight (x, gy) -> dw.
   NULL, or what failed: sgemm_err, or the scratch. */
static const char *run_gathered(const geom *g, lz_op op, const float *a, const float *b,
                                float *out, const char *sgemm_err)
{
    const int64_t NP = g->N * g->P;
    float *col = lz_cpu_scratch(LZ_SCRATCH_COLUMNS, sizeof(float) * (size_t)(g->K * NP));
    float *cat = lz_cpu_scratch(LZ_SCRATCH_PARTIALS, sizeof(float) * (size_t)(g->Og * NP));
    if (!col || !cat) return "lz_conv2d: out of memory for the gathered columns";
    const float *w = op == LZ_OP_CONV2D_GRAD_WEIGHT ? NULL : b;
    const float *gy = op == LZ_OP_CONV2D ? NULL : op == LZ_OP_CONV2D_GRAD_INPUT ? a : b;
    for (int64_t gi = 0; gi < g->G; gi++) {
        const float *wg = w ? w + gi * g->Og * g->K : NULL;
        if (op != LZ_OP_CONV2D_GRAD_INPUT) gather_cols(g, a, gi, col);
        if (gy) move_cat(g, gi, (float *)gy, cat, 1);
        dnnl_status_t st =
            op == LZ_OP_CONV2D
                ? dnnl_sgemm('N', 'N', g->Og, NP, g->K, 1.0f, wg, g->K, col, NP, 0.0f, cat, NP)
            : op == LZ_OP_CONV2D_GRAD_INPUT
                ? dnnl_sgemm('T', 'N', g->K, NP, g->Og, 1.0f, wg, g->K, cat, NP, 0.0f, col, NP)
                : dnnl_sgemm('N', 'T', g->Og, g->K, NP, 1.0f, cat, NP, col, NP, 0.0f,
                             out + gi * g->Og * g->K, g->K);
        if (st != dnnl_success) return sgemm_err;
        if (op == LZ_OP_CONV2D) move_cat(g, gi, out, cat, 0);
        if (op != LZ_OP_CONV2D_GRAD_INPUT) continue;
        #pragma omp parallel for schedule(static) if ((double)g->K * NP > PAR_MIN)
        for (int64_t n = 0; n < g->N; n++) {
            float *dxg = out + (n * g->C + gi * g->Cg) * g->H * g->W;
            memset(dxg, 0, sizeof(float) * (size_t)(g->Cg * g->H * g->W));
            col2im(g, col + n * g->P, NP, dxg);
        }
    }
    return NULL;
}

static const char *conv2d(const lz_program *p, const lz_instr *s, void *const *ptrs,
                          lz_conv_path path)
{
    const lz_value *vx = &p->values[s->in[0]], *vw = &p->values[s->in[1]], *vy = &p->values[s->out];
    if (vy->numel == 0) return NULL;
    geom g = make_geom(vx, vw, vy, s);
    const float *x = ptrs[s->in[0]], *w = ptrs[s->in[1]];
    float *y = ptrs[s->out];
    if (g.Cg == 1 && g.G > 1) {
        dw_forward(&g, x, w, y);
        return NULL;
    }
    const char *err = "lz_conv2d: dnnl_sgemm failed";
    if (use_gathered(&g, path)) return run_gathered(&g, LZ_OP_CONV2D, x, w, y, err);
    return run_items(&g, forward_item, x, w, y, err);
}

static const char *conv2d_grad_input(const lz_program *p, const lz_instr *s, void *const *ptrs,
                                     lz_conv_path path)
{
    const lz_value *vg = &p->values[s->in[0]], *vw = &p->values[s->in[1]], *vx = &p->values[s->out];
    if (vx->numel == 0) return NULL;
    geom g = make_geom(vx, vw, vg, s);
    const float *gy = ptrs[s->in[0]], *w = ptrs[s->in[1]];
    float *dx = ptrs[s->out];
    if (vg->numel == 0) {
        memset(dx, 0, vx->nbytes);
        return NULL;
    }
    if (g.Cg == 1 && g.G > 1) {
        dw_grad_input(&g, gy, w, dx);
        return NULL;
    }
    const char *err = "lz_conv2d (grad input): dnnl_sgemm failed";
    if (use_gathered(&g, path)) return run_gathered(&g, LZ_OP_CONV2D_GRAD_INPUT, gy, w, dx, err);
    return run_items(&g, grad_input_item, gy, w, dx, err);
}

static const char *conv2d_grad_weight(const lz_program *p, const lz_instr *s, void *const *ptrs,
                                      lz_conv_path path)
{
    const lz_value *vx = &p->values[s->in[0]], *vg = &p->values[s->in[1]], *vw = &p->values[s->out];
    if (vw->numel == 0) return NULL;
    geom g = make_geom(vx, vw, vg, s);
    const float *x = ptrs[s->in[0]], *gy = ptrs[s->in[1]];
    float *dw = ptrs[s->out];
    if (g.N == 0 || g.P == 0) {
        memset(dw, 0, vw->nbytes);
        return NULL;
    }
    if (g.Cg == 1 && g.G > 1) return dw_grad_weight(&g, x, vx->block, gy, vg->block, dw);
    const char *err = "lz_conv2d (grad weight): dnnl_sgemm failed";
    const char *oom = "lz_conv2d (grad weight): out of memory";
    const int64_t wn = vw->numel;
    if (use_gathered(&g, path)) return run_gathered(&g, LZ_OP_CONV2D_GRAD_WEIGHT, x, gy, dw, err);
    if (!use_team(&g)) {
        float *col = col_bytes(&g) ? lz_cpu_scratch(LZ_SCRATCH_COLUMNS, col_bytes(&g)) : NULL;
        if (col_bytes(&g) && !col) return oom;
        int failed = 0;
        for (int64_t i = 0; i < g.N * g.G && !failed; i++)
            failed = grad_weight_item(&g, i, x, gy, dw, col, i < g.G ? 0.0f : 1.0f);
        return failed ? err : NULL;
    }
    /* Each thread sums its images into a private copy of dw; the copies
       are added at the end (thread 0 writes straight into dw). */
    const int nt = omp_get_max_threads();
    float *part = nt > 1 ? lz_cpu_scratch(LZ_SCRATCH_PARTIALS, sizeof(float) * (size_t)(wn * (nt - 1))) : NULL;
    if (nt > 1 && !part) return oom;
    /* zeroed here, not by their threads: a team may get fewer threads */
    memset(dw, 0, sizeof(float) * (size_t)wn);
    if (part) memset(part, 0, sizeof(float) * (size_t)(wn * (nt - 1)));
    int failed = 0, bad_alloc = 0;
    #pragma omp parallel num_threads(nt) reduction(|:failed, bad_alloc)
    {
        int t = omp_get_thread_num();
        float *mine = t == 0 ? dw : part + (int64_t)(t - 1) * wn;
        float *col = col_bytes(&g) ? lz_cpu_scratch(LZ_SCRATCH_COLUMNS, col_bytes(&g)) : NULL;
        if (col_bytes(&g) && !col) bad_alloc = 1;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < g.N * g.G; i++)
            if (!bad_alloc) failed |= grad_weight_item(&g, i, x, gy, mine, col, 1.0f);
    }
    #pragma omp parallel for schedule(static) if (wn * (nt - 1) > PAR_MIN)
    for (int64_t i = 0; i < wn; i++)
        for (int t = 1; t < nt; t++) dw[i] += part[(int64_t)(t - 1) * wn + i];
    if (bad_alloc) return oom;
    return failed ? err : NULL;
}

/* The step's (x, w, y) values, whichever direction. */
static geom step_geom(const lz_program *p, const lz_instr *s)
{
    const lz_value *a = &p->values[s->in[0]], *b = &p->values[s->in[1]], *o = &p->values[s->out];
    if (s->op == LZ_OP_CONV2D) return make_geom(a, b, o, s);
    if (s->op == LZ_OP_CONV2D_GRAD_INPUT) return make_geom(o, b, a, s);
    return make_geom(a, o, b, s);
}

/* ---- channel-blocked activations as rows --------------------------------- */

/* Between [N, C/b, P, b] (b = 1: plain [N, C, P]) and rows: channel c of
   image n at rows + c*cs + n*ns, its P elements side by side. to_rows 1
   copies out of the blocks, 0 back into them. */
static void move_rows(float *blocks, int64_t N, int64_t C, int64_t P, int b, float *rows,
                      int64_t cs, int64_t ns, int to_rows)
{
    const int64_t CB = C / b;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)N * C * P > PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        for (int64_t cb = 0; cb < CB; cb++) {
            float *tile = blocks + (n * CB + cb) * P * b;
            for (int l = 0; l < b; l++) {
                float *row = rows + (cb * b + l) * cs + n * ns;
                if (to_rows)
                    for (int64_t q = 0; q < P; q++) row[q] = tile[q * b + l];
                else
                    for (int64_t q = 0; q < P; q++) tile[q * b + l] = row[q];
            }
        }
}

/* Value v ([N, C, P], any block) to or from rows [C, N*P]. */
static void value_rows(const lz_value *v, const float *data, float *rows, int to_rows)
{
    const int64_t N = v->shape[0], C = v->shape[1], P = v->shape[2] * v->shape[3];
    move_rows((float *)data, N, C, P, v->block ? v->block : 1, rows, N * P, P, to_rows);
}

/* Value v ([N, C, P], any block) to or from pixels [N*P, C]: the
   transpose of its rows, what a product whose result is [N*P, C] wants. */
static void value_pixels(const lz_value *v, const float *data, float *pix, int to_pix)
{
    const int64_t N = v->shape[0], C = v->shape[1], P = v->shape[2] * v->shape[3];
    const int b = v->block ? v->block : 1;
    const int64_t CB = C / b;
    float *blocks = (float *)data;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)N * C * P > PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        for (int64_t cb = 0; cb < CB; cb++)
            for (int64_t q = 0; q < P; q++) {
                float *tile = blocks + ((n * CB + cb) * P + q) * b;
                float *px = pix + (n * P + q) * C + cb * b;
                if (to_pix) memcpy(px, tile, sizeof(float) * (size_t)b);
                else memcpy(tile, px, sizeof(float) * (size_t)b);
            }
}

static int rows_apply(const geom *g, int op)
{
    return g->G == 1 && (op == LZ_OP_CONV2D_GRAD_WEIGHT || g->direct_1x1);
}

int lz_cpu_conv_rows_apply(const lz_program *p, const lz_instr *s)
{
    geom g = step_geom(p, s);
    return rows_apply(&g, s->op);
}

size_t lz_cpu_conv_rows_bytes(const lz_program *p, const lz_instr *s)
{
    geom g = step_geom(p, s);
    const int64_t NP = g.N * g.P;
    int64_t floats = g.O * NP;   /* y or gy as [O, N*P] (or [N*P, O]) */
    if (s->op == LZ_OP_CONV2D_GRAD_WEIGHT && !g.direct_1x1)   /* columns, and x out of its blocks */
        floats += g.K * NP + (p->values[s->in[0]].block ? g.N * g.C * g.H * g.W : 0);
    else
        floats += g.C * NP;      /* x or dx as [C, N*P] (or [N*P, C]) */
    return sizeof(float) * (size_t)floats;
}

const char *lz_cpu_conv_rows(const lz_program *p, const lz_instr *s, void *const *ptrs,
                             void *scratch)
{
    if (!scratch) return "lz_conv2d: no scratch for the rows of blocked activations";
    geom g = step_geom(p, s);
    if (!rows_apply(&g, s->op)) return "lz_conv2d: a step the rows path does not take";
    const int64_t NP = g.N * g.P;
    float *yrows = scratch, *xrows = yrows + g.O * NP;
    const lz_value *vx = &p->values[s->in[0]];
    const float *x = ptrs[s->in[0]];
    dnnl_status_t st;
    if (s->op == LZ_OP_CONV2D_GRAD_INPUT) {   /* dx[NP, C] = gy[NP, O] w[O, C], as pixels */
        float *gpix = yrows, *dxpix = xrows;
        value_pixels(vx, x, gpix, 1);
        st = dnnl_sgemm('N', 'N', NP, g.C, g.O, 1.0f, gpix, g.O, ptrs[s->in[1]], g.C, 0.0f,
                        dxpix, g.C);
        if (st == dnnl_success) value_pixels(&p->values[s->out], ptrs[s->out], dxpix, 0);
    } else if (s->op == LZ_OP_CONV2D) {   /* y[O, NP] = w[O, C] x[C, NP] */
        value_rows(vx, x, xrows, 1);
        st = dnnl_sgemm('N', 'N', g.O, NP, g.C, 1.0f, ptrs[s->in[1]], g.C, xrows, NP, 0.0f,
                        yrows, NP);
        if (st == dnnl_success) value_rows(&p->values[s->out], ptrs[s->out], yrows, 0);
    } else {   /* dw[O, K] = gy[O, NP] col[K, NP]^T */
        value_rows(&p->values[s->in[1]], ptrs[s->in[1]], yrows, 1);
        if (g.direct_1x1) {
            value_rows(vx, x, xrows, 1);
        } else {
            if (vx->block) {
                float *plain = xrows + g.K * NP;
                move_rows((float *)x, g.N, g.C, g.H * g.W, vx->block, plain, g.H * g.W,
                          g.C * g.H * g.W, 1);
                x = plain;
            }
            gather_cols(&g, x, 0, xrows);
        }
        st = dnnl_sgemm('N', 'T', g.O, g.K, NP, 1.0f, yrows, NP, xrows, NP, 0.0f, ptrs[s->out], g.K);
    }
    return st == dnnl_success ? NULL : "lz_conv2d: dnnl_sgemm failed (rows of blocked activations)";
}

const char *lz_cpu_conv_run(const lz_program *p, const lz_instr *s, void *const *ptrs,
                            lz_conv_path path)
{
    /* im2col reads plain layouts; blocked steps are oneDNN's (k_dnnl_conv.c),
       but a depthwise weight gradient's, which its direct loops read */
    int blocked = p->values[s->out].block;
    for (int k = 0; k < s->n_in; k++) blocked |= p->values[s->in[k]].block;
    if (blocked && !lz_cpu_conv_dw_grad_weight_blocked(p, s))
        return "lz_conv2d: oneDNN made no primitive for a step on blocked layouts";
    switch ((lz_op)s->op) {
    case LZ_OP_CONV2D: return conv2d(p, s, ptrs, path);
    case LZ_OP_CONV2D_GRAD_INPUT: return conv2d_grad_input(p, s, ptrs, path);
    case LZ_OP_CONV2D_GRAD_WEIGHT: return conv2d_grad_weight(p, s, ptrs, path);
    default: return "lz_conv2d: not a convolution step";
    }
}

int lz_cpu_conv_dw_grad_weight_blocked(const lz_program *p, const lz_instr *s)
{
    if (s->op != LZ_OP_CONV2D_GRAD_WEIGHT || p->values[s->out].block) return 0;
    for (int k = 0; k < 2; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return 0;
    const geom g = step_geom(p, s);
    return g.Cg == 1 && g.G > 1;
}

int lz_cpu_conv_can_gather(const lz_program *p, const lz_instr *s)
{
    geom g = step_geom(p, s);
    return can_gather(&g);
}

int lz_cpu_conv_by_rule_gathers(const lz_program *p, const lz_instr *s)
{
    geom g = step_geom(p, s);
    return use_gathered(&g, LZ_CONV_BY_RULE);
}

static const char *k_conv2d(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    /* bf16 steps have a prepared state (k_dnnl_conv.c); without one (out
       of memory) they cannot be read as float32 */
    if (p->values[s->in[0]].dtype != LZ_F32 || p->values[s->in[1]].dtype != LZ_F32)
        return "lz_conv2d: a bf16 step without its prepared state (out of memory?)";
    return lz_cpu_conv_run(p, s, ptrs, LZ_CONV_BY_RULE);
}

lz_kernel lz_cpu_conv_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_CONV2D:
    case LZ_OP_CONV2D_GRAD_INPUT:
    case LZ_OP_CONV2D_GRAD_WEIGHT: return k_conv2d;
    default: return lz_cpu_pool_kernel(op);
    }
}
