/* Reverse-mode autograd over tensors. Each op that has an input needing a
 * gradient attaches an lz_ag record to its output; lz_backward walks the
 * records in reverse topological order and calls each op's rule, which
 * records the gradient ops lazily, so backward lands in the same graph as
 * the forward and the update.
 *
 * A record keeps the values its rule needs as they were when the op was
 * recorded: each input's and the output's IR node, held by internal
 * handles. Replacing a tensor's value later (lz_assign, lz_copy_from_host,
 * an optimizer step) points the tensor at a new node and leaves the saved
 * one alone, so a backward after that still differentiates the forward
 * that ran. The edges to the inputs' own records are also taken at
 * recording time, as PyTorch's grad_fn edges are.
 *
 * A record is "dead" once an lz_backward has run through it (its saved
 * values are freed) or once its tensor's value was replaced; a backward that
 * reaches a dead record fails and says which. */
#ifndef LZ_AUTOGRAD_H
#define LZ_AUTOGRAD_H

#include "engine/tensor.h"

struct lz_ag;
/* Fills gin[i] with a new tensor holding d(loss)/d(in[i]), or leaves it
   NULL when in[i] needs none. out is the op's output, gout its gradient.
   Returns 0, or -1 with the error set. */
typedef int (*lz_backward_fn)(const struct lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin);

/* LZ_AG_REPLAYED: the tensor was returned by a replay of a captured step,
   which runs no function and so records nothing a backward could follow. */
enum { LZ_AG_LIVE, LZ_AG_FREED, LZ_AG_OVERWRITTEN, LZ_AG_REPLAYED };

typedef struct lz_ag {
    int refs;                /* the tensor it describes + consumers' edges */
    int state;               /* LZ_AG_* */
    lz_backward_fn backward;
    const char *name;        /* op name for error messages */
    lz_attrs attrs;
    lz_tensor *out;          /* the output's value when recorded (owned) */
    struct lz_ag **fn;       /* per input: the record that made it, when recorded (owned), or NULL */
    lz_tensor **leaf;        /* per input: the leaf requiring grad it was (owned), or NULL */
    /* backward-pass scratch */
    uint32_t epoch;
    lz_tensor *acc;          /* gradient accumulated so far in this pass */
    int n_in;
    /* the inputs' values when recorded (owned internal handles; each
       requires grad when its input needed a gradient then) */
    lz_tensor *in[];
} lz_ag;

/* 1 if gradients flow through t (it requires grad or was made from such,
   and that record is not dead). */
int  lz_needs_grad(const lz_tensor *t);
/* Attaches a record to out when grad mode is on and an input needs grad;
   when none does but one carries a dead record, out carries that dead
   record (so a backward from it says why). out may be NULL (then nothing
   happens). attrs may be NULL. */
void lz_ag_attach(lz_tensor *out, const char *name, lz_backward_fn fn,
                  int n_in, lz_tensor *const *in, const lz_attrs *attrs);
void lz_ag_unref(lz_ag *ag);
/* Frees ag's saved values and edges and marks it LZ_AG_FREED (lz_backward
   has run through it). */
void lz_ag_release(lz_ag *ag);
/* t's value was replaced (engine/tensor.c): its record no longer describes
   it and becomes an LZ_AG_OVERWRITTEN marker. */
void lz_ag_overwritten(lz_tensor *t);
/* t was returned by a replay whose trace returned it with a record: a
   backward from it fails saying so, instead of finding nothing to
   differentiate. */
void lz_ag_mark_replayed(lz_tensor *t);
/* Sets the error explaining why a backward cannot run through dead record
   ag; returns -1. */
int  lz_ag_dead_error(const lz_ag *ag);
int  lz_grad_enabled(void);
/* How many times a tensor's requires-grad flag changed: a capture re-traces
   once after a change (its graph and gradients may differ). */
uint64_t lz_requires_grad_changes(void);
/* Open lz_no_grad_begin sections, and setting their count back (a
   captured step must close what it opens: engine/capture_trace.c). */
int  lz_no_grad_depth(void);
void lz_no_grad_restore(int depth);
/* Closes any open no-grad section (lz_shutdown). */
void lz_autograd_shutdown(void);

#endif
