/* CPU kernels for matmul (float32: k_matmul_f32.c, bf16: k_matmul_bf16.c),
 * softmax, log_softmax, their gradients and cross-entropy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"

#define PAR_MIN 32768   /* below this many elements OpenMP costs more than it saves */

/* ---- matmul ------------------------------------------------------------- */

/* iattr[0] / iattr[1] set: a / b is stored with its last two axes swapped
   (a backward rule asks for a^T or b^T without copying it). */
static const char *k_matmul(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    if (p->values[s->in[0]].dtype == LZ_BF16 || p->values[s->in[1]].dtype == LZ_BF16)
        return lz_cpu_matmul_bf16(p, s, ptrs);
    return lz_cpu_matmul_f32(p, s, ptrs[s->in[0]], ptrs[s->in[1]], ptrs[s->out]);
}

/* ---- softmax family ----------------------------------------------------- */

/* A softmax-like op works on `w` independent vectors of length n, element
   i of vector c at [i * inner + c]. Column blocks keep the strided case
   (an axis other than the last) streaming through rows. */
#define COLS 64

typedef void (*axis_fn)(const float *x, const float *g, float *y, int64_t n, int64_t inner, int w);

static void softmax_cols(const float *x, const float *g, float *y, int64_t n, int64_t inner, int w)
{
    (void)g;
    float mx[COLS], sm[COLS];
    for (int c = 0; c < w; c++) { mx[c] = -INFINITY; sm[c] = 0; }
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) mx[c] = fmaxf(mx[c], x[i * inner + c]);
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) {
            float e = vexp_f32(x[i * inner + c] - mx[c]);
            y[i * inner + c] = e;
            sm[c] += e;
        }
    for (int c = 0; c < w; c++) sm[c] = 1.0f / sm[c];
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) y[i * inner + c] *= sm[c];
}

static void log_softmax_cols(const float *x, const float *g, float *y, int64_t n, int64_t inner, int w)
{
    (void)g;
    float mx[COLS], sm[COLS];
    for (int c = 0; c < w; c++) { mx[c] = -INFINITY; sm[c] = 0; }
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) mx[c] = fmaxf(mx[c], x[i * inner + c]);
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) sm[c] += vexp_f32(x[i * inner + c] - mx[c]);
    /* (x - max) - log(sum) keeps the precision that x - (max + log(sum))
       loses when max is large */
    for (int c = 0; c < w; c++) sm[c] = logf(sm[c]);
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) y[i * inner + c] = (x[i * inner + c] - mx[c]) - sm[c];
}

/* dx = y * (g - sum(g * y)) */
static void softmax_grad_cols(const float *yv, const float *g, float *dx, int64_t n, int64_t inner, int w)
{
    float sm[COLS];
    for (int c = 0; c < w; c++) sm[c] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) sm[c] += g[i * inner + c] * yv[i * inner + c];
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++)
            dx[i * inner + c] = yv[i * inner + c] * (g[i * inner + c] - sm[c]);
}

/* dx = g - exp(y) * sum(g), y = log_softmax(x) */
static void log_softmax_grad_cols(const float *yv, const float *g, float *dx, int64_t n, int64_t inner, int w)
{
    float sm[COLS];
    for (int c = 0; c < w; c++) sm[c] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++) sm[c] += g[i * inner + c];
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < w; c++)
            dx[i * inner + c] = g[i * inner + c] - vexp_f32(yv[i * inner + c]) * sm[c];
}

/* Contiguous rows (the last axis). A float sum in order cannot vectorise
   (that would reassociate it), so row reductions keep LANES partial results
   side by side: vectorisable, and no less accurate than one running sum. */
#define LANES 8
/* exp values are staged in blocks this size when there is no output row to
   hold them, so the exp loop and the sum stay separate vector loops */
#define EXP_BLK 512

/* floats ordered as int32 words: negatives get their magnitude bits
   flipped. Its own inverse. */
static inline int32_t order_key(int32_t b)
{
    return b ^ ((b >> 31) & 0x7fffffff);
}

/* max of a row, NaN ignored as fmaxf does. A float max reduction stays
   scalar (fmaxf is a call, a ?: has NaN rules); an int max vectorises. */
static float row_max(const float *x, int64_t n)
{
    const int32_t kmin = order_key((int32_t)f32_bits(-INFINITY));
    int32_t k = kmin;
    for (int64_t i = 0; i < n; i++) {
        int32_t kx = x[i] == x[i] ? order_key((int32_t)f32_bits(x[i])) : kmin;
        k = kx > k ? kx : k;
    }
    return f32_from_bits((uint32_t)order_key(k));
}

static void sum_lanes(float *acc, const float *e, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += e[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += e[i + l];
}

/* sum of exp(x - mx) over a row; the exp values go to y when y is given */
static float row_sum_exp(const float *x, float mx, float *y, int64_t n)
{
    float buf[EXP_BLK], acc[LANES] = {0};
    if (n < LANES) {
        /* one vector of LANES: a short row would otherwise run the exp as
           scalar remainder code; the padding's exp(-inf) is exactly 0,
           so the sum is the same */
        float xs[LANES], e[LANES];
        for (int i = 0; i < LANES; i++) xs[i] = i < n ? x[i] - mx : -INFINITY;
        for (int i = 0; i < LANES; i++) e[i] = vexp_f32(xs[i]);
        for (int64_t i = 0; y && i < n; i++) y[i] = e[i];
        sum_lanes(acc, e, LANES);
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
    for (int64_t j0 = 0; j0 < n; j0 += EXP_BLK) {
        int64_t m = n - j0 < EXP_BLK ? n - j0 : EXP_BLK;
        float *e = y ? y + j0 : buf;
        const float *xb = x + j0;
        for (int64_t i = 0; i < m; i++) e[i] = vexp_f32(xb[i] - mx);
        sum_lanes(acc, e, m);
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void softmax_row(const float *x, const float *g, float *y, int64_t n)
{
    (void)g;
    float mx = row_max(x, n);
    float inv = 1.0f / row_sum_exp(x, mx, y, n);
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

static void log_softmax_row(const float *x, const float *g, float *y, int64_t n)
{
    (void)g;
    float mx = row_max(x, n);
    float ls = logf(row_sum_exp(x, mx, NULL, n));
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mx) - ls;
}

static void softmax_grad_row(const float *yv, const float *g, float *dx, int64_t n)
{
    float sm = 0;
    for (int64_t i = 0; i < n; i++) sm += g[i] * yv[i];
    for (int64_t i = 0; i < n; i++) dx[i] = yv[i] * (g[i] - sm);
}

static void log_softmax_grad_row(const float *yv, const float *g, float *dx, int64_t n)
{
    float sm = 0;
    for (int64_t i = 0; i < n; i++) sm += g[i];
    for (int64_t i = 0; i < n; i++) dx[i] = g[i] - vexp_f32(yv[i]) * sm;
}

typedef void (*row_fn)(const float *x, const float *g, float *y, int64_t n);

static const char *run_axis(const lz_program *p, const lz_instr *s, void *const *ptrs,
                            row_fn row, axis_fn cols)
{
    const lz_value *vo = &p->values[s->out];
    int axis = (int)s->iattr[0];
    if (vo->ndim == 0) axis = 0;
    const float *x = ptrs[s->in[0]];
    const float *g = s->n_in > 1 ? ptrs[s->in[1]] : NULL;
    float *y = ptrs[s->out];
    int64_t outer = 1, inner = 1, n = vo->ndim ? vo->shape[axis] : 1;
    for (int d = 0; d < axis; d++) outer *= vo->shape[d];
    for (int d = axis + 1; d < vo->ndim; d++) inner *= vo->shape[d];
    if (vo->numel == 0) return NULL;
    if (inner == 1) {
        LZ_PAR_FOR(vo->numel > PAR_MIN && outer > 1, o, outer,
                   { row(x + o * n, g ? g + o * n : NULL, y + o * n, n); });
        return NULL;
    }
    const int64_t nblk = (inner + COLS - 1) / COLS, total = outer * nblk;
    LZ_PAR_FOR(vo->numel > PAR_MIN && total > 1, t, total, {
        int64_t o = t / nblk, c0 = (t % nblk) * COLS;
        int w = (int)(inner - c0 < COLS ? inner - c0 : COLS);
        int64_t base = o * n * inner + c0;
        cols(x + base, g ? g + base : NULL, y + base, n, inner, w);
    });
    return NULL;
}

static const char *k_softmax(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    return run_axis(p, s, ptrs, softmax_row, softmax_cols);
}

static const char *k_log_softmax(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    return run_axis(p, s, ptrs, log_softmax_row, log_softmax_cols);
}

static const char *k_softmax_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    return run_axis(p, s, ptrs, softmax_grad_row, softmax_grad_cols);
}

static const char *k_log_softmax_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    return run_axis(p, s, ptrs, log_softmax_grad_row, log_softmax_grad_cols);
}

/* ---- cross-entropy -------------------------------------------------------- */

static int64_t target_at(const void *t, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)t)[i] : ((const int32_t *)t)[i];
}

/* Class indices are data: check them all before reading any logit, and
   name the first bad one. The message lives in thread storage because the
   kernel contract returns a string, not an allocation. */
static const char *check_targets(const void *t, int is64, int64_t n, int64_t c)
{
    static _Thread_local char msg[160];
    for (int64_t i = 0; i < n; i++) {
        int64_t k = target_at(t, is64, i);
        if (k < 0 || k >= c) {
            snprintf(msg, sizeof msg,
                     "lz_cross_entropy: target[%lld] = %lld is out of range for %lld classes",
                     (long long)i, (long long)k, (long long)c);
            return msg;
        }
    }
    return NULL;
}

static const char *k_cross_entropy(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vl = &p->values[s->in[0]], *vt = &p->values[s->in[1]];
    const float *x = ptrs[s->in[0]];
    const void *t = ptrs[s->in[1]];
    const int is64 = vt->dtype == LZ_I64;
    const int64_t n = vl->shape[0], c = vl->shape[1];
    const char *err = check_targets(t, is64, n, c);
    if (err) return err;
    double acc = 0;
    LZ_PAR_FOR_SUM(vl->numel > PAR_MIN, acc, i, n, {
        /* max + log(sum): mx - x[target] first, so large logits keep their
           precision */
        float mx = row_max(x + i * c, c);
        float ls = logf(row_sum_exp(x + i * c, mx, NULL, c));
        acc += (double)(mx - x[i * c + target_at(t, is64, i)]) + ls;
    });
    *(float *)ptrs[s->out] = (float)(acc / (double)n);
    return NULL;
}

/* d/dlogits of the mean loss: (softmax(row) - onehot(target)) * g / N */
static const char *k_cross_entropy_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vl = &p->values[s->in[0]], *vt = &p->values[s->in[1]];
    const float *x = ptrs[s->in[0]];
    const void *t = ptrs[s->in[1]];
    const float g = *(const float *)ptrs[s->in[2]];
    float *dx = ptrs[s->out];
    const int is64 = vt->dtype == LZ_I64;
    const int64_t n = vl->shape[0], c = vl->shape[1];
    const char *err = check_targets(t, is64, n, c);
    if (err) return err;
    const float scale = g / (float)n;
    LZ_PAR_FOR(vl->numel > PAR_MIN, i, n, {
        const float *xr = x + i * c;
        float *dr = dx + i * c;
        /* exp(x - mx) / sum: one exp per element, and no rounding of
           (x - mx) - log(sum), which exp would magnify */
        float inv = scale / row_sum_exp(xr, row_max(xr, c), dr, c);
        for (int64_t j = 0; j < c; j++) dr[j] *= inv;
        dr[target_at(t, is64, i)] -= scale;
    });
    return NULL;
}

lz_kernel lz_cpu_linalg_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_MATMUL:             return k_matmul;
    case LZ_OP_SOFTMAX:            return k_softmax;
    case LZ_OP_LOG_SOFTMAX:        return k_log_softmax;
    case LZ_OP_SOFTMAX_GRAD:       return k_softmax_grad;
    case LZ_OP_LOG_SOFTMAX_GRAD:   return k_log_softmax_grad;
    case LZ_OP_CROSS_ENTROPY:      return k_cross_entropy;
    case LZ_OP_CROSS_ENTROPY_GRAD: return k_cross_entropy_grad;
    default:                       return NULL;
    }
}
