/* Branch-free f32 helpers for loops that must vectorise: libm's expf is a
 * call, which keeps a loop scalar, and GCC turns a float ?: into a branch.
 * Internal to the CPU backend. */
#ifndef LZ_CPU_VEC_MATH_H
#define LZ_CPU_VEC_MATH_H

#include <stdint.h>

/* For loops bound by arithmetic, not memory (gelu, exp, dropout masks):
   an AVX-512 copy beside the build's own, chosen when the library loads by
   what the CPU reports. The build leaves AVX-512 out (CMakeLists.txt:
   valgrind cannot run it, and it does not report it, so there the build's
   copy runs). Without contraction (C11) both copies round every operation
   alike, so the values do not depend on which runs. Not under
   ThreadSanitizer: the loader runs the choosing function before TSan's
   runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX512F__) && \
    !defined(__SANITIZE_THREAD__)
#define LZ_MATH_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define LZ_MATH_CLONES
#endif

static inline uint32_t f32_bits(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    return v.u;
}

static inline float f32_from_bits(uint32_t u)
{
    union { uint32_t u; float f; } v = {.u = u};
    return v.f;
}

/* c ? a : b as a mask blend: GCC turns a ?: on floats back into a branch
   when it can fold one arm (a clamp) into the arithmetic after it, and
   floating-point code under a branch does not vectorise */
static inline float select_f32(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)(c != 0);
    return f32_from_bits((f32_bits(a) & m) | (f32_bits(b) & ~m));
}

/* exp(yh + yl) for a small correction yl (it only joins the reduced
   argument). Subnormal results are kept; below -104 the result rounds to 0,
   above ~88.72 it is inf; NaN passes. */
static inline float vexp_f32_2(float yh, float yl)
{
    /* out-of-range arguments are computed as exp(0) and replaced at the end:
       clamping them to -104 instead would make every masked-out softmax
       entry an underflowing multiply, which x86 runs in microcode */
    int lo = yh < -104.0f;
    float yc = select_f32(lo, 0.0f, select_f32(yh > 89.0f, 89.0f, yh));
    const float magic = 0x1.8p23f; /* adding it rounds to an integer */
    float kf = yc * 1.44269504088896341f + magic;
    int32_t k = (int32_t)(f32_bits(kf) - f32_bits(magic)); /* in [-150, 128] */
    kf -= magic;
    /* y = k ln2 + r; ln2's high part has spare low bits so k * LN2_HI is
       exact */
    float r = ((yc - kf * 0.693145751953125f) + yl) - kf * 1.42860682030941723212e-6f;
    float q = 4.999999345e-01f +
              r * (1.666652069e-01f +
                   r * (4.166838737e-02f + r * (8.368709988e-03f + r * 1.381461330e-03f)));
    float p = 1.0f + (r + r * r * q);
    /* 2^k as two factors that both stay normal; the second product rounds
       once, into a subnormal or to inf where the result needs it */
    int32_t k1 = k >> 1, k2 = k - k1;
    float s1 = f32_from_bits((uint32_t)(k1 + 127) << 23);
    float s2 = f32_from_bits((uint32_t)(k2 + 127) << 23);
    return select_f32(lo, 0.0f, p * s1 * s2);
}

/* -0.0f, not 0.0f: y + -0.0f == y for every y, so the compiler drops the
   addition (y + 0.0f would turn -0 into +0 and has to stay) */
static inline float vexp_f32(float y)
{
    return vexp_f32_2(y, -0.0f);
}

#endif
