/* CPU kernels for SUM, MEAN and MAX over any set of axes.
 *
 * The source shape is folded into groups of adjacent axes that are all
 * reduced or all kept (size-1 axes dropped). Then one of three paths runs:
 *  - everything reduced: a chunked reduction, chunks in parallel, partial
 *    results combined in a fixed order so the result does not depend on the
 *    thread count;
 *  - last group reduced: each output element folds contiguous runs;
 *  - last group kept: each output row accumulates whole contiguous source
 *    rows (the column-sum case, e.g. a bias gradient over a batch); where
 *    that leaves few items to share out (a bias gradient is one output
 *    row), the source rows are cut into bands summed in parallel and then
 *    combined in band order. The bands follow from the shape alone, so the
 *    result does not depend on the thread count either.
 * Accumulators are 8 bytes: double for f32 (sums keep their precision over
 * long runs), int64 for integers.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/cpu/kernels.h"

#define PAR_MIN 32768
#define TOTAL_CHUNK 16384   /* elements per partial in the all-reduced path */
#define ROW_CHUNK 512       /* accumulator row length in the last-kept path */
#define LANES 8             /* independent accumulators, so the fold vectorises */
#define BAND_ROWS 64        /* at least this many source rows to a band */
#define MAX_BANDS 32
#define FEW_ITEMS 16        /* below this many output chunks, rows are cut into bands */

/* storage for one accumulator of either kind */
typedef union acc8 {
    double f;
    int64_t i;
} acc8;

typedef struct red_ops {
    void (*init)(void *acc, int64_t n);
    /* *acc = fold(*acc, x[0], x[st], ..., x[(n-1)*st]) */
    void (*fold)(void *acc, const void *x, int64_t n, int64_t st);
    /* acc[j] = fold(acc[j], x[j]) for j < n */
    void (*fold_rows)(void *acc, const void *x, int64_t n);
    void (*merge)(void *acc, const void *other);
    /* out[j] = acc[j] (times scale, for a mean) */
    void (*store)(void *out, const void *acc, int64_t n, double scale);
} red_ops;

#define SUM_C(a, v) ((a) + (v))
/* integer sums wrap around, as in torch (signed overflow is undefined in C) */
#define WSUM_C(a, v) ((int64_t)((uint64_t)(a) + (uint64_t)(v)))
/* NaN wins, as in torch.amax (v != v tests for NaN) */
#define MAX_C(a, v) (((v) != (v) || (v) > (a)) ? (v) : (a))
#define FIN_SCALED(a, scale) ((a) * (scale))
#define FIN_PLAIN(a, scale) ((void)(scale), (a))

#define RED_OPS(name, T, ACC, INITV, COMB, FIN)                                           \
    static void name##_init(void *acc_, int64_t n)                                        \
    {                                                                                     \
        ACC *acc = acc_;                                                                  \
        for (int64_t j = 0; j < n; j++) acc[j] = (INITV);                                 \
    }                                                                                     \
    static void name##_fold(void *acc_, const void *x_, int64_t n, int64_t st)            \
    {                                                                                     \
        ACC *acc = acc_, l[LANES];                                                        \
        const T *x = x_;                                                                  \
        for (int k = 0; k < LANES; k++) l[k] = (INITV);                                   \
        int64_t i = 0;                                                                    \
        if (st == 1)                                                                      \
            for (; i + LANES <= n; i += LANES)                                            \
                for (int k = 0; k < LANES; k++) l[k] = COMB(l[k], (ACC)x[i + k]);         \
        for (; i < n; i++) l[0] = COMB(l[0], (ACC)x[i * st]);                             \
        for (int k = 1; k < LANES; k++) l[0] = COMB(l[0], l[k]);                          \
        *acc = COMB(*acc, l[0]);                                                          \
    }                                                                                     \
    static void name##_fold_rows(void *acc_, const void *x_, int64_t n)                   \
    {                                                                                     \
        ACC *acc = acc_;                                                                  \
        const T *x = x_;                                                                  \
        for (int64_t j = 0; j < n; j++) acc[j] = COMB(acc[j], (ACC)x[j]);                 \
    }                                                                                     \
    static void name##_merge(void *acc_, const void *other_)                              \
    {                                                                                     \
        ACC *acc = acc_;                                                                  \
        const ACC *other = other_;                                                        \
        *acc = COMB(*acc, *other);                                                        \
    }                                                                                     \
    static void name##_store(void *out_, const void *acc_, int64_t n, double scale)       \
    {                                                                                     \
        T *out = out_;                                                                    \
        const ACC *acc = acc_;                                                            \
        for (int64_t j = 0; j < n; j++) out[j] = (T)FIN(acc[j], scale);                   \
    }                                                                                     \
    static const red_ops name = {name##_init, name##_fold, name##_fold_rows, name##_merge, \
                                 name##_store};

RED_OPS(sum_f32, float, double, 0.0, SUM_C, FIN_SCALED)
RED_OPS(sum_i64, int64_t, int64_t, 0, WSUM_C, FIN_PLAIN)
RED_OPS(sum_i32, int32_t, int64_t, 0, WSUM_C, FIN_PLAIN)
RED_OPS(max_f32, float, double, -INFINITY, MAX_C, FIN_PLAIN)
RED_OPS(max_i64, int64_t, int64_t, INT64_MIN, MAX_C, FIN_PLAIN)
RED_OPS(max_i32, int32_t, int64_t, INT32_MIN, MAX_C, FIN_PLAIN)

typedef struct groups {
    int n;                      /* group count */
    int64_t size[LZ_MAX_DIMS], stride[LZ_MAX_DIMS];
    int reduced[LZ_MAX_DIMS];
} groups;

static void fold_groups(const lz_value *xv, int64_t mask, groups *g)
{
    int64_t stride[LZ_MAX_DIMS], s = 1;
    for (int d = xv->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= xv->shape[d];
    }
    g->n = 0;
    for (int d = 0; d < xv->ndim; d++) {
        int64_t n = xv->shape[d];
        int red = (int)(mask >> d & 1);
        if (n == 1) continue;
        /* the source is dense, so neighbours with the same role always fold */
        if (g->n && g->reduced[g->n - 1] == red) {
            g->size[g->n - 1] *= n;
            g->stride[g->n - 1] = stride[d];
        } else {
            g->size[g->n] = n;
            g->stride[g->n] = stride[d];
            g->reduced[g->n] = red;
            g->n++;
        }
    }
    if (g->n == 0) {            /* a single element: keep it as is */
        g->size[0] = 1;
        g->stride[0] = 1;
        g->reduced[0] = 0;
        g->n = 1;
    }
}

/* Offset (in elements) of index idx over the groups listed in which[0..n). */
static int64_t offset_of(const groups *g, const int *which, int n, int64_t idx)
{
    int64_t off = 0;
    for (int i = n - 1; i >= 0; i--) {
        int64_t sz = g->size[which[i]];
        off += idx % sz * g->stride[which[i]];
        idx /= sz;
    }
    return off;
}

static const char *reduce_all(const red_ops *ops, const char *x, size_t esz, int64_t n,
                              void *out, double scale)
{
    int64_t nchunks = (n + TOTAL_CHUNK - 1) / TOTAL_CHUNK;
    if (n <= PAR_MIN || nchunks < 2) {
        acc8 acc;
        ops->init(&acc, 1);
        ops->fold(&acc, x, n, 1);
        ops->store(out, &acc, 1, scale);
        return NULL;
    }
    acc8 *part = malloc(sizeof *part * (size_t)nchunks);
    if (!part) return "reduce kernel: out of memory";
    ops->init(part, nchunks);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t len = n - c * TOTAL_CHUNK < TOTAL_CHUNK ? n - c * TOTAL_CHUNK : TOTAL_CHUNK;
        ops->fold(&part[c], x + (size_t)(c * TOTAL_CHUNK) * esz, len, 1);
    }
    for (int64_t c = 1; c < nchunks; c++) ops->merge(&part[0], &part[c]);
    ops->store(out, &part[0], 1, scale);
    free(part);
    return NULL;
}

/* lanes of a block summed at a time: a channels-last block is all C */
#define BLOCK_LANES 64

/* x channel-blocked [N, C/b, H, W, b] (lz_value.block), reduced over N,
   H and W (a bias gradient): a channel's sum is lane c % b of its
   block's rows, folded BLOCK_LANES lanes at a time, in double as the plain
   paths.
   (A reduction over everything reads any layout alike: run_reduce's.) */
static const char *reduce_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs,
                                  int mean)
{
    const lz_value *xv = &p->values[s->in[0]];
    const int64_t b = xv->block, N = xv->shape[0], CB = xv->shape[1] / b;
    const int64_t S = xv->shape[2] * xv->shape[3];
    const float *x = ptrs[s->in[0]];
    float *out = ptrs[s->out];
    if (xv->dtype != LZ_F32 || s->op == LZ_OP_MAX || (s->iattr[0] & 0xf) != 0xd)
        return "reduce kernel: no blocked form of this reduction";
    const int64_t gpb = (b + BLOCK_LANES - 1) / BLOCK_LANES, groups = CB * gpb;
    #pragma omp parallel for schedule(static) if (xv->numel > PAR_MIN && groups > 1)
    for (int64_t gi = 0; gi < groups; gi++) {
        const int64_t cb = gi / gpb, l0 = gi % gpb * BLOCK_LANES;
        const int64_t L = b - l0 < BLOCK_LANES ? b - l0 : BLOCK_LANES;
        double acc[BLOCK_LANES] = {0};
        for (int64_t n = 0; n < N; n++) {
            const float *r = x + (n * CB + cb) * S * b + l0;
            for (int64_t i = 0; i < S; i++)
                for (int64_t l = 0; l < L; l++) acc[l] += r[i * b + l];
        }
        for (int64_t l = 0; l < L; l++)
            out[cb * b + l0 + l] = (float)(mean ? acc[l] / (double)(N * S) : acc[l]);
    }
    return NULL;
}

/* The last-kept path over few output rows (a bias gradient: one row of a
   few hundred columns over hundreds of source rows): band b of `bands`
   sums source rows [b * count / bands, (b + 1) * count / bands) of each
   output row into its own partial, the bands in parallel, and the partials
   are then added in band order. */
static const char *column_bands(const red_ops *ops, const groups *g, const int *kept, int nk,
                                const int *red, int nr, const char *x, size_t esz, int64_t count,
                                int64_t width, int64_t orows, int64_t bands, char *out,
                                double scale)
{
    const int64_t cells = orows * width;
    acc8 *part = malloc((size_t)(bands * cells) * sizeof *part);
    if (!part) return "reduce kernel: out of memory";
    LZ_PAR_FOR(orows * count * width > PAR_MIN, it, orows * bands, {
        int64_t orow = it / bands, b = it % bands;
        int64_t base = offset_of(g, kept, nk - 1, orow);
        acc8 *acc = part + (size_t)(b * cells + orow * width);
        ops->init(acc, width);
        for (int64_t r = b * count / bands; r < (b + 1) * count / bands; r++) {
            int64_t off = base + offset_of(g, red, nr, r);
            ops->fold_rows(acc, x + (size_t)off * esz, width);
        }
    });
    for (int64_t b = 1; b < bands; b++)
        for (int64_t j = 0; j < cells; j++) ops->merge(&part[j], &part[(size_t)(b * cells + j)]);
    ops->store(out, part, cells, scale);
    free(part);
    return NULL;
}

static const char *run_reduce(const lz_program *p, const lz_instr *s, void *const *ptrs,
                              const red_ops *ops, int mean)
{
    const lz_value *xv = &p->values[s->in[0]], *ov = &p->values[s->out];
    const char *x = ptrs[s->in[0]];
    char *out = ptrs[s->out];
    size_t esz = lz_dtype_size((lz_dtype)xv->dtype);
    int64_t mask = s->iattr[0];
    if (ov->numel == 0) return NULL;
    if (xv->block && (mask & 0xf) != 0xf) return reduce_blocked(p, s, ptrs, mean);
    int64_t count = 1;          /* reduced elements per output */
    for (int d = 0; d < xv->ndim; d++)
        if (mask >> d & 1) count *= xv->shape[d];
    double scale = mean ? 1.0 / (double)count : 1.0;

    groups g;
    fold_groups(xv, mask, &g);
    if (g.n == 1 && g.reduced[0]) return reduce_all(ops, x, esz, g.size[0], out, scale);

    int kept[LZ_MAX_DIMS], red[LZ_MAX_DIMS], nk = 0, nr = 0;
    for (int i = 0; i < g.n; i++) {
        if (g.reduced[i]) red[nr++] = i;
        else kept[nk++] = i;
    }
    int64_t total = xv->numel;
    if (g.reduced[g.n - 1]) {
        /* innermost group reduced: fold its contiguous runs per output */
        int64_t run = g.size[g.n - 1], outer_runs = run ? count / run : 0;
        LZ_PAR_FOR(total > PAR_MIN, o, ov->numel, {
            int64_t base = offset_of(&g, kept, nk, o);
            acc8 acc;
            ops->init(&acc, 1);
            for (int64_t r = 0; r < outer_runs; r++) {
                int64_t off = base + offset_of(&g, red, nr - 1, r);
                ops->fold(&acc, x + (size_t)off * esz, run, 1);
            }
            ops->store(out + (size_t)o * esz, &acc, 1, scale);
        });
        return NULL;
    }
    /* innermost group kept: accumulate whole source rows into output rows */
    int64_t width = g.size[g.n - 1], orows = ov->numel / width;
    int64_t nchunks = (width + ROW_CHUNK - 1) / ROW_CHUNK, items = orows * nchunks;
    int64_t bands = items < FEW_ITEMS ? count / BAND_ROWS : 1;
    if (bands > MAX_BANDS) bands = MAX_BANDS;
    if (bands > 1) return column_bands(ops, &g, kept, nk, red, nr, x, esz, count, width, orows,
                                       bands, out, scale);
    LZ_PAR_FOR(total > PAR_MIN && items > 1, it, items, {
        int64_t orow = it / nchunks, c0 = (it % nchunks) * ROW_CHUNK;
        int64_t len = width - c0 < ROW_CHUNK ? width - c0 : ROW_CHUNK;
        int64_t base = offset_of(&g, kept, nk - 1, orow) + c0;
        acc8 acc[ROW_CHUNK];
        ops->init(acc, len);
        for (int64_t r = 0; r < count; r++) {
            int64_t off = base + offset_of(&g, red, nr, r);
            ops->fold_rows(acc, x + (size_t)off * esz, len);
        }
        ops->store(out + (size_t)(orow * width + c0) * esz, acc, len, scale);
    });
    return NULL;
}

static const char *k_reduce(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    static const red_ops *const sum[3] = {&sum_f32, &sum_i64, &sum_i32};
    static const red_ops *const max[3] = {&max_f32, &max_i64, &max_i32};
    int dt = p->values[s->in[0]].dtype;
    if (dt > LZ_I32) return "reduce kernel: unknown dtype";
    switch ((lz_op)s->op) {
    case LZ_OP_SUM: return run_reduce(p, s, ptrs, sum[dt], 0);
    case LZ_OP_MEAN:
        if (dt != LZ_F32) return "reduce kernel: mean needs f32";
        return run_reduce(p, s, ptrs, &sum_f32, 1);
    case LZ_OP_MAX: return run_reduce(p, s, ptrs, max[dt], 0);
    default: return "reduce kernel: not a reduction";
    }
}

lz_kernel lz_cpu_reduce_kernel(lz_op op)
{
    return op == LZ_OP_SUM || op == LZ_OP_MEAN || op == LZ_OP_MAX ? k_reduce : NULL;
}
