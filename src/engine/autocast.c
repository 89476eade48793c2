/* Autocast regions: a stack of dtypes and the cast cache of the outermost
 * region. The state is the library's, like the scope stack: regions are
 * opened and closed by the thread that owns the runtime. */
#include "engine/autocast.h"

#include <stdlib.h>

#include "backend/buffer.h"
#include "autograd/autograd.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/thread.h"
#include "engine/capture_hooks.h"
#include "engine/tensor.h"
#include "runtime/executor.h"

#define MAX_DEPTH 16
_Static_assert(MAX_DEPTH == sizeof ((lz_autocast_regions *)0)->stack / sizeof(lz_dtype),
               "lz_autocast_regions holds every region");

static lz_dtype stack[MAX_DEPTH];
static int depth;

/* A cast is recognised by its tensor and the tensor's version, never by a
   node's address: a node freed by an assignment can be reallocated at the
   same address for the next value. */
typedef struct entry {
    lz_tensor *src;      /* retained: its address cannot be reused while cached */
    uint64_t version;    /* src's version when cast: every assignment bumps it */
    lz_tensor *cast;
} entry;

static entry *cache;
static int n_cache, cap_cache;

/* A parameter's bf16 copy (engine/autocast.h). Kept because the update
   holds the new value in its kernel anyway: writing the copy there costs 2
   bytes a value, where a cast in the next step reads 4 and writes 2. */
typedef struct lz_bf16_copy {
    lz_tensor *w;        /* retained */
    lz_tensor *s;        /* the copy, retained; NULL until made (at first use, or by a refresh) */
    uint64_t version;    /* w's version that s holds */
    int wanted;          /* a product read w under autocast since the last refresh */
    int refreshed;       /* an optimizer update has written s (lz_autocast_copy_store) */
    int unmanaged;       /* w changed without one: no copy is made from its value again */
} lz_bf16_copy;

static lz_bf16_copy **copies;
static int n_copies, cap_copies;

static void sweep_copies(void);

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
    if (--depth == 0) {
        lz_autocast_cache_clear();
        sweep_copies();
    }
    return 0;
}

int lz_autocast_regions_open(void) { return depth; }

void lz_autocast_save(lz_autocast_regions *r)
{
    r->depth = depth;
    for (int i = 0; i < depth; i++) r->stack[i] = stack[i];
}

int lz_autocast_check_restore(const lz_autocast_regions *r)
{
    int same = depth == r->depth;
    for (int i = 0; same && i < depth; i++) same = stack[i] == r->stack[i];
    if (same) return 1;
    const int was_open = depth > 0;
    depth = r->depth;
    for (int i = 0; i < depth; i++) stack[i] = r->stack[i];
    if (was_open && !depth) {   /* as lz_autocast_end of the outermost region */
        lz_autocast_cache_clear();
        sweep_copies();
    }
    return 0;
}

int lz_autocast_cacheable(const lz_tensor *x)
{
    x = lz_tensor_of(x);   /* an lz_retain handle stands for its tensor */
    return x->requires_grad && !x->ag;
}

/* A cast made under no_grad has no autograd record: in grad mode it would
   cut the parameter off from its gradient, so it is made again there. */
static int cast_usable(const entry *e, const lz_tensor *x)
{
    if (e->version != lz_tensor_of(x)->version) return 0;
    return !lz_grad_enabled() || lz_tensor_of(e->cast)->ag != NULL;
}

lz_tensor *lz_autocast_cached(lz_tensor *x)
{
    for (int i = 0; i < n_cache; i++)
        if (lz_tensor_of(cache[i].src) == lz_tensor_of(x))
            return cast_usable(&cache[i], x) ? cache[i].cast : NULL;
    return NULL;
}

int lz_autocast_cache_put(lz_tensor *x, lz_tensor *cast)
{
    if (!lz_autocast_cacheable(x)) return -1;
    for (int i = 0; i < n_cache; i++)
        if (lz_tensor_of(cache[i].src) == lz_tensor_of(x)) {   /* x assigned since, or a no_grad cast */
            lz_free(cache[i].cast);
            cache[i].version = lz_tensor_of(x)->version;
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
    cache[n_cache++] = (entry){lz_retain(x), lz_tensor_of(x)->version, cast};
    return 0;
}

static int find_copy(const lz_tensor *w)
{
    const lz_tensor *t = lz_tensor_of(w);
    for (int i = 0; i < n_copies; i++)
        if (lz_tensor_of(copies[i]->w) == t) return i;
    return -1;
}

static void drop_copy_at(int i)
{
    lz_bf16_copy *e = copies[i];
    if (e->s) {
        lz_tensor_of(e->s)->bf16_copy = NULL;
        lz_free(e->s);
    }
    lz_free(e->w);
    free(e);
    copies[i] = copies[--n_copies];
}

/* Copies of parameters nothing but the copies hold (a model freed). */
static void sweep_copies(void)
{
    for (int i = n_copies - 1; i >= 0; i--) {
        const lz_tensor *w = lz_tensor_of(copies[i]->w);
        if (!lz_tensor_held(w, 1)) drop_copy_at(i);   /* the entry's own handle aside */
    }
}

/* w's entry, made if it has none, marked wanted; NULL out of memory. */
static lz_bf16_copy *want(lz_tensor *w)
{
    int i = find_copy(w);
    if (i < 0) {
        if (n_copies == cap_copies) {
            int nc = cap_copies ? 2 * cap_copies : 64;
            lz_bf16_copy **p = lz_host_realloc(copies, sizeof *p * (size_t)nc);
            if (!p) return NULL;
            copies = p;
            cap_copies = nc;
        }
        lz_bf16_copy *e = lz_host_calloc(1, sizeof *e);
        if (!e || !(e->w = lz_retain(w))) {
            free(e);
            return NULL;
        }
        i = n_copies;
        copies[n_copies++] = e;
    }
    copies[i]->wanted = 1;
    return copies[i];
}

/* w's copy made now by the backend, from w's value (data, waited for: a
   buffer is read only after its writer ran), rounded as lz_cast rounds.
   A first step then reads a copy as every later
   one does, so both are one graph (one compile, one arena). NULL when w is
   pending or out of memory (the step casts w instead). */
static lz_tensor *copy_from_data(lz_tensor *w)
{
    const lz_node *n = lz_tensor_of(w)->node;
    if (n->dtype != LZ_F32 || !n->buf || lz_executor_wait_buffer(n->buf) != 0) return NULL;
    const int64_t numel = lz_node_numel(n);
    lz_buffer *b = lz_buffer_new(sizeof(uint16_t) * (size_t)numel);
    if (!b) return NULL;
    if (lz_buffer_to_bf16("lz_autocast", b, n->buf, numel)) {   /* on the device */
        lz_buffer_unref(b);
        return NULL;
    }
    lz_node *c = lz_node_new_data(b, LZ_BF16, n->ndim, n->shape);
    lz_buffer_unref(b);
    lz_tensor *t = c ? lz_tensor_wrap(c) : NULL;
    lz_tensor *kept = t ? lz_retain(t) : NULL;   /* the table's handle, in no scope */
    lz_free(t);
    return kept;
}

lz_tensor *lz_autocast_copy_for(lz_tensor *w)
{
    lz_bf16_copy *e = want(w);
    if (!e) return NULL;   /* out of memory for the entry: w is cast, as before */
    if (!e->s && !e->unmanaged && (e->s = copy_from_data(w))) {
        lz_tensor_of(e->s)->bf16_copy = e;
        e->version = lz_tensor_of(w)->version;
        lz_capture_note_internal_state();   /* a trace binds it from the next call on */
    }
    if (!e->s) return NULL;
    if (lz_tensor_of(w)->version == e->version) return e->s;
    if (!e->refreshed) {
        /* w is updated by something other than SGD or AdamW (its own
           lz_assign): the copy would never hold again, so none is kept and
           w is cast every step, as before */
        e->unmanaged = 1;
        lz_tensor_of(e->s)->bf16_copy = NULL;
        lz_free(e->s);
        e->s = NULL;
        return NULL;
    }
    /* w was assigned since: this step casts it and its update makes the
       copy good again, so a trace of it is a warm-up (the next call traces
       with the copy, not with the cast) */
    lz_capture_note_internal_state();
    return NULL;
}

int lz_autocast_copy_count(void)
{
    int n = 0;
    for (int i = 0; i < n_copies; i++) n += copies[i]->s != NULL;
    return n;
}

int lz_autocast_take_wanted(lz_tensor *w)
{
    const int i = find_copy(w);
    if (i < 0 || !copies[i]->wanted) return 0;
    copies[i]->wanted = 0;
    return 1;
}

int lz_autocast_copy_store(lz_tensor *w, lz_tensor *value)
{
    const int i = find_copy(w);
    if (i < 0) return -1;
    lz_bf16_copy *e = copies[i];
    if (e->s) {
        if (lz_assign(e->s, value) != 0) return -1;
    } else {
        if (!(e->s = lz_retain(value))) return -1;
        lz_tensor_of(e->s)->bf16_copy = e;
        lz_capture_note_internal_state();   /* the next call finds the copy made */
    }
    e->version = lz_tensor_of(w)->version;
    e->refreshed = 1;
    e->unmanaged = 0;
    return 0;
}

void lz_autocast_copy_drop(lz_tensor *w)
{
    const int i = find_copy(w);
    if (i >= 0) drop_copy_at(i);
}

int lz_autocast_copy_stale(const lz_tensor *t)
{
    const lz_bf16_copy *e = lz_tensor_of(t)->bf16_copy;
    return e && lz_tensor_of(e->w)->version != e->version;
}

void lz_autocast_copy_rebase(lz_tensor *t)
{
    lz_bf16_copy *e = lz_tensor_of(t)->bf16_copy;
    if (e) e->version = lz_tensor_of(e->w)->version;
}

void lz_autocast_shutdown(void)
{
    lz_autocast_cache_clear();
    free(cache);
    cache = NULL;
    cap_cache = 0;
    depth = 0;
    while (n_copies) drop_copy_at(n_copies - 1);
    free(copies);
    copies = NULL;
    cap_copies = 0;
}

void lz_autocast_cache_clear(void)
{
    for (int i = 0; i < n_cache; i++) {
        lz_free(cache[i].cast);
        lz_free(cache[i].src);
    }
    n_cache = 0;
}
