/* Step boundaries: cut, hash, compile or hit, enqueue. */
#ifndef LZ_STEP_H
#define LZ_STEP_H

#include "core/tensor.h"

/* Cuts one graph for the pending nodes roots[0..n), finds or compiles its
   executable, enqueues one execution and materialises the roots on
   placeholder buffers. 0, or -1 with the error set (nothing enqueued). */
int lz_run_roots(lz_node *const *roots, int n);

/* lz_sync without the graph-break check: for the library's own syncs. */
int lz_sync_tensors(lz_tensor *const *ts, int n, int wait);

#include "compile/executable.h"
/* The executable for g: a cache hit, or a compile (counted). */
lz_executable *lz_find_or_compile(const lz_graph *g);
/* Enqueues one execution of exe for g and materialises g's outputs on new
   placeholder buffers. 0, or -1 with the error set. */
int lz_execute_graph(const lz_graph *g, lz_executable *exe);

#endif
