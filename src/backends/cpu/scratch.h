/* Per-thread scratch memory for kernels (im2col columns, partial sums).
 * Kernels run on one executor thread and its OpenMP team, one program at
 * a time, so slot t belongs to team thread t for the length of a kernel.
 * A buffer is kept and grown, never shrunk: a fresh malloc of a large
 * block each call is a fresh mmap whose pages fault in (and are zeroed by
 * the kernel) on every step. */
#ifndef LZ_CPU_SCRATCH_H
#define LZ_CPU_SCRATCH_H

#include <stddef.h>

/* What a buffer is for: a kernel may hold one of each at once. */
enum { LZ_SCRATCH_COLUMNS, LZ_SCRATCH_PARTIALS, LZ_SCRATCH_KINDS };

/* At least nbytes (64-byte aligned) of the given kind for the calling team
   thread, valid until that thread asks for that kind again; NULL when out
   of memory. */
void *lz_cpu_scratch(int kind, size_t nbytes);
/* Frees every slot's buffer (between executions only). */
void  lz_cpu_scratch_trim(void);

#endif
