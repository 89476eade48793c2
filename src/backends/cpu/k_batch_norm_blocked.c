/* CPU kernels for fused training-mode batch norm (k_batch_norm.c) when x
 * is channel-blocked (lz_value.block = b: [N, C/b, H, W, b]). g and the
 * 4-d result are blocked as x is; the statistics, eps, weight and bias
 * stay plain. A folded activation's mask is recomputed (bn_act.h).
 *
 * A block's b channels sit side by side at each pixel, so the loops walk
 * pixels with one channel a lane, the per-channel constants and sums of a
 * block held in vector registers. The element-wise kernels compute each
 * element with the plain kernels' expression, in their order, so they
 * give the same bits; the folded activation's gradient is taken element
 * by element on the way, so no scratch row is needed. The sums add at
 * most CHUNK pixels of a lane in f32 before moving them into double,
 * about what the plain kernels' eight-lane row sums hold in f32.
 *
 * Lanes go in groups of at most LANES. Blocks of 16 and 8 (oneDNN's)
 * get loops of a constant width, which vectorise; another width runs the
 * same loops with a variable one. */
#include <math.h>

#include "backends/cpu/bn_act.h"
#include "backends/cpu/k_batch_norm_blocked.h"

#define PAR_MIN 32768   /* as in k_batch_norm.c */
#define LANES 16        /* the widest lane group: two AVX2 registers */
#define CHUNK 64        /* pixels a lane sums in f32 before they go into double */

typedef struct bn_dims {
    int64_t N, C, S;   /* S = H * W */
    int64_t B, CB;     /* C = CB blocks of B channels */
} bn_dims;

/* The dims, or a message when the step's operands are not in one layout:
   x [N, C, H, W] with C a multiple of its block, and values vs blocked
   as x is (a layout pass that got this wrong would otherwise read
   channels as pixels without a word). */
static const char *dims_of(const lz_program *p, const lz_instr *s, const int *vs, int nv,
                           bn_dims *d)
{
    const lz_value *x = &p->values[s->in[0]];
    if (x->ndim != 4 || x->shape[1] % x->block)
        return "batch_norm: blocked x is not [N, C, H, W] with C a multiple of the block";
    for (int k = 0; k < nv; k++)
        if (p->values[vs[k]].block != x->block) return "batch_norm: operands blocked unlike x";
    *d = (bn_dims){x->shape[0], x->shape[1], x->shape[2] * x->shape[3], x->block,
                   x->shape[1] / x->block};
    return NULL;
}

static inline int group_width(int B, int l0) { return B - l0 < LANES ? B - l0 : LANES; }

static inline void flush(float *a, double *acc, int L)
{
    for (int k = 0; k < L; k++) {
        acc[k] += a[k];
        a[k] = 0;
    }
}

/* ---- forward ------------------------------------------------------------ */

/* acc = per lane, sum x over every sample and pixel (m NULL) or sum
   (x - m)^2. x is the group's first lane in sample 0; sample n's pixels
   start n * ns later, B apart. */
static inline void lane_sums(const float *x, const bn_dims *d, int64_t ns, int B, int L,
                             const float *restrict m, double *restrict acc)
{
    float a[LANES] = {0};
    int64_t held = 0;   /* pixels in a */
    for (int k = 0; k < L; k++) acc[k] = 0;
    /* a partial holds CHUNK pixels at most: a long sample's go in chunks,
       short samples share one */
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t i0 = 0; i0 < d->S; i0 += CHUNK) {
            const int64_t len = d->S - i0 < CHUNK ? d->S - i0 : CHUNK;
            const float *xp = x + n * ns + i0 * B;
            if (held + len > CHUNK) {
                flush(a, acc, L);
                held = 0;
            }
            if (m)
                for (int64_t i = 0; i < len; i++)
                    for (int k = 0; k < L; k++) {
                        const float v = xp[i * B + k] - m[k];
                        a[k] += v * v;
                    }
            else
                for (int64_t i = 0; i < len; i++)
                    for (int k = 0; k < L; k++) a[k] += xp[i * B + k];
            held += len;
        }
    flush(a, acc, L);
}

static inline void stats_block(const float *x, const bn_dims *d, int64_t cb, int B, float *st)
{
    const double M = (double)(d->N * d->S);
    for (int l0 = 0; l0 < B; l0 += LANES) {
        const int L = group_width(B, l0);
        const float *xg = x + cb * d->S * B + l0;
        const int64_t c0 = cb * B + l0;
        double acc[LANES];
        float mean[LANES];
        lane_sums(xg, d, d->CB * d->S * B, B, L, NULL, acc);
        for (int k = 0; k < L; k++) mean[k] = (float)(acc[k] / M);
        lane_sums(xg, d, d->CB * d->S * B, B, L, mean, acc);
        for (int k = 0; k < L; k++) {
            st[c0 + k] = mean[k];
            st[d->C + c0 + k] = (float)(acc[k] / M);
        }
    }
}

const char *lz_cpu_bn_stats_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    bn_dims d;
    const char *err = dims_of(p, s, NULL, 0, &d);
    if (err) return err;
    const float *x = ptrs[s->in[0]];
    float *st = ptrs[s->out];
    if (d.N * d.S == 0) {
        for (int64_t c = 0; c < 2 * d.C; c++) st[c] = NAN;   /* 0/0, as a mean over nothing */
        return NULL;
    }
    #pragma omp parallel for schedule(static) if (d.N * d.C * d.S > PAR_MIN && d.CB > 1)
    for (int64_t cb = 0; cb < d.CB; cb++) {
        if (d.B == 16) stats_block(x, &d, cb, 16, st);
        else if (d.B == 8) stats_block(x, &d, cb, 8, st);
        else stats_block(x, &d, cb, (int)d.B, st);
    }
    return NULL;
}

/* A block's lanes' constants: mean, 1/std, and the weight and bias y is
   computed with (1 and 0 without), the forward's also where a gradient
   recomputes y for a folded activation. */
typedef struct lanes {
    float m[LANES], is[LANES], wc[LANES], bc[LANES];
} lanes;

static inline void lanes_of(lanes *l, const bn_dims *d, int64_t c0, int L, const float *st,
                            float eps, const float *fw, const float *fb)
{
    for (int k = 0; k < L; k++) {
        const int64_t c = c0 + k;
        l->m[k] = st[c];
        l->is[k] = bn_inv_std(st, d->C, c, eps);
        l->wc[k] = fw ? fw[c] : 1.0f;
        l->bc[k] = fb ? fb[c] : 0.0f;
    }
}

/* One lane group of one sample's block; act is a constant where this is
   inlined, so each activation gets its own loop. The simd pragmas here and
   in grad_group: y may be x's memory, and without them the compiler
   checks for overlap at every pixel; an element reads only its own
   inputs, so the lanes are independent either way. */
static inline void apply_group(const float *x, float *y, int64_t S, int B, int L,
                               const lanes *l, int act, float lo, float hi)
{
    for (int64_t i = 0; i < S; i++)
        #pragma omp simd
        for (int k = 0; k < L; k++) {
            /* the plain kernel's order: ((x - mean) * invstd) * w + b */
            float v = bn_pre_act(x[i * B + k], l->m[k], l->is[k], l->wc[k], l->bc[k]);
            if (act == LZ_BN_ACT_RELU) v = relu_1(v);
            else if (act == LZ_BN_ACT_HARDTANH) v = hardtanh_1(v, lo, hi);
            y[i * B + k] = v;
        }
}

/* x and y at the block's first pixel in one sample */
static inline void apply_block(const lz_instr *s, const bn_dims *d, int64_t cb, int B,
                               const float *x, float *y, const float *st, float eps,
                               const float *w, const float *b)
{
    const float lo = s->fattr[0], hi = s->fattr[1];
    for (int l0 = 0; l0 < B; l0 += LANES) {
        const int L = group_width(B, l0);
        lanes l;
        lanes_of(&l, d, cb * B + l0, L, st, eps, w, b);
        switch (s->iattr[2]) {
        case LZ_BN_ACT_RELU:
            apply_group(x + l0, y + l0, d->S, B, L, &l, LZ_BN_ACT_RELU, lo, hi);
            break;
        case LZ_BN_ACT_HARDTANH:
            apply_group(x + l0, y + l0, d->S, B, L, &l, LZ_BN_ACT_HARDTANH, lo, hi);
            break;
        default:
            apply_group(x + l0, y + l0, d->S, B, L, &l, LZ_BN_ACT_NONE, lo, hi);
        }
    }
}

const char *lz_cpu_bn_apply_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    bn_dims d;
    const char *err = dims_of(p, s, &s->out, 1, &d);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const int has_w = s->iattr[0] != 0, has_b = s->iattr[1] != 0;
    const float *w = has_w ? ptrs[s->in[3]] : NULL;
    const float *b = has_b ? ptrs[s->in[3 + has_w]] : NULL;
    /* bf16: autocast's cast for the next convolution, folded in by the
       compiler (compile/fuse_bn_act.c); computed a tile of pixels at a time */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int64_t planes = d.N * d.CB, plane = d.S * d.B;
    const int64_t tile_px = bf16 ? LZ_BN_TILE / d.B : d.S;
    #pragma omp parallel for schedule(static) if (planes * plane > PAR_MIN && planes > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t cb = pl % d.CB;
        float tile[LZ_BN_TILE];
        for (int64_t i0 = 0; i0 < d.S; i0 += tile_px) {
            bn_dims dt = d;
            dt.S = d.S - i0 < tile_px ? d.S - i0 : tile_px;
            const int64_t at = pl * plane + i0 * d.B;
            float *o = bf16 ? tile : (float *)ptrs[s->out] + at;
            if (d.B == 16) apply_block(s, &dt, cb, 16, x + at, o, st, eps, w, b);
            else if (d.B == 8) apply_block(s, &dt, cb, 8, x + at, o, st, eps, w, b);
            else apply_block(s, &dt, cb, (int)d.B, x + at, o, st, eps, w, b);
            if (bf16) bn_store_bf16(ptrs[s->out], at, tile, dt.S * d.B);
        }
    }
    return NULL;
}

/* ---- backward ----------------------------------------------------------- */

/* g at element j of lane k, through the folded activation's gradient */
static inline float lane_grad(int act, const lanes *l, int k, float x, float g, float lo, float hi)
{
    if (act == LZ_BN_ACT_NONE) return g;
    return bn_act_grad(act, bn_pre_act(x, l->m[k], l->is[k], l->wc[k], l->bc[k]), g, lo, hi);
}

/* Per lane: sg = sum g, sgx = sum g * (x - m), g through the activation
   first. Pointers and ns as lane_sums'. */
static inline void gstats_group(const float *x, const float *g, const bn_dims *d, int64_t ns,
                                int B, int L, const lanes *l, int act, float lo, float hi,
                                double *restrict sg, double *restrict sgx)
{
    float a[LANES] = {0}, ax[LANES] = {0};
    int64_t held = 0;
    for (int k = 0; k < L; k++) sg[k] = sgx[k] = 0;
    /* a partial holds CHUNK pixels at most: a long sample's go in chunks,
       short samples share one */
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t i0 = 0; i0 < d->S; i0 += CHUNK) {
            const int64_t len = d->S - i0 < CHUNK ? d->S - i0 : CHUNK;
            const int64_t off = n * ns + i0 * B;
            const float *xp = x + off, *gp = g + off;
            if (held + len > CHUNK) {
                flush(a, sg, L);
                flush(ax, sgx, L);
                held = 0;
            }
            for (int64_t i = 0; i < len; i++)
                for (int k = 0; k < L; k++) {
                    const int64_t j = i * B + k;
                    const float gk = lane_grad(act, l, k, xp[j], gp[j], lo, hi);
                    a[k] += gk;
                    ax[k] += gk * (xp[j] - l->m[k]);
                }
            held += len;
        }
    flush(a, sg, L);
    flush(ax, sgx, L);
}

static inline void gstats_block(const lz_instr *s, const bn_dims *d, int64_t cb, int B,
                                const float *x, const float *g, const float *st, float eps,
                                int act, const float *fw, const float *fb, float *gs)
{
    const float lo = s->fattr[0], hi = s->fattr[1];
    for (int l0 = 0; l0 < B; l0 += LANES) {
        const int L = group_width(B, l0);
        const int64_t c0 = cb * B + l0, at = cb * d->S * B + l0, ns = d->CB * d->S * B;
        double sg[LANES], sgx[LANES];
        lanes l;
        lanes_of(&l, d, c0, L, st, eps, fw, fb);
        if (act == LZ_BN_ACT_RELU)
            gstats_group(x + at, g + at, d, ns, B, L, &l, LZ_BN_ACT_RELU, lo, hi, sg, sgx);
        else if (act == LZ_BN_ACT_HARDTANH)
            gstats_group(x + at, g + at, d, ns, B, L, &l, LZ_BN_ACT_HARDTANH, lo, hi, sg, sgx);
        else
            gstats_group(x + at, g + at, d, ns, B, L, &l, LZ_BN_ACT_NONE, lo, hi, sg, sgx);
        for (int k = 0; k < L; k++) {
            const int64_t c = c0 + k;
            gs[c] = (float)sg[k];
            gs[d->C + c] = (float)(sgx[k] * l.is[k]);
        }
    }
}

/* gstats[c] = sum g, gstats[C + c] = sum g * xhat */
const char *lz_cpu_bn_grad_stats_blocked(const lz_program *p, const lz_instr *s,
                                         void *const *ptrs)
{
    const float *fw, *fb;
    const int act = bn_folded_act(s, ptrs, &fw, &fb);
    const int vs[1] = {s->in[3]};
    bn_dims d;
    const char *err = dims_of(p, s, vs, 1, &d);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float eps = *(const float *)ptrs[s->in[2]];
    float *gs = ptrs[s->out];
    #pragma omp parallel for schedule(static) if (d.N * d.C * d.S > PAR_MIN && d.CB > 1)
    for (int64_t cb = 0; cb < d.CB; cb++) {
        if (d.B == 16) gstats_block(s, &d, cb, 16, x, g, st, eps, act, fw, fb, gs);
        else if (d.B == 8) gstats_block(s, &d, cb, 8, x, g, st, eps, act, fw, fb, gs);
        else gstats_block(s, &d, cb, (int)d.B, x, g, st, eps, act, fw, fb, gs);
    }
    return NULL;
}

static inline void grad_group(const float *x, const float *g, float *o, int64_t S, int B, int L,
                              const lanes *l, const float *restrict a,
                              const float *restrict mg, const float *restrict mgx, int act,
                              float lo, float hi)
{
    for (int64_t i = 0; i < S; i++)
        #pragma omp simd
        for (int k = 0; k < L; k++) {
            const int64_t j = i * B + k;
            const float gk = lane_grad(act, l, k, x[j], g[j], lo, hi);
            o[j] = a[k] * (gk - mg[k] - (x[j] - l->m[k]) * l->is[k] * mgx[k]);
        }
}

/* Pointers at the block's first pixel in one sample. */
static inline void grad_block(const lz_instr *s, const bn_dims *d, int64_t cb, int B,
                              const float *x, const float *g, float *o, const float *st,
                              const float *gs, const float *w, float eps, float inv_m, int act,
                              const float *fw, const float *fb)
{
    const float lo = s->fattr[0], hi = s->fattr[1];
    for (int l0 = 0; l0 < B; l0 += LANES) {
        const int L = group_width(B, l0);
        lanes l;
        float a[LANES], mg[LANES], mgx[LANES];
        lanes_of(&l, d, cb * B + l0, L, st, eps, fw, fb);
        for (int k = 0; k < L; k++) {
            const int64_t c = cb * B + l0 + k;
            a[k] = (w ? w[c] : 1.0f) * l.is[k];
            mg[k] = gs[c] * inv_m;
            mgx[k] = gs[d->C + c] * inv_m;
        }
        if (act == LZ_BN_ACT_RELU)
            grad_group(x + l0, g + l0, o + l0, d->S, B, L, &l, a, mg, mgx, LZ_BN_ACT_RELU, lo, hi);
        else if (act == LZ_BN_ACT_HARDTANH)
            grad_group(x + l0, g + l0, o + l0, d->S, B, L, &l, a, mg, mgx, LZ_BN_ACT_HARDTANH,
                       lo, hi);
        else
            grad_group(x + l0, g + l0, o + l0, d->S, B, L, &l, a, mg, mgx, LZ_BN_ACT_NONE, lo, hi);
    }
}

/* dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)) */
const char *lz_cpu_bn_grad_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const float *fw, *fb;
    const int act = bn_folded_act(s, ptrs, &fw, &fb);
    const int vs[2] = {s->out, s->in[3]};
    bn_dims d;
    const char *err = dims_of(p, s, vs, 2, &d);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float *gs = ptrs[s->in[4]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const float *w = s->iattr[0] ? ptrs[s->in[5]] : NULL;
    /* bf16: autocast's cast for the convolution's backward, folded in by
       the compiler (compile/fuse_bn_act.c); a tile of pixels at a time */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int64_t planes = d.N * d.CB, plane = d.S * d.B;
    const int64_t tile_px = bf16 ? LZ_BN_TILE / d.B : d.S;
    const float inv_m = 1.0f / (float)(d.N * d.S);
    #pragma omp parallel for schedule(static) if (planes * plane > PAR_MIN && planes > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t cb = pl % d.CB;
        float tile[LZ_BN_TILE];
        for (int64_t i0 = 0; i0 < d.S; i0 += tile_px) {
            bn_dims dt = d;
            dt.S = d.S - i0 < tile_px ? d.S - i0 : tile_px;
            const int64_t at = pl * plane + i0 * d.B;
            float *o = bf16 ? tile : (float *)ptrs[s->out] + at;
            if (d.B == 16)
                grad_block(s, &dt, cb, 16, x + at, g + at, o, st, gs, w, eps, inv_m, act, fw, fb);
            else if (d.B == 8)
                grad_block(s, &dt, cb, 8, x + at, g + at, o, st, gs, w, eps, inv_m, act, fw, fb);
            else
                grad_block(s, &dt, cb, (int)d.B, x + at, g + at, o, st, gs, w, eps, inv_m, act,
                           fw, fb);
            if (bf16) bn_store_bf16(ptrs[s->out], at, tile, dt.S * d.B);
        }
    }
    return NULL;
}
