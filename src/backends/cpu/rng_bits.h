/* The bits of lazyc's counter-based random numbers: element i of a stream
 * is a pure function of (key, counter + i), so any thread may compute any
 * element. Internal to the CPU backend. */
#ifndef LZ_CPU_RNG_BITS_H
#define LZ_CPU_RNG_BITS_H

#include <stdint.h>

#define LZ_RNG_GOLDEN 0x9E3779B97F4A7C15ull

/* splitmix64's finaliser: a bijection of 64-bit words whose outputs on
   consecutive inputs pass BigCrush */
static inline uint64_t lz_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A seed mixed into a key, so nearby seeds give unrelated streams. */
static inline uint64_t lz_rng_key(uint64_t seed) { return lz_rng_mix64(seed ^ 0x6A09E667F3BCC909ull); }

/* 64 random bits for element i: splitmix64's stream at counter + i + 1 */
static inline uint64_t lz_rng_bits(uint64_t key, uint64_t counter, int64_t i)
{
    return lz_rng_mix64(key + (counter + (uint64_t)i + 1) * LZ_RNG_GOLDEN);
}

#endif
