/* Step boundaries: cut, hash, compile or hit, enqueue. */
#ifndef LZ_STEP_H
#define LZ_STEP_H

#include "core/tensor.h"

/* Cuts one graph for the pending nodes roots[0..n), finds or compiles its
   executable, enqueues one execution and materialises the roots on
   placeholder buffers. 0, or -1 with the error set (nothing enqueued). */
int lz_run_roots(lz_node *const *roots, int n);

#endif
