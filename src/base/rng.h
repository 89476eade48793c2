/* lazyc's counter-based random numbers, defined once for every device:
 * element i of a stream is a pure function of (key, counter + i), so any
 * thread may compute any element, and two devices give the same bits.
 *
 * One header, compiled twice: by the C compiler for the CPU backend
 * (backends/cpu/random_fill.c, k_nn.c) and by NVRTC for the CUDA
 * backend's kernels (backends/cuda/, which hands this file to NVRTC as a
 * header). The float draws are bit for bit the same on both only because
 * neither side contracts a multiply and an add into an FMA: C11 without
 * GNU extensions keeps -ffp-contract=off (CMakeLists.txt), and the CUDA
 * backend compiles its random kernels with --fmad=false; sqrtf and the
 * division are IEEE round-to-nearest on both. tests/test_cuda_codegen.c
 * checks that NVRTC compiles this file, and the device check compares
 * the draws of both devices bitwise.
 *
 * On the ground floor because two backends, which may not include each
 * other's headers, share it. */
#ifndef LZ_RNG_H
#define LZ_RNG_H

#if defined(__CUDACC_RTC__)
typedef unsigned long long lz_rng_u64;
typedef unsigned int lz_rng_u32;
typedef int lz_rng_i32;
typedef long long lz_rng_i64;
#define LZ_RNG_FN static __host__ __device__ __forceinline__
#else
#include <math.h>
#include <stdint.h>
typedef uint64_t lz_rng_u64;
typedef uint32_t lz_rng_u32;
typedef int32_t lz_rng_i32;
typedef int64_t lz_rng_i64;
#define LZ_RNG_FN static inline
#endif

#define LZ_RNG_GOLDEN 0x9E3779B97F4A7C15ull

/* splitmix64's finaliser: a bijection of 64-bit words whose outputs on
   consecutive inputs pass BigCrush */
LZ_RNG_FN lz_rng_u64 lz_rng_mix64(lz_rng_u64 z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A seed mixed into a key, so nearby seeds give unrelated streams. */
LZ_RNG_FN lz_rng_u64 lz_rng_key(lz_rng_u64 seed) { return lz_rng_mix64(seed ^ 0x6A09E667F3BCC909ull); }

/* 64 random bits for element i: splitmix64's stream at counter + i + 1 */
LZ_RNG_FN lz_rng_u64 lz_rng_bits(lz_rng_u64 key, lz_rng_u64 counter, lz_rng_i64 i)
{
    return lz_rng_mix64(key + (counter + (lz_rng_u64)i + 1) * LZ_RNG_GOLDEN);
}

/* ---- float helpers: branch-free, so the CPU's loops vectorise ---- */

LZ_RNG_FN lz_rng_u32 lz_rng_f32_bits(float f)
{
#if defined(__CUDACC_RTC__)
    return __float_as_uint(f);
#else
    union { float f; uint32_t u; } v = {.f = f};
    return v.u;
#endif
}

LZ_RNG_FN float lz_rng_f32_from_bits(lz_rng_u32 u)
{
#if defined(__CUDACC_RTC__)
    return __uint_as_float(u);
#else
    union { uint32_t u; float f; } v = {.u = u};
    return v.f;
#endif
}

/* c ? a : b as a mask blend (GCC turns a float ?: into a branch) */
LZ_RNG_FN float lz_rng_select(int c, float a, float b)
{
    lz_rng_u32 m = 0u - (lz_rng_u32)(c != 0);
    return lz_rng_f32_from_bits((lz_rng_f32_bits(a) & m) | (lz_rng_f32_bits(b) & ~m));
}

/* log(u) for u in [2^-24, 1] (normal floats), FreeBSD's logf reduction
   and polynomial: about 1 ulp. */
LZ_RNG_FN float lz_rng_log(float u)
{
    lz_rng_u32 ix = lz_rng_f32_bits(u) + (0x3f800000u - 0x3f3504f3u);
    float k = (float)((lz_rng_i32)(ix >> 23) - 0x7f);
    float f = lz_rng_f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;  /* m - 1, m in [sqrt(.5), sqrt(2)) */
    float s = f / (2.0f + f), z = s * s, w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

/* cos(2 pi u) for u in [0, 1): reduced to x = 2 pi b with b in [0, 1/4]
   exactly (u - 1/2 and 1/2 - a are exact), then Taylor to x^12, whose
   error on [0, pi/2] is below 1e-8. */
LZ_RNG_FN float lz_rng_cos2pi(float u)
{
    float a = fabsf(u - 0.5f);              /* cos(2 pi u) = -cos(2 pi a) */
    int flip = a > 0.25f;
    float x = 6.28318530718f * lz_rng_select(flip, 0.5f - a, a);
    float z = x * x;
    float c = 1.0f + z * (-0.5f + z * (4.16666667e-2f + z * (-1.38888889e-3f +
              z * (2.48015873e-5f + z * (-2.75573192e-7f + z * 2.08767570e-9f)))));
    return lz_rng_select(flip, c, -c);
}

/* ---- lz_from_random's draws (the backends' fill_random) ---- */

/* element of a uniform fill in [a, a + span) from 24 random bits */
LZ_RNG_FN float lz_rng_fill_uniform(lz_rng_u64 r, float a, float span)
{
    return a + span * ((float)(lz_rng_i32)(r >> 40) * (1.0f / 16777216.0f));
}

/* element of a normal fill (mean a, deviation b): Box-Muller on two
   24-bit uniforms, u1 in (0, 1] so the log is finite */
LZ_RNG_FN float lz_rng_fill_normal(lz_rng_u64 r, float a, float b)
{
    const float unit = 1.0f / 16777216.0f;
    float u1 = (float)((lz_rng_i32)(r >> 40) + 1) * unit;
    float u2 = (float)(lz_rng_i32)((r >> 16) & 0xFFFFFFu) * unit;
    return a + b * (sqrtf(-2.0f * lz_rng_log(u1)) * lz_rng_cos2pi(u2));
}

/* ---- the dropout mask (LZ_OP_DROPOUT_MASK): integers alone ---- */

/* drop when the top 32 bits fall below prob * 2^32 (the host computes it
   once per step) */
LZ_RNG_FN lz_rng_u64 lz_rng_dropout_threshold(float prob)
{
    const double th = (double)prob * 4294967296.0;
    return th >= 4294967296.0 ? 4294967296ull : th <= 0 ? 0 : (lz_rng_u64)(th + 0.5);
}

/* the kept elements' value, 1/(1-p) */
LZ_RNG_FN float lz_rng_dropout_keep(float prob) { return prob < 1.0f ? 1.0f / (1.0f - prob) : 0.0f; }

LZ_RNG_FN float lz_rng_dropout_element(lz_rng_u64 r, lz_rng_u64 thresh, float keep)
{
    return (r >> 32) < thresh ? 0.0f : keep;
}

/* ---- LZ_OP_RAND ---- */

/* uniform [0, 1) from the top 24 bits (exact in f32) */
LZ_RNG_FN float lz_rng_rand_uniform(lz_rng_u64 r) { return (float)(r >> 40) * (1.0f / 16777216.0f); }

/* normal(0, 1) by Box-Muller in double from the two 32-bit halves (u1 in
   (0, 1]). The double log and cos are each device's libm: the float
   results agree except where a double rounding error of an ulp crosses a
   float rounding boundary (about one element in 2^28). */
LZ_RNG_FN float lz_rng_rand_normal(lz_rng_u64 r)
{
    double u1 = ((double)(r >> 32) + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)(r & 0xFFFFFFFFu) * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
