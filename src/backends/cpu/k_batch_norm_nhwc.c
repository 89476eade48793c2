/* CPU kernels for fused training-mode batch norm (k_batch_norm.c) when x
 * is channels-last (lz_value.block = C, [N, H, W, C]: the layout AMX's
 * convolutions take, compile/layout_plan.c). g and the 4-d result are
 * channels-last as x is; the statistics, eps, weight and bias stay plain.
 * A folded activation's mask is recomputed (bn_act.h).
 *
 * x is N*H*W rows of C channels. The loops walk rows with the channels
 * inside and the per-channel constants and sums in arrays, so they
 * vectorise over channels and read memory in order; the channel-blocked
 * kernels' lane groups, run on one block of C channels, read 64 bytes of
 * each row a pass and were slower (docs/performance.md, "Batch norm"). Element-wise results use the plain kernels' expressions, so
 * they give the same bits. A channel's sum adds CHUNK rows in f32 before
 * moving them into double, as the other kernels do; rows go in pieces of
 * PIECE, each summed on its own and the pieces added in order, so threads
 * share the sums and the result does not depend on how many there are. */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/bn_act.h"
#include "backends/cpu/k_batch_norm_nhwc.h"

#define PAR_MIN 32768   /* as in k_batch_norm.c */
#define CHUNK 64        /* rows a channel sums in f32 before they go into double */
#define PIECE 256       /* rows summed apart from the others (a multiple of CHUNK) */

/* C channels (at most LZ_BN_NHWC_MAX_C: operand_layouts.c keeps wider x
   plain) in R rows, or a message when the operands are not all
   channels-last */
static const char *dims_of(const lz_program *p, const lz_instr *s, const int *vs, int nv,
                           int64_t *C, int64_t *R)
{
    const lz_value *x = &p->values[s->in[0]];
    if (x->ndim != 4 || x->block != x->shape[1] || x->shape[1] > LZ_BN_NHWC_MAX_C)
        return "batch_norm: channels-last x is not [N, H, W, C] with C at most LZ_BN_NHWC_MAX_C";
    for (int k = 0; k < nv; k++)
        if (p->values[vs[k]].block != x->block) return "batch_norm: operands laid out unlike x";
    *C = x->shape[1];
    *R = x->shape[0] * x->shape[2] * x->shape[3];
    return NULL;
}

/* Per-channel constants of the forward expression (bn_pre_act). On the
   heap, not the stack: 4096 channels of them and of the gradient's
   factors or sums came to 112-160 KB on the thread that runs the step,
   which may be a caller's recording thread with a small stack. */
typedef struct consts {
    float *m, *is, *wc, *bc;
} consts;

/* k's arrays and `more` further per-channel arrays after them in one
   block (free k->m), or NULL when out of memory */
static float *consts_of(consts *k, int64_t C, int more, const float *st, float eps,
                        const float *w, const float *b)
{
    float *mem = malloc(sizeof(float) * (size_t)(C ? C : 1) * (size_t)(4 + more));
    if (!mem) return NULL;
    k->m = mem;
    k->is = mem + C;
    k->wc = mem + 2 * C;
    k->bc = mem + 3 * C;
    for (int64_t c = 0; c < C; c++) {
        k->m[c] = st[c];
        k->is[c] = bn_inv_std(st, C, c, eps);
        k->wc[c] = w ? w[c] : 1.0f;
        k->bc[c] = b ? b[c] : 0.0f;
    }
    return mem + 4 * C;
}

/* The pieces' sums, added in order: out[c] = sum over pieces of part[c] */
static void add_pieces(const double *part, int64_t pieces, int64_t C, int64_t stride,
                       double *out)
{
    for (int64_t c = 0; c < C; c++) out[c] = 0;
    for (int64_t q = 0; q < pieces; q++)
        for (int64_t c = 0; c < C; c++) out[c] += part[q * stride + c];
}

/* Rows of a bf16 result rounded together: LZ_BN_TILE values, or one row
   when it is wider */
static int64_t tile_rows(int64_t C)
{
    return C < LZ_BN_TILE ? LZ_BN_TILE / C : 1;
}

/* ---- forward ------------------------------------------------------------ */

/* acc[c] = sum over rows [r0, r1) of x (m NULL) or of (x - m)^2 */
static void sum_rows(const float *x, int64_t C, int64_t r0, int64_t r1, const float *m,
                     double *restrict acc)
{
    float a[LZ_BN_NHWC_MAX_C];
    for (int64_t c = 0; c < C; c++) acc[c] = 0;
    for (int64_t i0 = r0; i0 < r1; i0 += CHUNK) {
        const int64_t i1 = r1 - i0 < CHUNK ? r1 : i0 + CHUNK;
        for (int64_t c = 0; c < C; c++) a[c] = 0;
        for (int64_t i = i0; i < i1; i++) {
            const float *xr = x + i * C;
            if (m)
                for (int64_t c = 0; c < C; c++) {
                    const float v = xr[c] - m[c];
                    a[c] += v * v;
                }
            else
                for (int64_t c = 0; c < C; c++) a[c] += xr[c];
        }
        for (int64_t c = 0; c < C; c++) acc[c] += a[c];
    }
}

const char *lz_cpu_bn_stats_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    int64_t C, R;
    const char *err = dims_of(p, s, NULL, 0, &C, &R);
    if (err) return err;
    const float *x = ptrs[s->in[0]];
    float *st = ptrs[s->out];
    if (R == 0) {
        for (int64_t c = 0; c < 2 * C; c++) st[c] = NAN;   /* 0/0, as a mean over nothing */
        return NULL;
    }
    const int64_t pieces = (R + PIECE - 1) / PIECE;
    /* the pieces' sums, their total, and the mean */
    double *part = malloc(sizeof *part * (size_t)((pieces + 1) * C) + sizeof(float) * (size_t)C);
    if (!part) return "batch_norm: out of memory for the statistics' partial sums";
    double *tot = part + pieces * C;
    float *mean = (float *)(tot + C);
    const double M = (double)R;
    for (int pass = 0; pass < 2; pass++) {
        const float *m = pass ? mean : NULL;
        #pragma omp parallel for schedule(static) if (R * C > PAR_MIN && pieces > 1)
        for (int64_t q = 0; q < pieces; q++)
            sum_rows(x, C, q * PIECE, q * PIECE + PIECE < R ? q * PIECE + PIECE : R, m,
                     part + q * C);
        add_pieces(part, pieces, C, C, tot);
        for (int64_t c = 0; c < C; c++) {
            if (pass) st[C + c] = (float)(tot[c] / M);
            else st[c] = mean[c] = (float)(tot[c] / M);
        }
    }
    free(part);
    return NULL;
}

/* rows of x into y (n rows); act is a constant where this is inlined */
static inline void apply_rows(const float *x, float *y, int64_t n, int64_t C, const consts *k,
                              int act, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            /* the plain kernel's order: ((x - mean) * invstd) * w + b */
            float v = bn_pre_act(x[i * C + c], k->m[c], k->is[c], k->wc[c], k->bc[c]);
            if (act == LZ_BN_ACT_RELU) v = relu_1(v);
            else if (act == LZ_BN_ACT_HARDTANH) v = hardtanh_1(v, lo, hi);
            y[i * C + c] = v;
        }
}

const char *lz_cpu_bn_apply_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    int64_t C, R;
    const char *err = dims_of(p, s, &s->out, 1, &C, &R);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const int has_w = s->iattr[0] != 0, has_b = s->iattr[1] != 0;
    consts k;
    if (!consts_of(&k, C, 0, st, eps, has_w ? ptrs[s->in[3]] : NULL,
                   has_b ? ptrs[s->in[3 + has_w]] : NULL))
        return "batch_norm: out of memory for the per-channel constants";
    const consts *kp = &k;
    /* bf16: autocast's cast for the next convolution, folded in by the
       compiler (compile/fuse_bn_act.c); a tile of rows at a time */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int act = (int)s->iattr[2];
    const float lo = s->fattr[0], hi = s->fattr[1];
    const int64_t rows = tile_rows(C), tiles = (R + rows - 1) / rows;
    #pragma omp parallel for schedule(static) if (R * C > PAR_MIN && tiles > 1)
    for (int64_t t = 0; t < tiles; t++) {
        float tile[LZ_BN_NHWC_MAX_C];
        const int64_t r0 = t * rows, n = R - r0 < rows ? R - r0 : rows;
        float *o = bf16 ? tile : (float *)ptrs[s->out] + r0 * C;
        if (act == LZ_BN_ACT_RELU) apply_rows(x + r0 * C, o, n, C, kp, LZ_BN_ACT_RELU, lo, hi);
        else if (act == LZ_BN_ACT_HARDTANH)
            apply_rows(x + r0 * C, o, n, C, kp, LZ_BN_ACT_HARDTANH, lo, hi);
        else apply_rows(x + r0 * C, o, n, C, kp, LZ_BN_ACT_NONE, lo, hi);
        if (bf16) bn_store_bf16(ptrs[s->out], r0 * C, tile, n * C);
    }
    free(k.m);
    return NULL;
}

/* ---- backward ----------------------------------------------------------- */

/* g at row i, channel c, through the folded activation's gradient */
static inline float row_grad(int act, const consts *k, int64_t c, float x, float g, float lo,
                             float hi)
{
    if (act == LZ_BN_ACT_NONE) return g;
    return bn_act_grad(act, bn_pre_act(x, k->m[c], k->is[c], k->wc[c], k->bc[c]), g, lo, hi);
}

/* Over rows [r0, r1): sg[c] = sum g, sgx[c] = sum g * (x - m), g through
   the activation first */
static inline void gsum_rows(const float *x, const float *g, int64_t C, int64_t r0, int64_t r1,
                             const consts *k, int act, float lo, float hi,
                             double *restrict sg, double *restrict sgx)
{
    float a[LZ_BN_NHWC_MAX_C], ax[LZ_BN_NHWC_MAX_C];
    for (int64_t c = 0; c < C; c++) sg[c] = sgx[c] = 0;
    for (int64_t i0 = r0; i0 < r1; i0 += CHUNK) {
        const int64_t i1 = r1 - i0 < CHUNK ? r1 : i0 + CHUNK;
        for (int64_t c = 0; c < C; c++) a[c] = ax[c] = 0;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t c = 0; c < C; c++) {
                const float xv = x[i * C + c];
                const float gk = row_grad(act, k, c, xv, g[i * C + c], lo, hi);
                a[c] += gk;
                ax[c] += gk * (xv - k->m[c]);
            }
        for (int64_t c = 0; c < C; c++) {
            sg[c] += a[c];
            sgx[c] += ax[c];
        }
    }
}

/* gstats[c] = sum g, gstats[C + c] = sum g * xhat */
const char *lz_cpu_bn_grad_stats_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const float *fw, *fb;
    const int act = bn_folded_act(s, ptrs, &fw, &fb);
    const int vs[1] = {s->in[3]};
    int64_t C, R;
    const char *err = dims_of(p, s, vs, 1, &C, &R);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float eps = *(const float *)ptrs[s->in[2]];
    float *gs = ptrs[s->out];
    const float lo = s->fattr[0], hi = s->fattr[1];
    consts k;
    if (!consts_of(&k, C, 0, st, eps, fw, fb))
        return "batch_norm: out of memory for the per-channel constants";
    const consts *kp = &k;
    const int64_t pieces = R ? (R + PIECE - 1) / PIECE : 1;
    /* the pieces' two sums, then their totals */
    double *part = calloc((size_t)((pieces + 1) * 2 * C), sizeof *part);
    if (!part) {
        free(k.m);
        return "batch_norm: out of memory for the gradient's partial sums";
    }
    double *sg = part + pieces * 2 * C, *sgx = sg + C;
    #pragma omp parallel for schedule(static) if (R * C > PAR_MIN && pieces > 1)
    for (int64_t q = 0; q < pieces; q++) {
        const int64_t r1 = q * PIECE + PIECE < R ? q * PIECE + PIECE : R;
        double *pg = part + q * 2 * C, *pgx = pg + C;
        if (act == LZ_BN_ACT_RELU)
            gsum_rows(x, g, C, q * PIECE, r1, kp, LZ_BN_ACT_RELU, lo, hi, pg, pgx);
        else if (act == LZ_BN_ACT_HARDTANH)
            gsum_rows(x, g, C, q * PIECE, r1, kp, LZ_BN_ACT_HARDTANH, lo, hi, pg, pgx);
        else gsum_rows(x, g, C, q * PIECE, r1, kp, LZ_BN_ACT_NONE, lo, hi, pg, pgx);
    }
    add_pieces(part, pieces, C, 2 * C, sg);
    add_pieces(part + C, pieces, C, 2 * C, sgx);
    for (int64_t c = 0; c < C; c++) {
        gs[c] = (float)sg[c];
        gs[C + c] = (float)(sgx[c] * k.is[c]);
    }
    free(part);
    free(k.m);
    return NULL;
}

/* The gradient's per-channel factors beside the forward's constants */
typedef struct gconsts {
    float *a, *mg, *mgx;
} gconsts;

static inline void grad_rows(const float *x, const float *g, float *o, int64_t n, int64_t C,
                             const consts *k, const gconsts *q, int act, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            const int64_t j = i * C + c;
            const float gk = row_grad(act, k, c, x[j], g[j], lo, hi);
            o[j] = q->a[c] * (gk - q->mg[c] - (x[j] - k->m[c]) * k->is[c] * q->mgx[c]);
        }
}

/* dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)) */
const char *lz_cpu_bn_grad_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const float *fw, *fb;
    const int act = bn_folded_act(s, ptrs, &fw, &fb);
    const int vs[2] = {s->out, s->in[3]};
    int64_t C, R;
    const char *err = dims_of(p, s, vs, 2, &C, &R);
    if (err) return err;
    const float *x = ptrs[s->in[0]], *st = ptrs[s->in[1]], *g = ptrs[s->in[3]];
    const float *gs = ptrs[s->in[4]];
    const float eps = *(const float *)ptrs[s->in[2]];
    const float *w = s->iattr[0] ? ptrs[s->in[5]] : NULL;
    const float lo = s->fattr[0], hi = s->fattr[1];
    consts k;
    gconsts q;
    float *more = consts_of(&k, C, 3, st, eps, fw, fb);
    if (!more) return "batch_norm: out of memory for the per-channel constants";
    q.a = more;
    q.mg = more + C;
    q.mgx = more + 2 * C;
    const float inv_m = 1.0f / (float)R;
    for (int64_t c = 0; c < C; c++) {
        q.a[c] = (w ? w[c] : 1.0f) * k.is[c];
        q.mg[c] = gs[c] * inv_m;
        q.mgx[c] = gs[C + c] * inv_m;
    }
    const consts *kp = &k;
    const gconsts *qp = &q;
    /* bf16: autocast's cast for the convolution's backward, folded in by
       the compiler (compile/fuse_bn_act.c); a tile of rows at a time */
    const int bf16 = p->values[s->out].dtype == LZ_BF16;
    const int64_t rows = tile_rows(C), tiles = (R + rows - 1) / rows;
    #pragma omp parallel for schedule(static) if (R * C > PAR_MIN && tiles > 1)
    for (int64_t t = 0; t < tiles; t++) {
        float tile[LZ_BN_NHWC_MAX_C];
        const int64_t r0 = t * rows, n = R - r0 < rows ? R - r0 : rows, at = r0 * C;
        float *o = bf16 ? tile : (float *)ptrs[s->out] + at;
        if (act == LZ_BN_ACT_RELU)
            grad_rows(x + at, g + at, o, n, C, kp, qp, LZ_BN_ACT_RELU, lo, hi);
        else if (act == LZ_BN_ACT_HARDTANH)
            grad_rows(x + at, g + at, o, n, C, kp, qp, LZ_BN_ACT_HARDTANH, lo, hi);
        else grad_rows(x + at, g + at, o, n, C, kp, qp, LZ_BN_ACT_NONE, lo, hi);
        if (bf16) bn_store_bf16(ptrs[s->out], at, tile, n * C);
    }
    free(k.m);
    return NULL;
}
