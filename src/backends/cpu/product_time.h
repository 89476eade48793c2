/* Timing a product autocast asks about both ways (product_time.c). */
#ifndef LZ_CPU_PRODUCT_TIME_H
#define LZ_CPU_PRODUCT_TIME_H

#include <stdint.h>

/* Runs the product (op and dims as base/product.h lays them out) and its
   two backward products on made-up operands, with float32 operands and
   with bf16 ones, through the kernels and layouts a program of it would
   get, in turn, and sets each dtype's best time for the three, in ms.
   0, or -1 when it cannot (a shape these kernels do not take, no memory):
   the caller then decides by rule. Leaves the caller's error state as it
   was. */
int lz_cpu_time_product(int op, int n, const int64_t *dims, double *ms_f32, double *ms_bf16);

/* Held by a program's run (backend.c) and by the timing: kernels share
   per-thread scratch by team thread number (scratch.h), so they must not
   run beside each other, and a timing beside a step measures neither. */
void lz_cpu_kernels_lock(void);
void lz_cpu_kernels_unlock(void);

#endif
