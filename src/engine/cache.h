/* The executable cache: keyed by graph hash, confirmed by structure, LRU
 * with pinning (entries a capture replays are never evicted). */
#ifndef LZ_CACHE_H
#define LZ_CACHE_H

#include "compile/executable.h"

/* The executable for g (a new reference), or NULL on a miss. */
lz_executable *lz_cache_find(const lz_graph *g);
/* Adds e (the cache takes its own reference) and evicts the least recently
   used unpinned entries beyond the capacity (LZ_CACHE_CAPACITY, default 512). */
void lz_cache_insert(lz_executable *e);
/* On a miss, for explaining it: the cached executable whose signature
   shares the longest prefix with g's (the most recently used on a tie),
   with that length in *common; NULL when the cache is empty. O(cache). */
const lz_executable *lz_cache_nearest(const lz_graph *g, size_t *common);
int  lz_cache_size(void);
void lz_cache_set_capacity(int capacity);
void lz_cache_clear(void);

#endif
