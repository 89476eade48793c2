/* The formulas of the element-wise ops that need more than an operator,
 * for the kernels codegen.c generates from a program's element-wise steps
 * and fused chains (the generated source includes this header). The CPU's
 * rules where they matter for results: ReLU keeps NaN, max lets NaN win,
 * a float out of an integer's range converts to its minimum (as x86 and
 * torch there), bf16 rounds as base/bf16.h. The transcendental functions
 * are CUDA's (expf, logf, tanhf: within 2 ulp), not bitwise the CPU's. */
#ifndef LZ_CU_K_ELEMENTWISE_CUH
#define LZ_CU_K_ELEMENTWISE_CUH

#include "k_common.cuh"

static __device__ __forceinline__ float lz_relu(float x) { return x < 0 ? 0.0f : x; }

static __device__ __forceinline__ float lz_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* x Phi(x); normcdff keeps the left tail's relative accuracy */
static __device__ __forceinline__ float lz_gelu(float x) { return x * normcdff(x); }

/* gelu'(x) = Phi(x) + x phi(x) */
static __device__ __forceinline__ float lz_gelu_grad(float x)
{
    return normcdff(x) + x * 0.39894228040143267794f * expf(-0.5f * x * x);
}

static __device__ __forceinline__ i64 lz_f2i64(float x)
{
    return x >= -9223372036854775808.0f && x < 9223372036854775808.0f ? (i64)x : (i64)(1ull << 63);
}

static __device__ __forceinline__ int lz_f2i32(float x)
{
    return x >= -2147483648.0f && x < 2147483648.0f ? (int)x : (int)0x80000000u;
}

static __device__ __forceinline__ float lz_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
static __device__ __forceinline__ float lz_minf(float a, float b) { return (a != a || a < b) ? a : b; }

/* torch's: x / (1 + exp(-x)), and g * s * (1 + x * (1 - s)) */
static __device__ __forceinline__ float lz_silu(float x) { return x / (1.0f + expf(-x)); }
static __device__ __forceinline__ float lz_silu_grad(float x, float g)
{
    const float s = 1.0f / (1.0f + expf(-x));
    return g * s * (1.0f + x * (1.0f - s));
}

/* clip_grad_norm_'s coefficient: max_norm / (norm + 1e-6), at most 1; NaN stays */
static __device__ __forceinline__ float lz_clip_coef(float x, float max_norm)
{
    return x != x ? x : fminf(max_norm / (x + 1e-6f), 1.0f);
}
static __device__ __forceinline__ i64 lz_maxi(i64 a, i64 b) { return a > b ? a : b; }

#endif
