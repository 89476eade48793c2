/* The autocast region's state (lz_autocast_begin/end) and its cast cache.
 * Here, in the engine, because capture keys a trace by the state; the
 * ops read it to cast their operands (ops/autocast.c). */
#ifndef LZ_ENGINE_AUTOCAST_H
#define LZ_ENGINE_AUTOCAST_H

#include "lazyc.h"

/* The dtype products compute in: LZ_BF16 inside a bf16 region, LZ_F32
   outside any (or inside an lz_autocast_begin(LZ_F32) one). */
lz_dtype lz_autocast_dtype(void);
/* The bf16 cast of x made earlier in this region at x's current version
   (borrowed), or NULL; in grad mode only a cast made in grad mode (one
   made under no_grad has no path back to x's gradient). Only leaves that
   require grad are cached (parameters: PyTorch's rule), so a weight is
   cast once per step. */
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
/* The open regions, saved around a captured step (engine/capture_trace.c):
   a region the step opens it must close, and one it did not open it must
   leave open. */
typedef struct lz_autocast_regions {
    int depth;
    lz_dtype stack[16];
} lz_autocast_regions;
void lz_autocast_save(lz_autocast_regions *r);
int  lz_autocast_regions_open(void);
/* 1 when the regions are those saved; else 0, and they are put back (the
   step's extra regions closed, the caller's reopened). */
int  lz_autocast_check_restore(const lz_autocast_regions *r);
/* lz_shutdown: closes every region, frees the cache and the copies. */
void lz_autocast_shutdown(void);

/* Parameters' bf16 copies kept across steps. A parameter a product reads
   under autocast is wanted; its optimizer update then also writes its bf16
   copy (ops/autocast.c, lz_autocast_refresh), which the next step's
   products read in place of a cast while the parameter is still at the
   version the copy was made from (lz_tensor.version). */
/* For a product that reads w's bf16 cast: marks w wanted, and returns w's
   copy (borrowed) while it holds w's current value, else NULL (also when
   out of memory for the mark). The first time, the copy is made here from
   w's value (w data: rounded on the host). A copy no update refreshed that
   w's own assignment made stale is dropped, and none is made for w again
   until an update refreshes it. */
lz_tensor *lz_autocast_copy_for(lz_tensor *w);
/* 1 if w was wanted since its last refresh; the mark is cleared. */
int lz_autocast_take_wanted(lz_tensor *w);
/* Keeps value (w cast to bf16 at w's current version) as w's copy: the
   existing copy is assigned it, or value becomes the copy (library state
   for capture); -1 on failure. */
int lz_autocast_copy_store(lz_tensor *w, lz_tensor *value);
/* Forgets w's copy, if any. */
void lz_autocast_copy_drop(lz_tensor *w);
/* How many copies are kept (tests). */
int lz_autocast_copy_count(void);
/* For capture: 1 if t is a copy whose parameter changed since it was
   made; after a replay that wrote both, lz_autocast_copy_rebase(t) says t
   holds the parameter's new value. */
int  lz_autocast_copy_stale(const lz_tensor *t);
void lz_autocast_copy_rebase(lz_tensor *t);

#endif
