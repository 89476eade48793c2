/* The autocast region's state (lz_autocast_begin/end) and its cast cache.
 * Here, in the engine, because capture keys a trace by the state; the
 * ops read it to cast their operands (ops/autocast.c). */
#ifndef LZ_ENGINE_AUTOCAST_H
#define LZ_ENGINE_AUTOCAST_H

#include "lazyc.h"

/* The dtype products compute in: LZ_BF16 inside a bf16 region, LZ_F32
   outside any (or inside an lz_autocast_begin(LZ_F32) one). */
lz_dtype lz_autocast_dtype(void);
/* The bf16 cast of x made earlier in this region while x had the node it
   has now (borrowed), or NULL. Only leaves that require grad are cached
   (parameters: PyTorch's rule), so a weight is cast once per step. */
lz_tensor *lz_autocast_cached(lz_tensor *x);
/* Keeps cast as x's cast, taking over its creation handle from the
   innermost scope; -1 (cast left to the caller) when x is not cacheable
   or out of memory. */
int lz_autocast_cache_put(lz_tensor *x, lz_tensor *cast);
/* 1 if x is what the cache keeps (a leaf requiring grad). */
int lz_autocast_cacheable(const lz_tensor *x);
/* Drops every cached cast: at the end of the outermost region, and
   around a capture trace (a trace must make its own casts, not bind
   values made before it). */
void lz_autocast_cache_clear(void);
/* lz_shutdown: closes every region and frees the cache. */
void lz_autocast_shutdown(void);

#endif
