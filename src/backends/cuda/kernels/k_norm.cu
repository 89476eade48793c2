/* Training batch norm over axis 1 of x [N, C, S] and layer norm over rows
 * (host side: f_norm.c), with the CPU's formulas (backends/cpu/
 * k_batch_norm.c, bn_act.h, k_layer_norm.c): y = ((x - mean) * invstd) *
 * w + b then the folded activation; the gradient recomputes the
 * pre-activation the same way, so its mask is the forward's.
 *
 * Channel statistics: a block per (channel, split) sums its share of the
 * channel's N * S elements in double (sum and sum of squares, or sum g and
 * sum g (x - mean)), and a finishing kernel adds the splits in order. The
 * variance is E[x^2] - mean^2 in double: the cancellation costs digits
 * only where |mean| / std passes 1e5, far beyond any activation. */
#include "k_common.cuh"

enum { ACT_NONE, ACT_RELU, ACT_HARDTANH };   /* LZ_BN_ACT_* */

static __device__ __forceinline__ float act_apply(int act, float y, float lo, float hi)
{
    if (act == ACT_RELU) return y < 0 ? 0.0f : y;
    if (act == ACT_HARDTANH) return y < lo ? lo : y > hi ? hi : y;
    return y;
}

static __device__ __forceinline__ float act_grad(int act, float y, float g, float lo, float hi)
{
    if (act == ACT_RELU) return y > 0 ? g : 0.0f;
    if (act == ACT_HARDTANH) return (y > lo) & (y < hi) ? g : 0.0f;
    return g;
}

static __device__ __forceinline__ float inv_std(const lz_cu_bn_args &a, i64 c)
{
    return 1.0f / sqrtf(a.stats[a.C + c] + a.eps[0]);
}

/* g through the folded activation's gradient at y recomputed from x */
static __device__ __forceinline__ float folded_g(const lz_cu_bn_args &a, i64 c, float x, float g, float m, float is)
{
    if (!a.act) return g;
    const float wc = a.fw ? a.fw[c] : 1.0f, bc = a.fb ? a.fb[c] : 0.0f;
    return act_grad(a.act, (x - m) * is * wc + bc, g, a.lo, a.hi);
}

/* partial sums of channel c over elements [s * chunk, ...) of its N * S:
   forward (g NULL) sum x and sum x^2; gradient sum g' and sum g' (x - m) */
extern "C" __global__ void lz_bn_partial(const lz_cu_bn_args a)
{
    __shared__ double sh[32];
    const i64 M = a.N * a.S;
    for (i64 item = blockIdx.x; item < a.C * a.splits; item += gridDim.x) {
        const i64 c = item % a.C, s = item / a.C;
        const i64 m0 = s * a.chunk, m1 = m0 + a.chunk < M ? m0 + a.chunk : M;
        const float mean = a.g ? a.stats[c] : 0.0f, is = a.g ? inv_std(a, c) : 0.0f;
        double s0 = 0.0, s1 = 0.0;
        for (i64 m = m0 + threadIdx.x; m < m1; m += blockDim.x) {
            const i64 n = m / a.S, i = m - n * a.S, k = (n * a.C + c) * a.S + i;
            const float x = a.x[k];
            if (a.g) {
                const float g = folded_g(a, c, x, a.g[k], mean, is);
                s0 += g;
                s1 += (double)g * (x - mean);
            } else {
                s0 += x;
                s1 += (double)x * x;
            }
        }
        s0 = lz_block_sum_d(s0, sh);
        s1 = lz_block_sum_d(s1, sh);
        if (threadIdx.x == 0) {
            a.partial[s * a.C + c] = s0;
            a.partial[(a.splits + s) * a.C + c] = s1;
        }
    }
}

/* stats [2, C] = mean, biased variance (NaN over no elements) */
extern "C" __global__ void lz_bn_stats_finish(const lz_cu_bn_args a)
{
    const double M = (double)(a.N * a.S);
    LZ_GRID_LOOP(c, a.C) {
        double s0 = 0.0, s1 = 0.0;
        for (i64 s = 0; s < a.splits; s++) {
            s0 += a.partial[s * a.C + c];
            s1 += a.partial[(a.splits + s) * a.C + c];
        }
        const double mean = s0 / M, var = s1 / M - mean * mean;
        float *st = (float *)a.y;
        st[c] = (float)mean;
        st[a.C + c] = (float)(var > 0.0 ? var : (var == var ? 0.0 : var));
    }
}

/* gstats [2, C] = sum g, sum g * xhat */
extern "C" __global__ void lz_bn_grad_stats_finish(const lz_cu_bn_args a)
{
    LZ_GRID_LOOP(c, a.C) {
        double s0 = 0.0, s1 = 0.0;
        for (i64 s = 0; s < a.splits; s++) {
            s0 += a.partial[s * a.C + c];
            s1 += a.partial[(a.splits + s) * a.C + c];
        }
        float *gs = (float *)a.y;
        gs[c] = (float)s0;
        gs[a.C + c] = (float)(s1 * inv_std(a, c));
    }
}

static __device__ __forceinline__ void bn_store(const lz_cu_bn_args &a, i64 e, float v)
{
    if (a.out_bf16) ((u16 *)a.y)[e] = lz_f32_to_bf16(v);
    else ((float *)a.y)[e] = v;
}

/* y = act(((x - mean) * invstd) * w + b), f32 or bf16 (a folded cast) */
extern "C" __global__ void lz_bn_apply(const lz_cu_bn_args a)
{
    LZ_GRID_LOOP(e, a.N * a.C * a.S) {
        const i64 c = (e / a.S) % a.C;
        const float wc = a.w ? a.w[c] : 1.0f, bc = a.b ? a.b[c] : 0.0f;
        const float y = (a.x[e] - a.stats[c]) * inv_std(a, c) * wc + bc;
        bn_store(a, e, act_apply(a.act, y, a.lo, a.hi));
    }
}

/* dx = w * invstd * (g' - mean(g') - xhat * mean(g' * xhat)) */
extern "C" __global__ void lz_bn_grad(const lz_cu_bn_args a)
{
    const float inv_m = 1.0f / (float)(a.N * a.S);
    LZ_GRID_LOOP(e, a.N * a.C * a.S) {
        const i64 c = (e / a.S) % a.C;
        const float m = a.stats[c], is = inv_std(a, c), x = a.x[e];
        const float k = (a.w ? a.w[c] : 1.0f) * is;
        const float mg = a.gstats[c] * inv_m, mgx = a.gstats[a.C + c] * inv_m;
        const float g = folded_g(a, c, x, a.g[e], m, is);
        bn_store(a, e, k * (g - mg - (x - m) * is * mgx));
    }
}

/* ---- layer norm: a block per row ---- */

static __device__ void ln_moments(const float *x, i64 d, float eps, float *sh, float *mean, float *rstd)
{
    float s = 0.0f;
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) s += x[i];
    const float m = lz_block_sum(s, sh) / (float)d;
    float q = 0.0f;
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) q += (x[i] - m) * (x[i] - m);
    *mean = m;
    *rstd = 1.0f / sqrtf(lz_block_sum(q, sh) / (float)d + eps);
}

extern "C" __global__ void lz_layer_norm(const lz_cu_ln_args a)
{
    __shared__ float sh[32];
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const float *x = a.x + r * a.d;
        float *y = a.y + r * a.d, mean, rstd;
        ln_moments(x, a.d, a.eps, sh, &mean, &rstd);
        for (i64 i = threadIdx.x; i < a.d; i += blockDim.x) y[i] = (x[i] - mean) * rstd;
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), the moments recomputed */
extern "C" __global__ void lz_layer_norm_grad(const lz_cu_ln_args a)
{
    __shared__ float sh[32];
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const float *x = a.x + r * a.d, *g = a.g + r * a.d;
        float *dx = a.y + r * a.d, mean, rstd;
        ln_moments(x, a.d, a.eps, sh, &mean, &rstd);
        float sg = 0.0f, sgx = 0.0f;
        for (i64 i = threadIdx.x; i < a.d; i += blockDim.x) {
            sg += g[i];
            sgx += g[i] * (x[i] - mean);
        }
        const float ma = lz_block_sum(sg, sh) / (float)a.d;
        const float mb = rstd * lz_block_sum(sgx, sh) / (float)a.d;
        for (i64 i = threadIdx.x; i < a.d; i += blockDim.x) dx[i] = rstd * (g[i] - ma - (x[i] - mean) * rstd * mb);
    }
}
