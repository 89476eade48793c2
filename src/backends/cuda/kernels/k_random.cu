/* The counter-based generator on the device: lz_from_random's fills, the
 * dropout mask and LZ_OP_RAND. The formulas are base/rng.h's, the file the
 * CPU backend compiles, and this module is compiled with --fmad=false, so
 * both devices draw the same bits (a run can move between them). */
#include "k_common.cuh"
#include "base/rng.h"

extern "C" __global__ void lz_fill_random(const lz_cu_fill_random_args a)
{
    if (a.dist == 0) {
        const float span = a.b - a.a;
        LZ_GRID_LOOP(i, a.n) a.dst[i] = lz_rng_fill_uniform(lz_rng_bits(a.key, 0, i), a.a, span);
    } else {
        LZ_GRID_LOOP(i, a.n) a.dst[i] = lz_rng_fill_normal(lz_rng_bits(a.key, 0, i), a.a, a.b);
    }
}

/* (seed, counter) live on the device: a captured step reads the
   generator's state of this call, not the traced one */
extern "C" __global__ void lz_dropout_mask(const lz_cu_random_op_args a)
{
    const u64 key = lz_rng_key(a.seed[0]), counter = a.counter[0];
    LZ_GRID_LOOP(i, a.n) a.out[i] = lz_rng_dropout_element(lz_rng_bits(key, counter, i), a.thresh, a.keep);
}

extern "C" __global__ void lz_rand(const lz_cu_random_op_args a)
{
    const u64 key = lz_rng_key(a.seed[0]), counter = a.counter[0];
    if (a.normal) {
        LZ_GRID_LOOP(i, a.n) a.out[i] = lz_rng_rand_normal(lz_rng_bits(key, counter, i));
    } else {
        LZ_GRID_LOOP(i, a.n) a.out[i] = lz_rng_rand_uniform(lz_rng_bits(key, counter, i));
    }
}
