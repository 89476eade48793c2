/* Host memory filled from the counter-based generator (base/rng.h), in
 * parallel and vectorised: the parameter initialisers' draws. Internal to
 * the library; lz_from_random (include/lazyc.h) is the public call. */
#ifndef LZ_CPU_RANDOM_FILL_H
#define LZ_CPU_RANDOM_FILL_H

#include <stdint.h>

/* dst[i] for i < n from (seed, i) alone: dist 0 uniform in [a, b) from 24
   random bits (a + (b - a) u rounds to b at worst), dist 1 normal with mean a and standard deviation b (Box-Muller
   on two 24-bit uniforms, so |x - a| <= 5.77 b). The numbers do not depend
   on the thread count: work is cut into fixed blocks, each computed whole
   by one thread. */
void lz_cpu_fill_random(float *dst, int64_t n, uint64_t seed, int dist, float a, float b);

#endif
