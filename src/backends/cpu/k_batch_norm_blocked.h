/* The batch-norm kernels for a channel-blocked x (k_batch_norm_blocked.c);
 * k_batch_norm.c's kernels hand a step to these when x is blocked, so the
 * kernel table keeps one entry per op. */
#ifndef LZ_CPU_K_BATCH_NORM_BLOCKED_H
#define LZ_CPU_K_BATCH_NORM_BLOCKED_H

#include "backends/cpu/kernels.h"

const char *lz_cpu_bn_stats_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_bn_apply_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_bn_grad_stats_blocked(const lz_program *p, const lz_instr *s,
                                         void *const *ptrs);
const char *lz_cpu_bn_grad_blocked(const lz_program *p, const lz_instr *s, void *const *ptrs);

#endif
