/* bfloat16 <-> float32, one element. bf16 is float32's upper half: the
 * same exponent range, 8 bits of significand. To bf16 rounds to nearest,
 * ties to even, on the integer bits (so subnormals round like any other
 * value, as PyTorch's c10::BFloat16 does; AVX512_BF16's VCVTNEPS2BF16
 * flushes them to zero, so it is not used); NaN stays NaN, quiet (the
 * sign and upper payload kept), and +-Inf stays Inf. The way back is exact. */
#ifndef LZ_BF16_H
#define LZ_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t lz_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float lz_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
