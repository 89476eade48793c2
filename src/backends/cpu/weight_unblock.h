/* A convolution's weight gradient out of oneDNN's blocked weight layout
 * into the program's plain OIHW (weight_unblock.c). */
#ifndef LZ_CPU_WEIGHT_UNBLOCK_H
#define LZ_CPU_WEIGHT_UNBLOCK_H

#include <dnnl.h>
#include <stdint.h>

/* The block b (16 or 8) when md is f32 OIHW in oneDNN's OIhw{b}i{b}o
   layout (tag ABcd{b}b{b}a), dense, with whole blocks on both channel
   axes and at most LZ_UNBLOCK_MAX_TAPS taps; else 0 (oneDNN's reorder
   then). */
#define LZ_UNBLOCK_MAX_TAPS 25
int lz_cpu_unblock_fits(const dnnl_memory_desc_t *md);

/* dst[o][i][t] = src's element (o, i, t) for O x I x taps weights in
   block b's layout (lz_cpu_unblock_fits); parallel over the blocks. */
void lz_cpu_weight_unblock(const float *src, float *dst, int64_t O, int64_t I, int64_t taps, int b);

#endif
