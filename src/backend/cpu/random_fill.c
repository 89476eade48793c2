/* The initialisers' draws at memory speed: a model's parameters (138 M
 * values for vgg16) were drawn one by one with libm's log and cos on the
 * recording thread, seconds before the first step. Here every element is
 * a pure function of (seed, i), the loops are branch-free f32 (GCC
 * vectorises them; libm's calls would keep them scalar) and blocks of a
 * fixed size are spread over the OpenMP team. A block is computed whole by
 * one thread with the same code whatever the team, and the build keeps
 * -ffp-contract=off, so 1 and 2 threads give the same bits
 * (tests/test_init_fill.c). */
#include "backend/cpu/random_fill.h"

#include <math.h>

#include "backend/cpu/rng_bits.h"
#include "backend/cpu/vec_math.h"

/* elements (64 KiB of floats): large enough to amortise the loop, small
   enough that a tensor of a few blocks still splits over the team */
enum { BLOCK = 1 << 14 };

/* log(u) for u in [2^-24, 1] (normal floats), FreeBSD's logf reduction
   and polynomial: about 1 ulp. */
static inline float vlog_f32(float u)
{
    uint32_t ix = f32_bits(u) + (0x3f800000u - 0x3f3504f3u);
    float k = (float)((int32_t)(ix >> 23) - 0x7f);
    float f = f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;  /* m - 1, m in [sqrt(.5), sqrt(2)) */
    float s = f / (2.0f + f), z = s * s, w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

/* cos(2 pi u) for u in [0, 1): reduced to x = 2 pi b with b in [0, 1/4]
   exactly (u - 1/2 and 1/2 - a are exact), then Taylor to x^12, whose
   error on [0, pi/2] is below 1e-8. */
static inline float vcos2pi_f32(float u)
{
    float a = fabsf(u - 0.5f);              /* cos(2 pi u) = -cos(2 pi a) */
    int flip = a > 0.25f;
    float x = 6.28318530718f * select_f32(flip, 0.5f - a, a);
    float z = x * x;
    float c = 1.0f + z * (-0.5f + z * (4.16666667e-2f + z * (-1.38888889e-3f +
              z * (2.48015873e-5f + z * (-2.75573192e-7f + z * 2.08767570e-9f)))));
    return select_f32(flip, c, -c);
}

static void fill_block(float *dst, int64_t i0, int64_t i1, uint64_t key, int dist, float a, float b)
{
    const float unit = 1.0f / 16777216.0f;
    if (dist == 0) {
        const float span = b - a;
        for (int64_t i = i0; i < i1; i++) {
            uint64_t r = lz_rng_bits(key, 0, i);
            dst[i] = a + span * ((float)(int32_t)(r >> 40) * unit);
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        uint64_t r = lz_rng_bits(key, 0, i);
        float u1 = (float)((int32_t)(r >> 40) + 1) * unit;               /* (0, 1] */
        float u2 = (float)(int32_t)((r >> 16) & 0xFFFFFFu) * unit;       /* [0, 1) */
        /* the file is built with -fno-math-errno (CMakeLists.txt): with
           errno, sqrtf keeps a branch and the loop scalar */
        dst[i] = a + b * (sqrtf(-2.0f * vlog_f32(u1)) * vcos2pi_f32(u2));
    }
}

void lz_cpu_fill_random(float *dst, int64_t n, uint64_t seed, int dist, float a, float b)
{
    const uint64_t key = lz_rng_key(seed);
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
    #pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t k = 0; k < blocks; k++) {
        int64_t i0 = k * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
        fill_block(dst, i0, i1, key, dist, a, b);
    }
}
