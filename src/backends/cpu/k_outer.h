/* bf16 outer products with streaming stores (k_outer.c): c[M, N] = a b
 * over a small inner dimension K, a [M, K] (or [K, M] with ta), b [K, N],
 * c float32. Internal to the CPU backend. */
#ifndef LZ_CPU_K_OUTER_H
#define LZ_CPU_K_OUTER_H

#include <stdint.h>

/* Whether a product of these sizes runs here: K at most 8, b not
   transposed, a result of 32 MiB or more, and a CPU with AVX-512. */
int  lz_cpu_outer_fits(int64_t M, int64_t N, int64_t K, int tb);
void lz_cpu_outer_bf16(const uint16_t *a, int ta, const uint16_t *b, float *c, int64_t M,
                       int64_t N, int64_t K);

#endif
