/* Tensor handles and the live registry (tensors with pending IR). */
#include "engine/tensor.h"

#include <stdio.h>
#include <stdlib.h>

#include "autograd/autograd.h"
#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/thread.h"
#include "engine/step.h"

static lz_tensor *live_head;
static int live_n;
static lz_tensor *all_head;
static uint64_t next_serial = 1;

uint64_t lz_tensor_serial(void) { return next_serial; }

lz_tensor *lz_all_first(void) { return all_head; }

static void live_add(lz_tensor *t)
{
    if (t->in_live) return;
    t->in_live = 1;
    t->live_prev = NULL;
    t->live_next = live_head;
    if (live_head) live_head->live_prev = t;
    live_head = t;
    live_n++;
}

static void live_remove(lz_tensor *t)
{
    if (!t->in_live) return;
    if (t->live_prev) t->live_prev->live_next = t->live_next;
    else live_head = t->live_next;
    if (t->live_next) t->live_next->live_prev = t->live_prev;
    t->in_live = 0;
    live_n--;
}

int lz_live_count(void) { return live_n; }
lz_tensor *lz_live_first(void) { return live_head; }

void lz_live_prune(void)
{
    for (lz_tensor *t = live_head, *next; t; t = next) {
        next = t->live_next;
        if (t->node->buf) live_remove(t);
    }
}

lz_tensor *lz_tensor_wrap(lz_node *node)
{
    if (!node) return NULL;   /* its allocation failed and said so */
    lz_tensor *t = lz_host_calloc(1, sizeof *t);
    if (!t) {
        lz_node_unref(node);
        return lz_errorf("out of memory making a tensor handle");
    }
    t->refs = 1;
    t->node = node;
    t->serial = next_serial++;
    t->all_next = all_head;
    if (all_head) all_head->all_prev = t;
    all_head = t;
    if (!node->buf) live_add(t);
    if (lz_scope_register(t) != 0) {
        lz_tensor_unref(t);
        return NULL;
    }
    return t;
}

lz_tensor *lz_tensor_saved(lz_node *node, int live)
{
    lz_tensor *t = lz_host_calloc(1, sizeof *t);
    if (!t) {
        lz_node_unref(node);
        return lz_errorf("out of memory saving a value for autograd");
    }
    t->refs = 1;
    t->internal = 1;
    t->node = node;
    if (!node->buf && live) live_add(t);
    return t;
}

void lz_tensor_set_node(lz_tensor *t, lz_node *node)
{
    t = lz_tensor_of(t);
    for (lz_tensor *a = t->aliases; a; a = a->alias_next) a->node = node;
    lz_node *old = t->node;
    t->version++;
    if (t->ag && node != old) lz_ag_overwritten(t);
    if (old->buf && !node->buf) t->prev_buf_id = old->buf->id;
    t->node = node;
    lz_node_unref(old);
    if (node->buf) live_remove(t);
    else live_add(t);
}

void lz_tensor_ref(lz_tensor *t) { t->refs++; }

/* The last reference to an lz_retain handle: out of its tensor's list. */
static void free_alias(lz_tensor *a)
{
    lz_tensor **p = &a->alias_of->aliases;
    while (*p != a) p = &(*p)->alias_next;
    *p = a->alias_next;
    lz_tensor_unref(a->alias_of);
    free(a);
}

void lz_tensor_unref(lz_tensor *t)
{
    if (!t || --t->refs > 0) return;
    if (t->alias_of) {
        free_alias(t);
        return;
    }
    live_remove(t);
    if (!t->internal) {
        if (t->all_prev) t->all_prev->all_next = t->all_next;
        else all_head = t->all_next;
        if (t->all_next) t->all_next->all_prev = t->all_prev;
    }
    lz_node_unref(t->node);
    if (t->grad) lz_tensor_unref(t->grad);
    if (t->ag) lz_ag_unref(t->ag);
    free(t);
}

lz_tensor *lz_retain(lz_tensor *t)
{
    if (!t || lz_owner_check("lz_retain")) return NULL;
    lz_tensor *of = lz_tensor_of(t);
    lz_tensor *a = lz_host_calloc(1, sizeof *a);
    if (!a) return lz_errorf("lz_retain: out of memory making a handle");
    a->refs = 1;
    a->alias_of = of;
    lz_tensor_ref(of);
    a->node = of->node;   /* borrowed: the tensor holds it */
    a->serial = next_serial++;
    a->alias_next = of->aliases;
    of->aliases = a;
    return a;   /* the caller's, in no scope */
}

void lz_free(lz_tensor *t)
{
    /* From another thread the handle is left alone (leaked), not freed
       under the recording thread's feet. */
    if (!t || lz_owner_check("lz_free")) return;
    lz_scope_forget(t);
    lz_tensor_unref(t);
}

int lz_check_operands(const char *name, int n, lz_tensor *const *in)
{
    if (lz_owner_check(name)) return -1;
    for (int i = 0; i < n; i++) {
        if (in[i]) continue;
        if (!lz_last_error()) lz_errorf("%s: operand %d is NULL", name, i);
        return -1;
    }
    return 0;
}

enum { SHAPE_OK, BAD_DTYPE, BAD_NDIM, NULL_SHAPE, NEGATIVE_DIM, TOO_LARGE };

static int shape_problem(lz_dtype dtype, int ndim, const int64_t *shape, uint64_t *nbytes)
{
    if (dtype != LZ_F32 && dtype != LZ_I64 && dtype != LZ_I32 && dtype != LZ_BF16) return BAD_DTYPE;
    if (ndim < 0 || ndim > LZ_MAX_DIMS) return BAD_NDIM;
    if (ndim > 0 && !shape) return NULL_SHAPE;
    uint64_t bytes = lz_dtype_size(dtype), span = bytes;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return NEGATIVE_DIM;
        uint64_t k = shape[d] ? (uint64_t)shape[d] : 1;
        if (span > (uint64_t)LZ_MAX_TENSOR_BYTES / k) return TOO_LARGE;
        span *= k;
        bytes *= (uint64_t)shape[d];
    }
    *nbytes = bytes;
    return SHAPE_OK;
}

int lz_shape_check(const char *op, lz_dtype dtype, int ndim, const int64_t *shape, size_t *nbytes)
{
    uint64_t bytes = 0;
    char s[96];
    switch (shape_problem(dtype, ndim, shape, &bytes)) {
    case BAD_DTYPE: return lz_errorf_int("%s: unknown dtype %d", op, (int)dtype);
    case BAD_NDIM:
        return lz_errorf_int("%s: ndim %d out of range [0, %d]", op, ndim, LZ_MAX_DIMS);
    case NULL_SHAPE: return lz_errorf_int("%s: shape is NULL", op);
    case NEGATIVE_DIM:
        return lz_errorf_int("%s: negative dimension in shape %s", op, lz_shape_str(s, ndim, shape));
    case TOO_LARGE:
        return lz_errorf_int("%s: shape %s is too large (over 2^46 bytes of %s)", op,
                             lz_shape_str(s, ndim, shape), lz_dtype_name(dtype));
    }
    if (nbytes) *nbytes = (size_t)bytes;
    return 0;
}

lz_tensor *lz_record(lz_op op, lz_dtype dtype, int ndim, const int64_t *shape,
                     int n_in, lz_tensor *const *in, const lz_attrs *attrs)
{
    /* Shapes inferred from valid operands can still be too large (an
       expand, a matmul of expanded operands, a huge pool output). */
    uint64_t nbytes;
    if (shape_problem(dtype, ndim, shape, &nbytes) != SHAPE_OK) {
        char name[48];
        snprintf(name, sizeof name, "lz_%s", lz_op_name(op));
        lz_shape_check(name, dtype, ndim, shape, NULL);
        return NULL;
    }
    double t0 = lz_now_ms();
    lz_node *srcs_small[8], **srcs = srcs_small;
    if (n_in > 8 && !(srcs = lz_host_malloc(sizeof *srcs * (size_t)n_in)))
        return lz_errorf("lz_%s: out of memory", lz_op_name(op));
    for (int i = 0; i < n_in; i++) srcs[i] = in[i]->node;
    lz_node *node = lz_node_new(op, dtype, ndim, shape, n_in, srcs, attrs);
    if (srcs != srcs_small) free(srcs);
    lz_tensor *t = lz_tensor_wrap(node);
    lz_counters.trace_ms += lz_now_ms() - t0;
    if (lz_is_eager() && lz_sync_tensors(&t, 1, 0) != 0) {
        lz_free(t);
        return NULL;
    }
    return t;
}
