/* softmax, log_softmax, their gradients and cross-entropy (host side:
 * f_softmax.c), with the CPU's formulas (backends/cpu/k_linalg.c): the row
 * max ignores NaN as fmaxf does; log_softmax is (x - max) - log(sum), so
 * large logits keep their precision; cross-entropy's loss is the mean of
 * (max - x[target]) + log(sum) over rows, summed in double.
 *
 * Along the last axis a warp folds each row (rows of up to a few thousand
 * elements: attention and class scores) or, for longer rows, a block; an
 * axis other than the last gives each thread one column. */
#include "k_common.cuh"

/* The row's combination of its elements, kind by kind: every thread of
   the row's group calls it with its share (lanes of a warp, or threads of
   a block) and a reduction after it makes the whole. */
template <int WARP> static __device__ __forceinline__ float row_max(const float *x, i64 n, int t, int nt,
                                                                    float *sh)
{
    float m = -LZ_INF;
    for (i64 i = t; i < n; i += nt) m = fmaxf(m, x[i]);
    return WARP ? lz_warp_max(m) : lz_block_max(m, sh);
}

template <int WARP> static __device__ __forceinline__ float row_sum(float v, float *sh)
{
    return WARP ? lz_warp_sum(v) : lz_block_sum(v, sh);
}

template <int WARP> static __device__ void softmax_row(const lz_cu_softmax_args &a, i64 row, int t,
                                                       int nt, float *sh)
{
    const i64 n = a.n, at = row * n;
    const float *x = a.x + at;
    float *y = a.y + at;
    if (a.kind == LZ_CU_SOFTMAX || a.kind == LZ_CU_LOG_SOFTMAX) {
        const float mx = row_max<WARP>(x, n, t, nt, sh);
        float s = 0.0f;
        for (i64 i = t; i < n; i += nt) s += expf(x[i] - mx);
        s = row_sum<WARP>(s, sh);
        if (a.kind == LZ_CU_SOFTMAX) {
            const float inv = 1.0f / s;
            for (i64 i = t; i < n; i += nt) y[i] = expf(x[i] - mx) * inv;
        } else {
            const float ls = logf(s);
            for (i64 i = t; i < n; i += nt) y[i] = (x[i] - mx) - ls;
        }
        return;
    }
    const float *g = a.g + at;   /* x holds the forward's result y */
    float s = 0.0f;
    if (a.kind == LZ_CU_SOFTMAX_GRAD) {
        for (i64 i = t; i < n; i += nt) s += g[i] * x[i];
        s = row_sum<WARP>(s, sh);
        for (i64 i = t; i < n; i += nt) y[i] = x[i] * (g[i] - s);
    } else {
        for (i64 i = t; i < n; i += nt) s += g[i];
        s = row_sum<WARP>(s, sh);
        for (i64 i = t; i < n; i += nt) y[i] = g[i] - expf(x[i]) * s;
    }
}

/* a warp per row; the loop bound is uniform across the warp */
extern "C" __global__ void lz_softmax_warp(const lz_cu_softmax_args a)
{
    const int lane = threadIdx.x & 31;
    const i64 w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 row = w0; row < a.outer; row += nw) softmax_row<1>(a, row, lane, 32, NULL);
}

/* a block per row */
extern "C" __global__ void lz_softmax_block(const lz_cu_softmax_args a)
{
    __shared__ float sh[32];
    for (i64 row = blockIdx.x; row < a.outer; row += gridDim.x) softmax_row<0>(a, row, threadIdx.x, blockDim.x, sh);
}

/* an axis other than the last: a thread per (outer, column) */
extern "C" __global__ void lz_softmax_cols(const lz_cu_softmax_args a)
{
    const i64 n = a.n, inner = a.inner;
    LZ_GRID_LOOP(it, a.outer * inner) {
        const i64 o = it / inner, c = it - o * inner, base = o * n * inner + c;
        const float *x = a.x + base;
        float *y = a.y + base;
        if (a.kind == LZ_CU_SOFTMAX || a.kind == LZ_CU_LOG_SOFTMAX) {
            float mx = -LZ_INF, s = 0.0f;
            for (i64 i = 0; i < n; i++) mx = fmaxf(mx, x[i * inner]);
            for (i64 i = 0; i < n; i++) s += expf(x[i * inner] - mx);
            if (a.kind == LZ_CU_SOFTMAX) {
                const float inv = 1.0f / s;
                for (i64 i = 0; i < n; i++) y[i * inner] = expf(x[i * inner] - mx) * inv;
            } else {
                const float ls = logf(s);
                for (i64 i = 0; i < n; i++) y[i * inner] = (x[i * inner] - mx) - ls;
            }
            continue;
        }
        const float *g = a.g + base;
        float s = 0.0f;
        if (a.kind == LZ_CU_SOFTMAX_GRAD) {
            for (i64 i = 0; i < n; i++) s += g[i * inner] * x[i * inner];
            for (i64 i = 0; i < n; i++) y[i * inner] = x[i * inner] * (g[i * inner] - s);
        } else {
            for (i64 i = 0; i < n; i++) s += g[i * inner];
            for (i64 i = 0; i < n; i++) y[i * inner] = g[i * inner] - expf(x[i * inner]) * s;
        }
    }
}

/* ---- cross-entropy ---- */

/* row i's loss (double, to the scratch rows); a bad target reports and
   makes the loss NaN */
extern "C" __global__ void lz_xent_rows(const lz_cu_xent_args a)
{
    const int lane = threadIdx.x & 31;
    const i64 w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((i64)gridDim.x * blockDim.x) >> 5;
    double *rows = (double *)a.out;
    for (i64 i = w0; i < a.n; i += nw) {
        const float *x = a.x + i * a.c;
        const i64 t = lz_index_at(a.target, a.is64, i);
        const float mx = row_max<1>(x, a.c, lane, 32, NULL);
        float s = 0.0f;
        for (i64 j = lane; j < a.c; j += 32) s += expf(x[j] - mx);
        s = lz_warp_sum(s);
        if (lane) continue;
        if (t < 0 || t >= a.c) {
            lz_report(a.status, LZ_CU_BAD_TARGET, i, t, a.c);
            rows[i] = (double)LZ_NAN;
        } else {
            rows[i] = (double)(mx - x[t]) + (double)logf(s);
        }
    }
}

/* the mean of the rows, by one block */
extern "C" __global__ void lz_xent_mean(const lz_cu_xent_args a)
{
    __shared__ double sh[32];
    const double *rows = (const double *)a.out;
    double s = 0.0;
    for (i64 i = threadIdx.x; i < a.n; i += blockDim.x) s += rows[i];
    s = lz_block_sum_d(s, sh);
    if (threadIdx.x == 0) a.loss[0] = (float)(s / (double)a.n);
}

/* dx = (softmax(row) - onehot(target)) * g / n, a warp per row */
extern "C" __global__ void lz_xent_grad(const lz_cu_xent_args a)
{
    const int lane = threadIdx.x & 31;
    const i64 w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((i64)gridDim.x * blockDim.x) >> 5;
    const float scale = a.g[0] / (float)a.n;
    float *dxall = (float *)a.out;
    for (i64 i = w0; i < a.n; i += nw) {
        const float *x = a.x + i * a.c;
        float *dx = dxall + i * a.c;
        const i64 t = lz_index_at(a.target, a.is64, i);
        if (t < 0 || t >= a.c) {
            if (lane == 0) lz_report(a.status, LZ_CU_BAD_TARGET, i, t, a.c);
            for (i64 j = lane; j < a.c; j += 32) dx[j] = LZ_NAN;
            continue;
        }
        const float mx = row_max<1>(x, a.c, lane, 32, NULL);
        float s = 0.0f;
        for (i64 j = lane; j < a.c; j += 32) s += expf(x[j] - mx);
        const float inv = scale / lz_warp_sum(s);
        for (i64 j = lane; j < a.c; j += 32) dx[j] = expf(x[j] - mx) * inv - (j == t ? scale : 0.0f);
    }
}

/* ---- cross-entropy with torch's options (backends/cpu/k_loss_ext.c) ---- */

static __device__ __forceinline__ int ce_ignored(const lz_cu_ce_args &a, i64 t)
{
    return a.use_ignore && t == a.ignore;
}

static __device__ __forceinline__ float ce_w(const lz_cu_ce_args &a, i64 j) { return a.w ? a.w[j] : 1.0f; }

static __device__ void ce_bad(const lz_cu_ce_args &a, i64 i, i64 t)
{
    lz_report(a.status, a.use_ignore ? LZ_CU_BAD_TARGET_EX_IGNORE : LZ_CU_BAD_TARGET_EX, i, t, a.classes);
}

/* per-row loss, a warp per row: w_t ((max - x_t) + lse), smoothed by eps */
extern "C" __global__ void lz_ce_rows(const lz_cu_ce_args a)
{
    const int lane = threadIdx.x & 31;
    const i64 w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((i64)gridDim.x * blockDim.x) >> 5;
    float *y = (float *)a.y;
    for (i64 i = w0; i < a.n; i += nw) {
        const float *x = a.x + i * a.c;
        const i64 t = lz_index_at(a.target, a.is64, i);
        if (ce_ignored(a, t)) {
            if (!lane) y[i] = 0.0f;
            continue;
        }
        if (t < 0 || t >= a.c) {
            if (!lane) {
                ce_bad(a, i, t);
                y[i] = LZ_NAN;
            }
            continue;
        }
        float mx = -LZ_INF, s = 0.0f;
        for (i64 j = lane; j < a.c; j += 32) mx = fmaxf(mx, x[j]);
        mx = lz_warp_max(mx);
        for (i64 j = lane; j < a.c; j += 32) s += expf(x[j] - mx);
        const float lse = logf(lz_warp_sum(s));
        double sm = 0.0;
        if (a.eps != 0.0f)
            for (i64 j = lane; j < a.c; j += 32) sm += (double)ce_w(a, j) * ((mx - x[j]) + lse);
        sm = lz_warp_sum_d(sm);
        if (lane) continue;
        float loss = ce_w(a, t) * ((mx - x[t]) + lse);
        if (a.eps != 0.0f) loss = (1.0f - a.eps) * loss + a.eps / (float)a.c * (float)sm;
        y[i] = loss;
    }
}

/* dx_j = g_i ((1 - eps) w_t (p_j - [j == t]) + eps / C (W p_j - w_j)), W = sum w */
extern "C" __global__ void lz_ce_rows_grad(const lz_cu_ce_args a)
{
    const int lane = threadIdx.x & 31;
    const i64 w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((i64)gridDim.x * blockDim.x) >> 5;
    float *dxall = (float *)a.y;
    for (i64 i = w0; i < a.n; i += nw) {
        const float *x = a.x + i * a.c;
        float *dx = dxall + i * a.c;
        const i64 t = lz_index_at(a.target, a.is64, i);
        if (ce_ignored(a, t) || t < 0 || t >= a.c) {
            if (!ce_ignored(a, t) && !lane) ce_bad(a, i, t);
            for (i64 j = lane; j < a.c; j += 32) dx[j] = ce_ignored(a, t) ? 0.0f : LZ_NAN;
            continue;
        }
        float mx = -LZ_INF, s = 0.0f, ws = 0.0f;
        for (i64 j = lane; j < a.c; j += 32) {
            mx = fmaxf(mx, x[j]);
            ws += ce_w(a, j);
        }
        mx = lz_warp_max(mx);
        const float wsum = a.w ? lz_warp_sum(ws) : (float)a.c;
        for (i64 j = lane; j < a.c; j += 32) s += expf(x[j] - mx);
        const float inv = 1.0f / lz_warp_sum(s);
        const float ct = a.g[i] * (1.0f - a.eps) * ce_w(a, t), cs = a.g[i] * a.eps / (float)a.c;
        for (i64 j = lane; j < a.c; j += 32) {
            const float pj = expf(x[j] - mx) * inv;
            dx[j] = ct * pj + (a.eps != 0.0f ? cs * (wsum * pj - ce_w(a, j)) : 0.0f) - (j == t ? ct : 0.0f);
        }
    }
}

/* each row's weight in a mean: w_t or 1, 0 when ignored */
extern "C" __global__ void lz_ce_row_weight(const lz_cu_ce_args a)
{
    LZ_GRID_LOOP(i, a.n) {
        const i64 t = lz_index_at(a.target, a.is64, i);
        float v = 0.0f;
        if (!ce_ignored(a, t)) {
            if (t < 0 || t >= a.classes) {
                ce_bad(a, i, t);
                v = LZ_NAN;
            } else {
                v = ce_w(a, t);
            }
        }
        ((float *)a.y)[i] = v;
    }
}
