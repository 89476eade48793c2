/* Fault injection: make the N-th device allocation, the N-th kernel call
 * or the N-th host allocation of the runtime's own bookkeeping (graph
 * cutting, IR nodes, tensors, scopes, autograd records, compiler passes,
 * executor jobs: lz_host_*), or the N-th growth of a kernel's per-thread
 * scratch buffer (backends/cpu/scratch.c), fail, to test that every failure
 * path reports, recovers and leaks nothing. Armed by LZ_FAULT_ALLOC=N /
 * LZ_FAULT_KERNEL=N / LZ_FAULT_HOST=N / LZ_FAULT_SCRATCH=N (read once, at
 * the first event) or by lz_fault_set from a test. Counting is atomic:
 * allocations happen on the recording thread, kernels and their scratch on
 * the executor thread and its OpenMP team. */
#ifndef LZ_FAULT_H
#define LZ_FAULT_H

#include <stddef.h>

enum { LZ_FAULT_ALLOC, LZ_FAULT_KERNEL, LZ_FAULT_HOST, LZ_FAULT_SCRATCH, LZ_FAULT_KINDS };

/* Arms kind to fail its n-th event from now (1-based); n <= 0 disarms. */
void lz_fault_set(int kind, long n);
/* Disarms both kinds and zeroes the fired counts. */
void lz_fault_reset(void);
/* How many faults of kind have fired since the last reset. */
long lz_fault_fired(int kind);
/* Counts one event of kind; 1 if it is the one to fail (fires once). */
int  lz_fault_hit(int kind);
/* malloc, calloc and realloc, each counting one LZ_FAULT_HOST event (NULL
   when it is the one to fail; realloc then leaves p as it was). */
void *lz_host_malloc(size_t n);
void *lz_host_calloc(size_t n, size_t size);
void *lz_host_realloc(void *p, size_t n);
/* "injected fault in kernel <op>", in a per-thread buffer. */
const char *lz_fault_kernel_message(const char *op);

#endif
