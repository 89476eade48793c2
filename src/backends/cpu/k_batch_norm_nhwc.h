/* The batch-norm kernels for a channels-last x (k_batch_norm_nhwc.c);
 * k_batch_norm.c's kernels hand a step to these when lz_cpu_bn_nhwc says
 * so, and to k_batch_norm_blocked.c's for other blocks. */
#ifndef LZ_CPU_K_BATCH_NORM_NHWC_H
#define LZ_CPU_K_BATCH_NORM_NHWC_H

#include "backends/cpu/kernels.h"

/* The widest channels-last x these kernels take (their per-row sums and
   bf16 tiles are stack arrays of this many floats; wider x stays plain,
   operand_layouts.c) */
#define LZ_BN_NHWC_MAX_C 4096

/* Whether x is channels-last with more channels than one AVX-512 block
   (16 or fewer: the same bytes as one block of nChw16c or nChw8c, which
   the blocked kernels run) */
static inline int lz_cpu_bn_nhwc(const lz_value *x)
{
    return x->block > 16 && x->block == x->shape[1];
}

const char *lz_cpu_bn_stats_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_bn_apply_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_bn_grad_stats_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_bn_grad_nhwc(const lz_program *p, const lz_instr *s, void *const *ptrs);

#endif
