/* Max and adaptive-average pooling and their gradients on channel-blocked
 * operands (k_pool_blocked.c): k_pool.c's kernels hand a blocked step here. */
#ifndef LZ_CPU_K_POOL_BLOCKED_H
#define LZ_CPU_K_POOL_BLOCKED_H

#include "backends/cpu/kernels.h"

/* The pooling ops on a step whose layout is blocked: x's block for the
   forward ops, dx's for the gradients. */
const char *lz_cpu_max_pool_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_max_pool_grad_blocked(const lz_program *p, const lz_instr *s,
                                         void *const *ptrs);
const char *lz_cpu_adaptive_avg_pool_blocked(const lz_program *p, const lz_instr *s,
                                             void *const *ptrs);
const char *lz_cpu_adaptive_avg_pool_grad_blocked(const lz_program *p, const lz_instr *s,
                                                  void *const *ptrs);

#endif
