/* For tests that look inside the program a barrier will run (internal
 * headers: only for tests/test_*.c, which see src/; testlib.c stays on the
 * public API, as tests/dist builds it without them). */
#ifndef LZ_TESTLIB_COMPILE_H
#define LZ_TESTLIB_COMPILE_H

#include "compile/executable.h"
#include "engine/cache.h"
#include "engine/tensor.h"
#include "ir/graph.h"

/* The executable a barrier on read[0..n) runs, compiled here and put in
   the cache, where that barrier finds it (no second compile); the caller
   inspects it and lz_executable_unref's it. NULL if the compile failed. */
static inline lz_executable *lz_test_compile_step(lz_tensor *const *read, int n)
{
    lz_node *roots[16];
    if (n > 16) return NULL;
    for (int k = 0; k < n; k++) roots[k] = read[k]->node;
    lz_graph g;
    lz_graph_cut(&g, roots, n);
    lz_executable *e = lz_compile(&g);
    if (e) lz_cache_insert(e);
    lz_graph_release(&g);
    return e;
}

#endif
