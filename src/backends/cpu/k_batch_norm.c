/* CPU kernels for fused training-mode batch norm over axis 1 of x
 * [N, C, S...] (S: the product of the trailing axes).
 *
 * The composed form costs about five full passes over the activation
 * forward and a dozen backward; these take two each: statistics then
 * normalise, and gradient sums then the input gradient. Channel sums are
 * kept in double across rows (a row's S elements add up in eight f32
 * lanes first, so the loop vectorises), so they are at least as exact as
 * the composed reductions. The formulas follow torch's batch_norm and
 * batch_norm_backward.
 *
 * Layouts: a channel is N rows of S contiguous floats, C*S apart. When S
 * is tiny (BatchNorm1d on [N, C]) that row walk is all overhead, so the
 * sums walk samples in order and channels inside instead. A channel-blocked
 * x (lz_value.block) goes to k_batch_norm_blocked.c, a channels-last one
 * to k_batch_norm_nhwc.c. */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/bn_act.h"
#include "backends/cpu/k_batch_norm_blocked.h"
#include "backends/cpu/k_batch_norm_nhwc.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/scratch.h"

#define PAR_MIN 32768   /* below this many elements a parallel region costs more than it saves */
#define SMALL_S 16      /* below this row length the sums go sample by sample */

typedef struct bn_dims { int64_t N, C, S; } bn_dims;

static bn_dims dims_of(const lz_value *x)
{
    bn_dims d = {x->shape[0], x->shape[1], 1};
    for (int i = 2; i < x->ndim; i++) d.S *= x->shape[i];
    return d;
}

static double row_sum(const float *x, int64_t n)
{
    float a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += x[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) s += x[i];
    return s;
}

/* sum (x - m)^2 */
static double row_sqdev(const float *x, int64_t n, float m)
{
    float a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) { float d = x[i + k] - m; a[k] += d * d; }
    double s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) { double d = x[i] - m; s += d * d; }
    return s;
}

/* sum g * (x - m) */
static double row_gdev(const float *g, const float *x, int64_t n, float m)
{
    float a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += g[i + k] * (x[i + k] - m);
    double s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) s += (double)g[i] * (x[i] - m);
    return s;
}

/* A gradient step's folded activation (compile/fuse_bn_act.c): act 0
   without one. */
typedef struct bn_fold {
    int act;
    const float *w, *b;      /* the forward's, NULL when it had none */
    float lo, hi;
} bn_fold;

static bn_fold fold_of(const lz_instr *s, void *const *ptrs)
{
    bn_fold f = {0};
    f.act = bn_folded_act(s, ptrs, &f.w, &f.b);
    f.lo = s->fattr[0];
    f.hi = s->fattr[1];
    return f;
}

/* out = g through the activation's gradient at y recomputed from channel
   c's row x (bn_act.h); out may be g's row. */
static void act_grad_row(const bn_fold *f, int64_t c, const float *x, const float *g, int64_t n,
                         float m, float is, float *out)
{
    const float wc = f->w ? f->w[c] : 1.0f, bc = f->b ? f->b[c] : 0.0f;
    const float lo = f->lo, hi = f->hi;
    if (f->act == LZ_BN_ACT_RELU)
        for (int64_t i = 0; i < n; i++)
            out[i] = bn_act_grad(LZ_BN_ACT_RELU, bn_pre_act(x[i], m, is, wc, bc), g[i], lo, hi);
    else
        for (int64_t i = 0; i < n; i++)
            out[i] = bn_act_grad(LZ_BN_ACT_HARDTANH, bn_pre_act(x[i], m, is, wc, bc), g[i], lo, hi);
}

/* ---- forward ------------------------------------------------------------ */

static const char *k_bn_stats(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (lz_cpu_bn_nhwc(&p->values[s->in[0]])) return lz_cpu_bn_stats_nhwc(p, s, ptrs);
    if (p->values[s->in[0]].block) return lz_cpu_bn_stats_blocked(p, s, ptrs);
    bn_dims d = dims_of(&p->values[s->in[0]]);
    const float *x = ptrs[s->in[0]];
    float *st = ptrs[s->out];
    const int64_t M = d.N * d.S, total = M * d.C;
    if (M == 0) {
        for (int64_t c = 0; c < 2 * d.C; c++) st[c] = NAN;   /* 0/0, as a mean over nothing */
        return NULL;
    }
    if (d.S < SMALL_S) {
        double *acc = calloc((size_t)d.C, sizeof *acc);
        if (!acc) return "batch_norm_stats: out of memory";
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t c = 0; c < d.C; c++)
                for (int64_t i = 0; i < d.S; i++) acc[c] += x[(n * d.C + c) * d.S + i];
        for (int64_t c = 0; c < d.C; c++) { st[c] = (float)(acc[c] / (double)M); acc[c] = 0; }
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t c = 0; c < d.C; c++)
                for (int64_t i = 0; i < d.S; i++) {
                    double v = (double)x[(n * d.C + c) * d.S + i] - st[c];
                    acc[c] += v * v;
                }
        for (int64_t c = 0; c < d.C; c++) st[d.C + c] = (float)(acc[c] / (double)M);
        free(acc);
        return NULL;
    }
    #pragma omp parallel for schedule(static) if (total > PAR_MIN && d.C > 1)
    for (int64_t c = 0; c < d.C; c++) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < d.N; n++) sum += row_sum(x + (n * d.C + c) * d.S, d.S);
        float mean = (float)(sum / (double)M);
        for (int64_t n = 0; n < d.N; n++) sq += row_sqdev(x + (n * d.C + c) * d.S, d.S, mean);
        st[c] = mean;
        st[d.C + c] = (float)(sq / (double)M);
    }
    return NULL;
}

/* y[0..n) from x[0..n): normalised, scaled, shifted, then the activation
   the compiler folded in */
static void apply_row(const float *x, float *y, int64_t n, float m, float is, float wc, float bc,
                      int act, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) y[i] = bn_pre_act(x[i], m, is, wc, bc);
    if (act == LZ_BN_ACT_RELU)
        for (int64_t i = 0; i < n; i++) y[i] = relu_1(y[i]);
    else if (act == LZ_BN_ACT_HARDTANH)
        for (int64_t i = 0; i < n; i++) y[i] = hardtanh_1(y[i], lo, hi);
}

static const char *k_bn_apply(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (lz_cpu_bn_nhwc(&p->values[s->in[0]])) return lz_cpu_bn_apply_nhwc(p, s, ptrs);
    if (p->values[s->in[0]].block) return lz_cpu_bn_apply_blocked(p, s, ptrs);
    bn_dims d = dims_of(&p->values[s->in[0]]);
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const int has_w = s->iattr[0] != 0, has_b = s->iattr[1] != 0;
    const float *w = has_w ? ptrs[s->in[3]] : NULL;
    const float *b = has_b ? ptrs[s->in[3 + has_w]] : NULL;
    /* bf16: autocast's cast for the next convolution, folded in by the
       compiler (compile/fuse_bn_act.c) */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int64_t planes = d.N * d.C, tile_n = bf16 ? LZ_BN_TILE : d.S;
    const int act = (int)s->iattr[2];
    const float lo = s->fattr[0], hi = s->fattr[1];
    #pragma omp parallel for schedule(static) if (planes * d.S > PAR_MIN && planes > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t c = pl % d.C;
        /* the composed form's order: ((x - mean) * invstd) * w + b */
        const float m = st[c], is = bn_inv_std(st, d.C, c, eps);
        const float wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
        float tile[LZ_BN_TILE];
        for (int64_t i0 = 0; i0 < d.S; i0 += tile_n) {
            const int64_t n = d.S - i0 < tile_n ? d.S - i0 : tile_n, at = pl * d.S + i0;
            float *o = bf16 ? tile : (float *)ptrs[s->out] + at;
            apply_row(x + at, o, n, m, is, wc, bc, act, lo, hi);
            if (bf16) bn_store_bf16(ptrs[s->out], at, tile, n);
        }
    }
    return NULL;
}

/* ---- backward ----------------------------------------------------------- */

/* gstats[c] = sum g, gstats[C + c] = sum g * xhat */
static const char *k_bn_grad_stats(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (lz_cpu_bn_nhwc(&p->values[s->in[0]])) return lz_cpu_bn_grad_stats_nhwc(p, s, ptrs);
    if (p->values[s->in[0]].block) return lz_cpu_bn_grad_stats_blocked(p, s, ptrs);
    bn_dims d = dims_of(&p->values[s->in[0]]);
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float eps = *(const float *)ptrs[s->in[2]];
    float *gs = ptrs[s->out];
    const bn_fold f = fold_of(s, ptrs);
    const int64_t total = d.N * d.C * d.S;
    if (d.S < SMALL_S) {
        double *acc = calloc((size_t)(2 * d.C), sizeof *acc);
        if (!acc) return "batch_norm_grad_stats: out of memory";
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t c = 0; c < d.C; c++)
                for (int64_t i = 0; i < d.S; i++) {
                    int64_t k = (n * d.C + c) * d.S + i;
                    float gk = g[k];
                    if (f.act) act_grad_row(&f, c, x + k, g + k, 1, st[c], bn_inv_std(st, d.C, c, eps), &gk);
                    acc[c] += gk;
                    acc[d.C + c] += (double)gk * (x[k] - st[c]);
                }
        for (int64_t c = 0; c < d.C; c++) {
            gs[c] = (float)acc[c];
            gs[d.C + c] = (float)(acc[d.C + c] * bn_inv_std(st, d.C, c, eps));
        }
        free(acc);
        return NULL;
    }
    int oom = 0;
    #pragma omp parallel for schedule(static) if (total > PAR_MIN && d.C > 1) reduction(|:oom)
    for (int64_t c = 0; c < d.C; c++) {
        double sg = 0, sgx = 0;
        const float m = st[c];
        /* a masked row is made in the thread's scratch, in cache, then summed */
        float *row = f.act ? lz_cpu_scratch(LZ_SCRATCH_PARTIALS, sizeof(float) * (size_t)d.S) : NULL;
        if (f.act && !row) {
            oom = 1;
            continue;
        }
        for (int64_t n = 0; n < d.N; n++) {
            const int64_t off = (n * d.C + c) * d.S;
            const float *gr = g + off;
            if (f.act) {
                act_grad_row(&f, c, x + off, gr, d.S, m, bn_inv_std(st, d.C, c, eps), row);
                gr = row;
            }
            sg += row_sum(gr, d.S);
            sgx += row_gdev(gr, x + off, d.S, m);
        }
        gs[c] = (float)sg;
        gs[d.C + c] = (float)(sgx * bn_inv_std(st, d.C, c, eps));
    }
    return oom ? "batch_norm_grad_stats: out of memory" : NULL;
}

/* dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)) */
static const char *k_bn_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (lz_cpu_bn_nhwc(&p->values[s->in[0]])) return lz_cpu_bn_grad_nhwc(p, s, ptrs);
    if (p->values[s->in[0]].block) return lz_cpu_bn_grad_blocked(p, s, ptrs);
    bn_dims d = dims_of(&p->values[s->in[0]]);
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float *gs = ptrs[s->in[4]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const float *w = s->iattr[0] ? ptrs[s->in[5]] : NULL;
    const bn_fold f = fold_of(s, ptrs);
    /* bf16: autocast's cast for the convolution's backward, folded in by
       the compiler (compile/fuse_bn_act.c); a tile at a time */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int64_t planes = d.N * d.C, tile_n = bf16 ? LZ_BN_TILE : d.S;
    const float inv_m = 1.0f / (float)(d.N * d.S);
    #pragma omp parallel for schedule(static) if (planes * d.S > PAR_MIN && planes > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t c = pl % d.C;
        const float m = st[c], is = bn_inv_std(st, d.C, c, eps);
        const float a = (w ? w[c] : 1.0f) * is;
        const float mg = gs[c] * inv_m, mgx = gs[d.C + c] * inv_m;
        float tile[LZ_BN_TILE];
        for (int64_t i0 = 0; i0 < d.S; i0 += tile_n) {
            const int64_t n = d.S - i0 < tile_n ? d.S - i0 : tile_n, at = pl * d.S + i0;
            const float *xr = x + at, *gr = g + at;
            float *o = bf16 ? tile : (float *)ptrs[s->out] + at;
            if (f.act) {   /* the masked gradient goes through the output row */
                act_grad_row(&f, c, xr, gr, n, m, is, o);
                gr = o;
            }
            for (int64_t i = 0; i < n; i++) o[i] = a * (gr[i] - mg - (xr[i] - m) * is * mgx);
            if (bf16) bn_store_bf16(ptrs[s->out], at, tile, n);
        }
    }
    return NULL;
}

lz_kernel lz_cpu_batch_norm_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_BATCH_NORM_STATS: return k_bn_stats;
    case LZ_OP_BATCH_NORM: return k_bn_apply;
    case LZ_OP_BATCH_NORM_GRAD_STATS: return k_bn_grad_stats;
    case LZ_OP_BATCH_NORM_GRAD: return k_bn_grad;
    default: return NULL;
    }
}
