/* Pooling kernels (k_pool.c); the conv family's lookup (k_conv.c) hands
 * them out, so the kernel table needs no entry of its own. */
#ifndef LZ_CPU_K_POOL_H
#define LZ_CPU_K_POOL_H

#include "backends/cpu/kernels.h"

/* The kernel for a *POOL2D* op, or NULL. */
lz_kernel lz_cpu_pool_kernel(lz_op op);

#endif
