/* Autocast regions: a stack of dtypes and the cast cache of the outermost
 * region. The state is the library's, like the scope stack: regions are
 * opened and closed by the thread that owns the runtime. */
#include "engine/autocast.h"

#include <stdlib.h>

#include "base/error.h"
#include "base/thread.h"
#include "engine/tensor.h"

#define MAX_DEPTH 16

static lz_dtype stack[MAX_DEPTH];
static int depth;

typedef struct entry {
    lz_tensor *src;      /* retained: its address cannot be reused while cached */
    const lz_node *node; /* src's node when cast: an assignment since makes a new one */
    lz_tensor *cast;
} entry;

static entry *cache;
static int n_cache, cap_cache;

lz_dtype lz_autocast_dtype(void) { return depth ? stack[depth - 1] : LZ_F32; }

int lz_autocast_begin(lz_dtype dtype)
{
    if (lz_owner_check("lz_autocast_begin")) return -1;
    if (dtype != LZ_BF16 && dtype != LZ_F32)
        return lz_errorf_int("lz_autocast_begin: dtype %s not supported (LZ_BF16, or LZ_F32 "
                             "for a region without autocast)", lz_dtype_name(dtype));
    if (depth == MAX_DEPTH)
        return lz_errorf_int("lz_autocast_begin: more than %d nested regions", MAX_DEPTH);
    stack[depth++] = dtype;
    return 0;
}

int lz_autocast_end(void)
{
    if (lz_owner_check("lz_autocast_end")) return -1;
    if (!depth) return lz_errorf_int("lz_autocast_end: no autocast region is open");
    if (--depth == 0) lz_autocast_cache_clear();
    return 0;
}

int lz_autocast_cacheable(const lz_tensor *x)
{
    x = lz_tensor_of(x);   /* an lz_retain handle stands for its tensor */
    return x->requires_grad && !x->ag;
}

lz_tensor *lz_autocast_cached(lz_tensor *x)
{
    for (int i = 0; i < n_cache; i++)
        if (lz_tensor_of(cache[i].src) == lz_tensor_of(x))
            return cache[i].node == x->node ? cache[i].cast : NULL;
    return NULL;
}

int lz_autocast_cache_put(lz_tensor *x, lz_tensor *cast)
{
    if (!lz_autocast_cacheable(x)) return -1;
    for (int i = 0; i < n_cache; i++)
        if (lz_tensor_of(cache[i].src) == lz_tensor_of(x)) {   /* x was assigned since: the old cast is stale */
            lz_free(cache[i].cast);
            cache[i].node = x->node;
            cache[i].cast = cast;
            lz_scope_release(cast);
            return 0;
        }
    if (n_cache == cap_cache) {
        int nc = cap_cache ? 2 * cap_cache : 64;
        entry *e = realloc(cache, sizeof *e * (size_t)nc);
        if (!e) return -1;
        cache = e;
        cap_cache = nc;
    }
    lz_scope_release(cast);
    cache[n_cache++] = (entry){lz_retain(x), x->node, cast};
    return 0;
}

void lz_autocast_shutdown(void)
{
    lz_autocast_cache_clear();
    free(cache);
    cache = NULL;
    cap_cache = 0;
    depth = 0;
}

void lz_autocast_cache_clear(void)
{
    for (int i = 0; i < n_cache; i++) {
        lz_free(cache[i].cast);
        lz_free(cache[i].src);
    }
    n_cache = 0;
}
