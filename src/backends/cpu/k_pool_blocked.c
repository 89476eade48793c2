/* Max and adaptive-average pooling and their gradients on channel-blocked
 * operands ([N, C/b, H, W, b], lz_value.block). The b channels of a block
 * lie together at every position, so each window is done for all b lanes
 * at once, with selects and adds on whole vectors, where the plain kernels
 * (k_pool.c) walk one channel's plane. Every lane does to its channel what
 * the plain kernel does, in the same order, so the results are bitwise
 * theirs. Work is split by (image, channel block) plane; a gradient plane
 * is written by one thread only. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_pool_blocked.h"
#include "backends/cpu/pool_window.h"

#define LANES 16   /* lanes done at a time: a block of 16 or 8 is one pass */

#define INLINE static inline __attribute__((always_inline))

/* f(args, b) with b a constant for the usual blocks, so that the inlined
   plane function's lane loops become whole vectors. It goes inside the
   parallel loop: GCC outlines an OpenMP body before it inlines, so a
   constant given to a function holding the loop would not reach it. */
#define FOR_BLOCK(b, f, ...) do { switch (b) {         \
    case 16: f(__VA_ARGS__, 16); break;                 \
    case 8: f(__VA_ARGS__, 8); break;                   \
    default: f(__VA_ARGS__, b); break; } } while (0)

/* Whether v can be read as blocked with b: it is, or it has one position
   per channel, where both layouts are the same bytes. */
static int takes_block(const lz_value *v, int64_t b)
{
    return v->block == b || (v->block == 0 && v->shape[2] * v->shape[3] == 1);
}

/* The outputs [*lo, *hi) of a row whose windows' columns lie inside the
   input. The 2x2 and 3x3 windows of such outputs, in a row whose window
   rows do too, are done with constant sizes and no window arithmetic:
   with windows this small that arithmetic costs as much as the maxima. */
static void inner_cols(const pgeom *g, int64_t *lo, int64_t *hi)
{
    *lo = (g->pw + g->sw - 1) / g->sw;
    *hi = g->W + g->pw - g->kw >= 0 ? (g->W + g->pw - g->kw) / g->sw + 1 : 0;
    if (*hi > g->OW) *hi = g->OW;
    if (*lo > *hi) *lo = *hi;
}

/* Max pool of the KH x KW window (after clipping) whose top left is x0,
   rows `row` apart, into yv, with torch's rule as the plain kernels keep
   it: the first maximum (the strict > keeps it, and is one vmaxps),
   unless the window holds a NaN, then the last NaN; -inf for an empty
   window. canon: the plain kernel's 2x2 path and its 3x3 windows inside
   the input give the NaN constant rather than the input's NaN, and so
   must this. With KH and KW constants (fixed) a lane runs the whole
   window unrolled, its maximum in a register, the lanes being the
   vectors; otherwise each element is one loop over the lanes, the maxima
   kept in memory. NaN is tested on the elements, not on m at the end:
   from that GCC tracks m's NaN-ness through the selects as booleans,
   which it cannot vectorise. */
INLINE void max_out(const float *x0, int64_t row, int64_t KH, int64_t KW, int fixed, int canon,
                    float *yv, int64_t B)
{
    if (fixed) {
        #pragma omp simd
        for (int64_t l = 0; l < B; l++) {
            float m = -INFINITY, last_nan = 0.0f;
            int has_nan = 0;
            for (int64_t r = 0; r < KH; r++)
                for (int64_t c = 0; c < KW; c++) {
                    const float v = x0[r * row + c * B + l];
                    m = v > m ? v : m;
                    has_nan |= v != v;
                    last_nan = v != v ? v : last_nan;
                }
            yv[l] = has_nan ? (canon ? NAN : last_nan) : m;
        }
        return;
    }
    for (int64_t l0 = 0; l0 < B; l0 += LANES) {
        const int64_t nl = B - l0 < LANES ? B - l0 : LANES;
        float m[LANES], last_nan[LANES];
        int has_nan[LANES];
        for (int64_t l = 0; l < nl; l++) {
            m[l] = -INFINITY;
            last_nan[l] = 0.0f;
            has_nan[l] = 0;
        }
        for (int64_t r = 0; r < KH; r++)
            for (int64_t c = 0; c < KW; c++) {
                const float *xv = x0 + r * row + c * B + l0;
                #pragma omp simd
                for (int64_t l = 0; l < nl; l++) {
                    const float v = xv[l];
                    m[l] = v > m[l] ? v : m[l];
                    has_nan[l] |= v != v;
                    last_nan[l] = v != v ? v : last_nan[l];
                }
            }
        #pragma omp simd
        for (int64_t l = 0; l < nl; l++)
            yv[l0 + l] = has_nan[l] ? (canon ? NAN : last_nan[l]) : m[l];
    }
}

/* Output ow of a row whose window rows are [h0, h0 + nh), by the window
   arithmetic: the borders, and every window of other sizes. */
INLINE void max_out_any(const pgeom *g, const float *xp, int64_t h0, int64_t nh, int64_t ow,
                        float *yv, int64_t B)
{
    int64_t w0, w1;
    window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
    max_out(xp + (h0 * g->W + w0) * B, g->W * B, nh, w1 > w0 ? w1 - w0 : 0, 0, 0, yv, B);
}

INLINE void max_pool_plane(const pgeom *g, const float *xp, float *yp, int tiles, int64_t B)
{
    const int64_t row = g->W * B, sw = g->sw * B;
    const int k3 = g->kh == 3 && g->kw == 3, k2 = g->kh == 2 && g->kw == 2;
    int64_t lo, hi;
    inner_cols(g, &lo, &hi);
    for (int64_t oh = 0; oh < g->OH; oh++) {
        int64_t h0, h1;
        window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
        const int64_t nh = h1 > h0 ? h1 - h0 : 0;
        const int inner = (k3 | k2) && nh == g->kh;
        const int64_t a = inner ? lo : g->OW, b = inner ? hi : g->OW;
        const int64_t x0 = h0 * row - g->pw * B;   /* + ow * sw: output ow's window */
        float *yr = yp + oh * g->OW * B;
        for (int64_t ow = 0; ow < a; ow++) max_out_any(g, xp, h0, nh, ow, yr + ow * B, B);
        /* constants, canon included, so that unused NaN tracking drops out */
        if (k3)
            for (int64_t ow = a; ow < b; ow++)
                max_out(xp + (x0 + ow * sw), row, 3, 3, 1, 1, yr + ow * B, B);
        else if (tiles)
            for (int64_t ow = a; ow < b; ow++)
                max_out(xp + (x0 + ow * sw), row, 2, 2, 1, 1, yr + ow * B, B);
        else
            for (int64_t ow = a; ow < b; ow++)
                max_out(xp + (x0 + ow * sw), row, 2, 2, 1, 0, yr + ow * B, B);
        for (int64_t ow = b; ow < g->OW; ow++) max_out_any(g, xp, h0, nh, ow, yr + ow * B, B);
    }
}

/* The gradient's pick for nl lanes of a window as max_out's: the first
   maximum or the last NaN, by one select per element (v above the
   maximum, or a NaN), which a NaN then holds. at: its place in the window
   (r * KW + c: an int32, as wide as the float lanes); a window all -inf
   picks its first. fixed as for max_out. */
INLINE void window_pick(const float *x0, int64_t row, int64_t KH, int64_t KW, int fixed,
                        int32_t *restrict at, int64_t nl, int64_t B)
{
    if (fixed) {
        #pragma omp simd
        for (int64_t l = 0; l < nl; l++) {
            float m = -INFINITY;
            int32_t a = 0;
            for (int64_t r = 0; r < KH; r++)
                for (int64_t c = 0; c < KW; c++) {
                    const float v = x0[r * row + c * B + l];
                    const int take = (v > m) | (v != v);
                    m = take ? v : m;
                    a = take ? (int32_t)(r * KW + c) : a;
                }
            at[l] = a;
        }
        return;
    }
    float m[LANES];
    for (int64_t l = 0; l < nl; l++) {
        m[l] = -INFINITY;
        at[l] = 0;
    }
    for (int64_t r = 0; r < KH; r++)
        for (int64_t c = 0; c < KW; c++) {
            const float *xv = x0 + r * row + c * B;
            #pragma omp simd
            for (int64_t l = 0; l < nl; l++) {
                const float v = xv[l];
                const int take = (v > m[l]) | (v != v);
                m[l] = take ? v : m[l];
                at[l] = take ? (int32_t)(r * KW + c) : at[l];
            }
        }
}

/* The gradient of the window at x0 / d0 (KH x KW, after clipping): each
   lane's gv added to the whole window, itself at the pick and +0
   elsewhere, which leaves dx's bits as the plain kernel's one add would
   (dx starts at +0 and never holds -0, the one value adding +0 changes).
   tiles: the plain 2x2 path, whose windows tile the input, stores rather
   than adds (a -0 gradient stays -0), and so does this; a constant, as a
   store or an add chosen per element is control flow the vectoriser
   refuses. The adds are loops of their own: unrolled beside a fixed
   window's picks, GCC makes them a store through a selected address. */
INLINE void max_grad_window(const float *x0, const float *gv, float *d0, int64_t row,
                            int64_t KH, int64_t KW, int fixed, int tiles, int64_t B)
{
    for (int64_t l0 = 0; l0 < B; l0 += LANES) {
        const int64_t nl = B - l0 < LANES ? B - l0 : LANES;
        int32_t at[LANES];
        window_pick(x0 + l0, row, KH, KW, fixed, at, nl, B);
        for (int64_t r = 0; r < KH; r++)
            for (int64_t c = 0; c < KW; c++) {
                float *d = d0 + r * row + c * B + l0;
                #pragma omp simd
                for (int64_t l = 0; l < nl; l++) {
                    const float add = at[l] == (int32_t)(r * KW + c) ? gv[l0 + l] : 0.0f;
                    d[l] = tiles ? add : d[l] + add;
                }
            }
    }
}

/* Output ow's gradient by the window arithmetic, as max_out_any. */
INLINE void max_grad_any(const pgeom *g, const float *xp, const float *gv, float *dp, int64_t h0,
                         int64_t nh, int64_t ow, int64_t B)
{
    int64_t w0, w1;
    window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
    if (w0 >= w1) return;   /* no element, no gradient */
    const int64_t at = (h0 * g->W + w0) * B;
    max_grad_window(xp + at, gv, dp + at, g->W * B, nh, w1 - w0, 0, 0, B);
}

/* Outputs in row-major order, as the plain kernel adds them, which the
   sums of overlapping windows need. */
INLINE void max_pool_grad_plane(const pgeom *g, const float *xp, const float *gp, float *dp,
                                int tiles, int64_t B)
{
    const int64_t W = g->W, row = W * B, sw = g->sw * B;
    const int k3 = g->kh == 3 && g->kw == 3, k2 = g->kh == 2 && g->kw == 2;
    if (!tiles) {
        memset(dp, 0, sizeof *dp * (size_t)(g->H * row));
    } else {
        /* only what the windows leave out: the rest is stored below */
        for (int64_t ih = 0; ih < 2 * g->OH; ih++)
            memset(dp + ih * row + 2 * g->OW * B, 0, sizeof *dp * (size_t)((W - 2 * g->OW) * B));
        memset(dp + 2 * g->OH * row, 0, sizeof *dp * (size_t)((g->H - 2 * g->OH) * row));
    }
    int64_t lo, hi;
    inner_cols(g, &lo, &hi);
    for (int64_t oh = 0; oh < g->OH; oh++) {
        int64_t h0, h1;
        window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
        if (h0 >= h1) continue;   /* no element, no gradient */
        const int64_t nh = h1 - h0;
        const int inner = (k3 | k2) && nh == g->kh;
        const int64_t a = inner ? lo : g->OW, b = inner ? hi : g->OW;
        const int64_t x0 = h0 * row - g->pw * B;   /* + ow * sw: output ow's window */
        const float *gr = gp + oh * g->OW * B;
        for (int64_t ow = 0; ow < a; ow++) max_grad_any(g, xp, gr + ow * B, dp, h0, nh, ow, B);
        if (tiles)
            for (int64_t ow = a; ow < b; ow++)
                max_grad_window(xp + (x0 + ow * sw), gr + ow * B, dp + (x0 + ow * sw), row, 2, 2,
                                1, 1, B);
        else if (k3)
            for (int64_t ow = a; ow < b; ow++)
                max_grad_window(xp + (x0 + ow * sw), gr + ow * B, dp + (x0 + ow * sw), row, 3, 3,
                                1, 0, B);
        else
            for (int64_t ow = a; ow < b; ow++)
                max_grad_window(xp + (x0 + ow * sw), gr + ow * B, dp + (x0 + ow * sw), row, 2, 2,
                                1, 0, B);
        for (int64_t ow = b; ow < g->OW; ow++) max_grad_any(g, xp, gr + ow * B, dp, h0, nh, ow, B);
    }
}

/* One plane of adaptive average pool: each lane's sum in the plain
   kernel's order (ih, then iw) from 0, then the same division. */
INLINE void adaptive_avg_plane(const pgeom *g, const float *xp, float *yp, int64_t B)
{
    for (int64_t oh = 0; oh < g->OH; oh++) {
        int64_t h0, h1;
        adaptive_window(oh, g->H, g->OH, &h0, &h1);
        for (int64_t ow = 0; ow < g->OW; ow++) {
            int64_t w0, w1;
            adaptive_window(ow, g->W, g->OW, &w0, &w1);
            const float n = (float)((h1 - h0) * (w1 - w0));
            float *yv = yp + (oh * g->OW + ow) * B;
            for (int64_t l0 = 0; l0 < B; l0 += LANES) {
                const int64_t nl = B - l0 < LANES ? B - l0 : LANES;
                float sum[LANES];
                for (int64_t l = 0; l < nl; l++) sum[l] = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) {
                        const float *xv = xp + (ih * g->W + iw) * B + l0;
                        #pragma omp simd
                        for (int64_t l = 0; l < nl; l++) sum[l] += xv[l];
                    }
                for (int64_t l = 0; l < nl; l++) yv[l0 + l] = sum[l] / n;
            }
        }
    }
}

/* One plane of its gradient: dx from 0, each output's share added over
   its window in the plain kernel's order, which overlapping windows need
   for the same sums. */
INLINE void adaptive_avg_grad_plane(const pgeom *g, const float *gp, float *dp, int64_t B)
{
    memset(dp, 0, sizeof *dp * (size_t)(g->H * g->W * B));
    for (int64_t oh = 0; oh < g->OH; oh++) {
        int64_t h0, h1;
        adaptive_window(oh, g->H, g->OH, &h0, &h1);
        for (int64_t ow = 0; ow < g->OW; ow++) {
            int64_t w0, w1;
            adaptive_window(ow, g->W, g->OW, &w0, &w1);
            const float n = (float)((h1 - h0) * (w1 - w0));
            const float *gv = gp + (oh * g->OW + ow) * B;
            for (int64_t l0 = 0; l0 < B; l0 += LANES) {
                const int64_t nl = B - l0 < LANES ? B - l0 : LANES;
                float v[LANES];
                for (int64_t l = 0; l < nl; l++) v[l] = gv[l0 + l] / n;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) {
                        float *dv = dp + (ih * g->W + iw) * B + l0;
                        #pragma omp simd
                        for (int64_t l = 0; l < nl; l++) dv[l] += v[l];
                    }
            }
        }
    }
}

static const char *const mixed = "pool2d: operands in different blocked layouts";

const char *lz_cpu_max_pool_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->out], s, 1);
    const int64_t b = p->values[s->in[0]].block;
    if (!takes_block(&p->values[s->out], b)) return mixed;
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    const int tiles = is_2x2(&g);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes / b; pl++)
        FOR_BLOCK(b, max_pool_plane, &g, x + pl * g.H * g.W * b, y + pl * g.OH * g.OW * b, tiles);
    return NULL;
}

const char *lz_cpu_max_pool_grad_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->in[1]], s, 1);
    const int64_t b = p->values[s->out].block;
    if (!takes_block(&p->values[s->in[0]], b) || !takes_block(&p->values[s->in[1]], b))
        return mixed;
    const float *x = ptrs[s->in[0]], *gy = ptrs[s->in[1]];
    float *dx = ptrs[s->out];
    const int tiles = is_2x2(&g);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, g.kh * g.kw))
    for (int64_t pl = 0; pl < g.planes / b; pl++)
        FOR_BLOCK(b, max_pool_grad_plane, &g, x + pl * g.H * g.W * b, gy + pl * g.OH * g.OW * b,
                  dx + pl * g.H * g.W * b, tiles);
    return NULL;
}

const char *lz_cpu_adaptive_avg_pool_blocked(const lz_program *p, const lz_instr *s,
                                             void *const *ptrs)
{
    const pgeom g = make_pgeom(&p->values[s->in[0]], &p->values[s->out], s, 0);
    const int64_t b = p->values[s->in[0]].block;
    if (!takes_block(&p->values[s->out], b)) return mixed;
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    const int64_t per_out = (g.H / g.OH + 2) * (g.W / g.OW + 2);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, per_out))
    for (int64_t pl = 0; pl < g.planes / b; pl++)
        FOR_BLOCK(b, adaptive_avg_plane, &g, x + pl * g.H * g.W * b, y + pl * g.OH * g.OW * b);
    return NULL;
}

const char *lz_cpu_adaptive_avg_pool_grad_blocked(const lz_program *p, const lz_instr *s,
                                                  void *const *ptrs)
{
    const pgeom g = make_pgeom(&p->values[s->out], &p->values[s->in[0]], s, 0);
    const int64_t b = p->values[s->out].block;
    if (!takes_block(&p->values[s->in[0]], b)) return mixed;
    const float *gy = ptrs[s->in[0]];
    float *dx = ptrs[s->out];
    const int64_t per_out = (g.H / g.OH + 2) * (g.W / g.OW + 2);
    #pragma omp parallel for schedule(static) if (pool_parallel(&g, per_out))
    for (int64_t pl = 0; pl < g.planes / b; pl++)
        FOR_BLOCK(b, adaptive_avg_grad_plane, &g, gy + pl * g.OH * g.OW * b,
                  dx + pl * g.H * g.W * b);
    return NULL;
}
