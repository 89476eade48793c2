/* Tensor handles: a shape, a dtype and a node that is either pending IR or
 * data. Tensors whose node is pending are kept in the live registry, which
 * lz_mark_step cuts into one graph. */
#ifndef LZ_TENSOR_H
#define LZ_TENSOR_H

#include "lazyc.h"
#include "ir/ir.h"

struct lz_ag;

struct lz_tensor {
    int refs;                /* handles + internal holders (autograd, scopes) */
    lz_node *node;
    /* live registry: tensors whose node is pending */
    lz_tensor *live_prev, *live_next;
    int in_live;
    /* every tensor, for capture's one-time mapping of buffers to tensors */
    lz_tensor *all_prev, *all_next;
    int internal;            /* a value saved by autograd: in no scope and not in
                                the every-tensor list (lz_tensor_saved) */
    /* autograd */
    int requires_grad;
    lz_tensor *grad;         /* accumulated gradient, owned */
    struct lz_ag *ag;        /* how this tensor was made, if it needs a grad */
    /* capture scratch: set on the tensors alive when a trace starts */
    uint32_t capture_epoch;
    /* id of the buffer t held before its node became pending: a step that
       fails leaves t at that value (engine/step.c) */
    uint64_t prev_buf_id;
    /* backward-pass scratch */
    uint32_t ag_epoch;
    lz_tensor *ag_acc;       /* gradient accumulated so far in this pass */
    /* scope bookkeeping: depth of the scope that owns the creation handle,
       0 when the caller owns it */
    int scope_level;
    /* lz_retain's handles: each is a handle of its own (its own scope
       ownership and lz_free) that shares this tensor: alias_of is the
       tensor (held), whose node every alias mirrors without a reference of
       its own (lz_tensor_set_node updates them all; node reference counts
       decide in-place writes) and whose gradient, record and requires-grad flag
       count (lz_tensor_of). The tensor lists its aliases in `aliases`,
       linked by alias_next. An alias is in no registry (live, every tensor):
       the tensor it shares stays in them while any alias holds it. */
    lz_tensor *alias_of;
    lz_tensor *aliases, *alias_next;
    /* references held by captured functions (engine/capture_bind.c): a
       tensor with no others is freed as far as the program is concerned,
       and a replay bound to it must trace again */
    int capture_refs;
    /* creation order (lz_tensor_serial): lz_call tells the tensors a step
       made from those it was given */
    uint64_t serial;
    /* counts lz_tensor_set_node: a value derived from this tensor's value
       knows it still holds when the version is the one it was made at
       (autocast's bf16 copies of parameters, engine/autocast.c) */
    uint64_t version;
    /* on autocast's bf16 copy of a parameter: its entry (engine/autocast.c) */
    struct lz_bf16_copy *bf16_copy;
};

/* Whether the program holds t: references beyond extra of its own and
   beyond those captured functions hold (capture_refs). */
static inline int lz_tensor_held(const lz_tensor *t, int extra)
{
    return t->refs - extra > t->capture_refs;
}

/* The tensor a handle stands for: t itself, or the tensor an lz_retain
   handle shares. Gradients, records and requires-grad are read from it. */
static inline lz_tensor *lz_tensor_of(const lz_tensor *t)
{
    return (lz_tensor *)(t->alias_of ? t->alias_of : t);
}

/* Wraps node (takes over the caller's reference) in a new handle, registers
   it in the current scope and, if pending, in the live registry. NULL (the
   reference dropped, an error set) when out of memory or node is NULL. */
lz_tensor *lz_tensor_wrap(lz_node *node);
/* An internal handle on node (takes over the caller's reference) that
   autograd keeps as a saved value: in no scope and not among
   lz_all_first's tensors, so capture never binds a user's buffer to it; in
   the live registry if pending and live (a barrier materialises it rather
   than leaving it to be recomputed). */
lz_tensor *lz_tensor_saved(lz_node *node, int live);
/* Points t (the tensor an lz_retain handle shares, if t is one) and every
   lz_retain handle of it at node (takes over the caller's reference). A
   new value ends the autograd record that described the old one
   (lz_ag_overwritten). */
void       lz_tensor_set_node(lz_tensor *t, lz_node *node);
void       lz_tensor_ref(lz_tensor *t);
/* The serial the next tensor made will have. */
uint64_t   lz_tensor_serial(void);
void       lz_tensor_unref(lz_tensor *t);
/* Drops tensors whose node became data from the live registry. */
void       lz_live_prune(void);
int        lz_live_count(void);
lz_tensor *lz_live_first(void);
/* Every tensor alive (capture walks them once when it traces). */
lz_tensor *lz_all_first(void);

/* Scopes (engine/scope.c). */
/* 0, or -1 and an error when out of memory (t is not registered). */
int        lz_scope_register(lz_tensor *t);
/* If the innermost scope owns t's creation handle, hands it to the caller
   (the scope will not drop it). */
void       lz_scope_release(lz_tensor *t);
/* Drops a creation handle: the scope's ownership if it still has it. */
void       lz_scope_forget(lz_tensor *t);
/* Opens a scope (lz_scope_begin without the owner check): -1 with
   "<who>: out of memory opening a scope" and nothing opened. */
int        lz_scope_open(const char *who);
/* Ends the scope lz_call opened around a step function so that ownership
   is what a direct call in the caller's scope gives: tensors the step kept
   stay kept one level up, outputs it did not keep go to the caller's scope
   (or the caller), the rest are dropped. kept_out[j] (may be NULL) tells
   whether the step kept out[j]. -1 (error set) when out of memory to hand
   a tensor over: it is left unowned. */
int        lz_scope_end_call(lz_tensor *const *out, int n_out, char *kept_out);
/* Ends every open scope and frees the scope stack (lz_shutdown). */
void       lz_scope_shutdown(void);

/* Records a new op on tensors: checks for NULL operands (returning NULL
   with the first error kept), builds the node, wraps it, and, in eager
   mode, executes it. Autograd records are attached by the caller. */
lz_tensor *lz_record(lz_op op, lz_dtype dtype, int ndim, const int64_t *shape,
                     int n_in, lz_tensor *const *in, const lz_attrs *attrs);
/* Checks operands for NULL; sets "name: operand i is NULL" unless an error
   is already set. Returns 0 when all are present. Also the recording-thread
   check every op starts with (base/thread.h). */
int        lz_check_operands(const char *name, int n, lz_tensor *const *in);

/* Data made from host memory by the library itself (an op's C argument
   such as batch norm's eps, the generator's state): lz_from_host without
   capture's note of host values made inside a traced step. */
lz_tensor *lz_internal_data(const void *data, lz_dtype dtype, int ndim, const int64_t *shape);
lz_tensor *lz_internal_scalar(float value);

/* The largest tensor: 2^46 bytes (64 TiB), far above any real buffer and
   far below where an element count, a byte size or a stride overflows. */
#define LZ_MAX_TENSOR_BYTES (INT64_C(1) << 46)
/* Checks a shape: dtype known, 0 <= ndim <= LZ_MAX_DIMS, shape non-NULL when
   ndim > 0, no negative dimension, and the product of the dimensions (a 0
   counted as 1, so that every stride fits as well) times the dtype size at
   most LZ_MAX_TENSOR_BYTES. 0 and the byte size in *nbytes (may be NULL),
   or -1 with "op: ..." set. The one place element counts are validated. */
int        lz_shape_check(const char *op, lz_dtype dtype, int ndim, const int64_t *shape,
                          size_t *nbytes);

#endif
