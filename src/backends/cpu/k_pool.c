/* CPU kernels for max, average and adaptive-average 2-d pooling (NCHW) and
 * their gradients, with torch's window rules. Every kernel works one
 * (image, channel) plane at a time; a gradient plane is written by one
 * thread only, so overlapping windows need no atomics. Steps whose layout
 * is channel-blocked go to k_pool_blocked.c (max and adaptive average). */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_pool.h"
#include "backends/cpu/k_pool_blocked.h"
#include "backends/cpu/pool_window.h"

/* torch's avg_pool2d divisor: the window clipped to the padded input, or to
   the input alone without count_include_pad. */
static int64_t avg_divisor(const pgeom *g, int64_t oh, int64_t ow)
{
    int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
    int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;
    if (h1 > g->H + g->ph) h1 = g->H + g->ph;
    if (w1 > g->W + g->pw) w1 = g->W + g->pw;
    if (g->count_pad) return (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > g->H) h1 = g->H;
    if (w1 > g->W) w1 = g->W;
    return (h1 - h0) * (w1 - w0);
}

/* Index in the plane of the element torch's max pool picks: the first
   maximum, or the last NaN; -1 for an empty window. One pass of selects,
   no branch on the data: a branch on "is this the max" mispredicts on
   every window (the max pool gradient is a large share of squeezenet's
   step). */
static int64_t argmax(const pgeom *g, const float *x, int64_t oh, int64_t ow)
{
    int64_t h0, h1, w0, w1;
    window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
    window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
    if (h0 >= h1 || w0 >= w1) return -1;
    float m = -INFINITY;
    int64_t best = h0 * g->W + w0, nan_at = -1;   /* all -inf: torch keeps the first */
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            const int64_t k = ih * g->W + iw;
            const float v = x[k];
            const int above = v > m;                   /* strict: the first maximum stays */
            best = above ? k : best;
            m = above ? v : m;
            nan_at = v != v ? k : nan_at;
        }
    return nan_at >= 0 ? nan_at : best;
}

/* Max of a, b, c, d (row-major window order), NaN if any is, as torch. */
static inline float max4(float a, float b, float c, float d)
{
    float m = a;
    m = b > m ? b : m;
    m = c > m ? c : m;
    m = d > m ? d : m;
    /* | not ||: no branches, and NaN must win as in torch */
    return ((a != a) | (b != b) | (c != c) | (d != d)) ? NAN : m;
}

static void max_pool_2x2(const pgeom *g, const float *x, float *y)
{
    #pragma omp parallel for schedule(static) if (pool_parallel(g, 4))
    for (int64_t pl = 0; pl < g->planes; pl++)
        for (int64_t oh = 0; oh < g->OH; oh++) {
            const float *r0 = x + (pl * g->H + 2 * oh) * g->W, *r1 = r0 + g->W;
            float *yr = y + (pl * g->OH + oh) * g->OW;
            for (int64_t ow = 0; ow < g->OW; ow++)
                yr[ow] = max4(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]);
        }
}

/* Each window's gradient goes to argmax's pick (the first max, or the last
   NaN); the windows tile the input, so every element is written once and
   rows or columns the windows leave out are zeroed. */
static void max_pool_2x2_grad(const pgeom *g, const float *x, const float *gy, float *dx)
{
    #pragma omp parallel for schedule(static) if (pool_parallel(g, 4))
    for (int64_t pl = 0; pl < g->planes; pl++) {
        const float *xp = x + pl * g->H * g->W;
        float *dp = dx + pl * g->H * g->W;
        for (int64_t oh = 0; oh < g->OH; oh++) {
            const float *r0 = xp + 2 * oh * g->W, *r1 = r0 + g->W;
            float *d0 = dp + 2 * oh * g->W, *d1 = d0 + g->W;
            const float *gr = gy + (pl * g->OH + oh) * g->OW;
            for (int64_t ow = 0; ow < g->OW; ow++) {
                float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
                float m = max4(v[0], v[1], v[2], v[3]);
                /* which one is picked, as masks: the comparisons are coin
                   tosses on data, and a chain of branches on them mispredicts */
                int a0, a1, a2;
                if (m != m) {
                    int n3 = v[3] != v[3], n2 = v[2] != v[2] && !n3;
                    a2 = n2;
                    a1 = v[1] != v[1] && !n3 && !n2;
                    a0 = !n3 && !n2 && !a1;
                } else {
                    a0 = v[0] == m;
                    a1 = (v[1] == m) & !a0;
                    a2 = (v[2] == m) & !(a0 | a1);
                }
                int a3 = !(a0 | a1 | a2);
                float gv = gr[ow];
                d0[2 * ow] = a0 ? gv : 0.0f;
                d0[2 * ow + 1] = a1 ? gv : 0.0f;
                d1[2 * ow] = a2 ? gv : 0.0f;
                d1[2 * ow + 1] = a3 ? gv : 0.0f;
            }
            for (int64_t iw = 2 * g->OW; iw < g->W; iw++) d0[iw] = d1[iw] = 0.0f;
        }
        for (int64_t ih = 2 * g->OH; ih < g->H; ih++)
            for (int64_t iw = 0; iw < g->W; iw++) dp[ih * g->W + iw] = 0.0f;
    }
}

/* 3x3 windows (ResNet's, AlexNet's and SqueezeNet's pools) that lie inside
 * the input: nine loads and a reduction tree of depth four, instead of the
 * generic loops' chain of nine dependent selects and window arithmetic per
 * output. The tree keeps torch's rule, the first maximum: at every merge
 * the left operand holds the earlier elements and wins ties. */
typedef struct pick { float v; int64_t at; } pick;

static inline pick later_if_above(pick a, pick b)
{
    /* the index through a mask: written as a select, GCC makes some of
       these branches, which mispredict on data */
    const int64_t above = -(int64_t)(b.v > a.v);
    return (pick){b.v > a.v ? b.v : a.v, (b.at & above) | (a.at & ~above)};
}

/* The first maximum of the 3x3 window whose top left is k; nan: whether any
   element is NaN (the caller then uses the generic rule). */
static inline pick max3x3(const float *x, int64_t W, int64_t k, int *nan)
{
    pick e[9];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) e[3 * r + c] = (pick){x[k + r * W + c], k + r * W + c};
    int n = 0;
    for (int i = 0; i < 9; i++) n |= e[i].v != e[i].v;
    *nan = n;
    pick a = later_if_above(later_if_above(e[0], e[1]), later_if_above(e[2], e[3]));
    pick b = later_if_above(later_if_above(e[4], e[5]), later_if_above(e[6], e[7]));
    return later_if_above(later_if_above(a, b), e[8]);
}

/* The outputs of row oh (and columns [*lo, *hi)) whose 3x3 window is inside
   the input; 0 when the row's window leaves it. */
static int inner_3x3(const pgeom *g, int64_t oh, int64_t *lo, int64_t *hi)
{
    if (g->kh != 3 || g->kw != 3) return 0;
    const int64_t top = oh * g->sh - g->ph;
    if (top < 0 || top + 3 > g->H) return 0;
    *lo = (g->pw + g->sw - 1) / g->sw;                   /* first ow with ow*sw - pw >= 0 */
    *hi = g->W + g->pw - 3 >= 0 ? (g->W + g->pw - 3) / g->sw + 1 : 0;
    if (*hi > g->OW) *hi = g->OW;
    return *lo < *hi;
}

#define ROW_CHUNK 256   /* outputs of a row picked at a time */

/* The gradient's picks for n outputs of a row whose 3x3 windows, stride S,
   lie inside the input, the first at top: torch's rule as its own loop
   writes it, one chain of nine selects taking v when v > max or v is NaN
   (the first maximum, the last NaN). The value is not needed, NaN windows
   need no second pass, and over int32 indices the loop vectorises (four
   outputs a vector even with SSE2), which the tree of max3x3 does not. */
static inline __attribute__((always_inline)) void
picks_3x3(const float *x, int64_t W, int64_t top, int64_t n, int S, int64_t *at)
{
    int32_t idx[ROW_CHUNK];
    const int32_t w = (int32_t)W, t0 = (int32_t)top;
    const int32_t off[9] = {0, 1, 2, w, w + 1, w + 2, 2 * w, 2 * w + 1, 2 * w + 2};
    for (int64_t j = 0; j < n; j++) {
        const int32_t k = t0 + (int32_t)j * S;
        float m = x[k];
        int32_t a = k;
        for (int e = 1; e < 9; e++) {
            const float v = x[k + off[e]];
            const int take = (v > m) | (v != v);
            m = take ? v : m;
            a = take ? k + off[e] : a;
        }
        idx[j] = a;
    }
    for (int64_t j = 0; j < n; j++) at[j] = idx[j];
}

/* Output (oh, ow0 + k), k < n, by torch's rule (argmax: the first maximum,
   the last NaN): the input index it takes into at[k] (-1 for an empty
   window) and its value into val[k], either may be NULL. Forward and
   gradient share it, so both take the same element; inlined with one of
   them NULL, the other's work drops out (the forward tracking indices
   it does not need ran several times slower). */
static inline __attribute__((always_inline)) void
pick_row(const pgeom *g, const float *xp, int64_t oh, int64_t ow0, int64_t n, int64_t *at,
         float *val)
{
    int64_t lo = 0, hi = 0;
    if (!inner_3x3(g, oh, &lo, &hi)) lo = hi = 0;
    lo = lo < ow0 ? ow0 : lo;
    hi = hi > ow0 + n ? ow0 + n : hi;
    /* a loop of its own for the windows inside the input: tight, inlined */
    const int64_t top = (oh * g->sh - g->ph) * g->W - g->pw;
    /* the gradient at stride 1 or 2: a constant stride, which lets the
       compiler vectorise picks_3x3's loads */
    if (at && !val && g->sw == 2 && hi > lo) {
        picks_3x3(xp, g->W, top + lo * 2, hi - lo, 2, at + (lo - ow0));
    } else if (at && !val && g->sw == 1 && hi > lo) {
        picks_3x3(xp, g->W, top + lo, hi - lo, 1, at + (lo - ow0));
    } else {
        for (int64_t ow = lo; ow < hi; ow++) {
            int nan;
            const pick m = max3x3(xp, g->W, top + ow * g->sw, &nan);
            if (at) at[ow - ow0] = nan ? argmax(g, xp, oh, ow) : m.at;
            if (val) val[ow - ow0] = nan ? NAN : m.v;
        }
    }
    for (int64_t ow = ow0; ow < ow0 + n; ow++) {
        if (ow >= lo && ow < hi) continue;
        const int64_t i = argmax(g, xp, oh, ow);
        if (at) at[ow - ow0] = i;
        if (val) val[ow - ow0] = i >= 0 ? xp[i] : -INFINITY;
    }
}

static const char *k_max_pool(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (p->values[s->in[0]].block) return lz_cpu_max_pool_blocked(p, s, ptrs);
    pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->out], s, 1);
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    if (is_2x2(&g)) {
        max_pool_2x2(&g, x, y);
        return NULL;
    }
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.H * g.W;
        float *yp = y + pl * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow0 = 0; ow0 < g.OW; ow0 += ROW_CHUNK) {
                const int64_t n = g.OW - ow0 < ROW_CHUNK ? g.OW - ow0 : ROW_CHUNK;
                pick_row(&g, xp, oh, ow0, n, NULL, yp + oh * g.OW + ow0);
            }
    }
    return NULL;
}

/* (x, g) -> dx: each output's gradient goes to its window's first max. */
static const char *k_max_pool_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (p->values[s->out].block) return lz_cpu_max_pool_grad_blocked(p, s, ptrs);
    pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->in[1]], s, 1);
    const float *x = ptrs[s->in[0]], *gy = ptrs[s->in[1]];
    float *dx = ptrs[s->out];
    if (is_2x2(&g)) {
        max_pool_2x2_grad(&g, x, gy, dx);
        return NULL;
    }
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.H * g.W, *gp = gy + pl * g.OH * g.OW;
        float *dp = dx + pl * g.H * g.W;
        /* zeroed here, by its thread, while the plane is about to be in
           cache anyway: not a separate single-threaded pass over dx */
        memset(dp, 0, sizeof *dp * (size_t)(g.H * g.W));
        int64_t at[ROW_CHUNK];
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow0 = 0; ow0 < g.OW; ow0 += ROW_CHUNK) {
                const int64_t n = g.OW - ow0 < ROW_CHUNK ? g.OW - ow0 : ROW_CHUNK;
                pick_row(&g, xp, oh, ow0, n, at, NULL);
                for (int64_t k = 0; k < n; k++)
                    if (at[k] >= 0) dp[at[k]] += gp[oh * g.OW + ow0 + k];
            }
    }
    return NULL;
}

static const char *k_avg_pool(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->out], s, 1);
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.H * g.W;
        float *yp = y + pl * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t h0, h1, w0, w1;
                window(oh, g.sh, g.ph, g.kh, g.H, &h0, &h1);
                window(ow, g.sw, g.pw, g.kw, g.W, &w0, &w1);
                int64_t div = avg_divisor(&g, oh, ow);
                float sum = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * g.W + iw];
                yp[oh * g.OW + ow] = div > 0 ? sum / (float)div : 0.0f;
            }
    }
    return NULL;
}

/* (g) -> dx: each output's gradient spread over its window / divisor. */
static const char *k_avg_pool_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    pgeom g = make_pgeom(&p->values[s->out], &p->values[s->in[0]], s, 1);
    const float *gy = ptrs[s->in[0]];
    float *dx = ptrs[s->out];
    memset(dx, 0, p->values[s->out].nbytes);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *gp = gy + pl * g.OH * g.OW;
        float *dp = dx + pl * g.H * g.W;
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t h0, h1, w0, w1;
                window(oh, g.sh, g.ph, g.kh, g.H, &h0, &h1);
                window(ow, g.sw, g.pw, g.kw, g.W, &w0, &w1);
                int64_t div = avg_divisor(&g, oh, ow);
                if (div <= 0) continue;
                float v = gp[oh * g.OW + ow] / (float)div;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dp[ih * g.W + iw] += v;
            }
    }
    return NULL;
}

static const char *k_adaptive_avg_pool(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (p->values[s->in[0]].block) return lz_cpu_adaptive_avg_pool_blocked(p, s, ptrs);
    pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->out], s, 0);
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    int64_t per_out = (g.H / g.OH + 2) * (g.W / g.OW + 2);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, per_out))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.H * g.W;
        float *yp = y + pl * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; oh++) {
            int64_t h0, h1;
            adaptive_window(oh, g.H, g.OH, &h0, &h1);
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t w0, w1;
                adaptive_window(ow, g.W, g.OW, &w0, &w1);
                float sum = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * g.W + iw];
                yp[oh * g.OW + ow] = sum / (float)((h1 - h0) * (w1 - w0));
            }
        }
    }
    return NULL;
}

static const char *k_adaptive_avg_pool_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (p->values[s->out].block) return lz_cpu_adaptive_avg_pool_grad_blocked(p, s, ptrs);
    pgeom g = make_pgeom(&p->values[s->out], &p->values[s->in[0]], s, 0);
    const float *gy = ptrs[s->in[0]];
    float *dx = ptrs[s->out];
    memset(dx, 0, p->values[s->out].nbytes);
    int64_t per_out = (g.H / g.OH + 2) * (g.W / g.OW + 2);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, per_out))
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *gp = gy + pl * g.OH * g.OW;
        float *dp = dx + pl * g.H * g.W;
        for (int64_t oh = 0; oh < g.OH; oh++) {
            int64_t h0, h1;
            adaptive_window(oh, g.H, g.OH, &h0, &h1);
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t w0, w1;
                adaptive_window(ow, g.W, g.OW, &w0, &w1);
                float v = gp[oh * g.OW + ow] / (float)((h1 - h0) * (w1 - w0));
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dp[ih * g.W + iw] += v;
            }
        }
    }
    return NULL;
}

lz_kernel lz_cpu_pool_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_MAX_POOL2D: return k_max_pool;
    case LZ_OP_MAX_POOL2D_GRAD: return k_max_pool_grad;
    case LZ_OP_AVG_POOL2D: return k_avg_pool;
    case LZ_OP_AVG_POOL2D_GRAD: return k_avg_pool_grad;
    case LZ_OP_ADAPTIVE_AVG_POOL2D: return k_adaptive_avg_pool;
    case LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD: return k_adaptive_avg_pool_grad;
    default: return NULL;
    }
}
