/* Kernel time by op, for lz_profile_read: the backend adds each kernel's
 * time while profiling is on (lz_profile_enable). */
#ifndef LZ_CORE_PROFILE_H
#define LZ_CORE_PROFILE_H

/* Whether kernels are being timed: one relaxed load, cheap enough to ask
   before every kernel. */
int  lz_profile_on(void);
/* One kernel of op ran for ms; library: it ran a library primitive
   (oneDNN) rather than lazyc's own kernel. */
void lz_profile_add(int op, int library, double ms);
/* Whether kernels are also timed by step shape (lz_profile_enable(2)). */
int  lz_profile_steps_on(void);
/* lz_profile_add, and the same kernel keyed by its operands' text
   (dtypes and shapes, lz_profile_step_entry.operands) too, under one lock;
   flops: what one call computes (0 where not counted). */
void lz_profile_add_step(int op, int library, const char *operands, double flops, double ms);

#endif
