/* Max, average and adaptive-average 2-d pooling (NCHW) and their
 * gradients, with torch's window rules as the CPU's (backends/cpu/
 * k_pool.c, pool_window.h): windows clipped to the input, the ceil mode's
 * extra row already in the output's shape, the average's divisor with or
 * without the padding, the max's first maximum or last NaN. Own kernels
 * rather than cuDNN's: its pooling descriptor has no ceil mode and one
 * padding rule, and these are memory-bound loops a thread per output.
 * A gradient scatters each output's share into dx (zeroed first) with
 * atomicAdd where windows overlap. Host side: f_pool.c. */
#include "k_common.cuh"

static __device__ __forceinline__ void window(i64 o, i64 s, i64 p, i64 k, i64 in, i64 *lo, i64 *hi)
{
    const i64 a = o * s - p, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
}

static __device__ __forceinline__ void adaptive_window(i64 i, i64 in, i64 out, i64 *lo, i64 *hi)
{
    *lo = i * in / out;
    *hi = ((i + 1) * in + out - 1) / out;
}

static __device__ __forceinline__ i64 avg_divisor(const lz_cu_pool_args &a, i64 oh, i64 ow)
{
    i64 h0 = oh * a.sh - a.ph, w0 = ow * a.sw - a.pw;
    i64 h1 = h0 + a.kh, w1 = w0 + a.kw;
    if (h1 > a.H + a.ph) h1 = a.H + a.ph;
    if (w1 > a.W + a.pw) w1 = a.W + a.pw;
    if (a.count_pad) return (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > a.H) h1 = a.H;
    if (w1 > a.W) w1 = a.W;
    return (h1 - h0) * (w1 - w0);
}

/* the window of output (oh, ow) and, for the average, its divisor */
static __device__ __forceinline__ void out_window(const lz_cu_pool_args &a, i64 oh, i64 ow, i64 *h0,
                                                  i64 *h1, i64 *w0, i64 *w1)
{
    if (a.kind == LZ_CU_ADAPTIVE_POOL) {
        adaptive_window(oh, a.H, a.OH, h0, h1);
        adaptive_window(ow, a.W, a.OW, w0, w1);
    } else {
        window(oh, a.sh, a.ph, a.kh, a.H, h0, h1);
        window(ow, a.sw, a.pw, a.kw, a.W, w0, w1);
    }
}

/* index in the plane of the element torch's max pool picks: the first
   maximum, or the last NaN; -1 for an empty window */
static __device__ __forceinline__ i64 argmax(const lz_cu_pool_args &a, const float *xp, i64 h0, i64 h1, i64 w0,
                                             i64 w1)
{
    if (h0 >= h1 || w0 >= w1) return -1;
    float m = -LZ_INF;
    i64 best = h0 * a.W + w0, nan_at = -1;
    for (i64 ih = h0; ih < h1; ih++)
        for (i64 iw = w0; iw < w1; iw++) {
            const i64 k = ih * a.W + iw;
            const float v = xp[k];
            if (v > m) {
                m = v;
                best = k;
            }
            if (v != v) nan_at = k;
        }
    return nan_at >= 0 ? nan_at : best;
}

extern "C" __global__ void lz_pool(const lz_cu_pool_args a)
{
    LZ_GRID_LOOP(e, a.planes * a.OH * a.OW) {
        const i64 pl = e / (a.OH * a.OW), r = e - pl * a.OH * a.OW, oh = r / a.OW, ow = r - oh * a.OW;
        const float *xp = a.x + pl * a.H * a.W;
        i64 h0, h1, w0, w1;
        out_window(a, oh, ow, &h0, &h1, &w0, &w1);
        if (a.kind == LZ_CU_MAX_POOL) {
            const i64 k = argmax(a, xp, h0, h1, w0, w1);
            a.y[e] = k >= 0 ? xp[k] : -LZ_INF;
            continue;
        }
        float sum = 0.0f;
        for (i64 ih = h0; ih < h1; ih++)
            for (i64 iw = w0; iw < w1; iw++) sum += xp[ih * a.W + iw];
        if (a.kind == LZ_CU_ADAPTIVE_POOL) {
            a.y[e] = sum / (float)((h1 - h0) * (w1 - w0));
        } else {
            const i64 div = avg_divisor(a, oh, ow);
            a.y[e] = div > 0 ? sum / (float)div : 0.0f;
        }
    }
}

/* dx (zeroed before) += each output's gradient: to its window's max, or
   spread over the window / the divisor */
extern "C" __global__ void lz_pool_grad(const lz_cu_pool_args a)
{
    LZ_GRID_LOOP(e, a.planes * a.OH * a.OW) {
        const i64 pl = e / (a.OH * a.OW), r = e - pl * a.OH * a.OW, oh = r / a.OW, ow = r - oh * a.OW;
        float *dp = a.y + pl * a.H * a.W;
        const float gv = a.g[e];
        i64 h0, h1, w0, w1;
        out_window(a, oh, ow, &h0, &h1, &w0, &w1);
        if (a.kind == LZ_CU_MAX_POOL) {
            const i64 k = argmax(a, a.x + pl * a.H * a.W, h0, h1, w0, w1);
            if (k >= 0) atomicAdd(dp + k, gv);
            continue;
        }
        i64 div;
        if (a.kind == LZ_CU_ADAPTIVE_POOL) div = (h1 - h0) * (w1 - w0);
        else div = avg_divisor(a, oh, ow);
        if (div <= 0) continue;
        const float v = gv / (float)div;
        for (i64 ih = h0; ih < h1; ih++)
            for (i64 iw = w0; iw < w1; iw++) atomicAdd(dp + ih * a.W + iw, v);
    }
}
