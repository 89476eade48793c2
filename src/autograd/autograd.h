/* Reverse-mode autograd over tensors. Each op that has an input needing a
 * gradient attaches an lz_ag record to its output; lz_backward walks the
 * records in reverse topological order and calls each op's rule, which
 * records the gradient ops lazily, so backward lands in the same graph as
 * the forward and the update. */
#ifndef LZ_AUTOGRAD_H
#define LZ_AUTOGRAD_H

#include "core/tensor.h"

struct lz_ag;
/* Fills gin[i] with a new tensor holding d(loss)/d(in[i]), or leaves it
   NULL when in[i] needs none. out is the op's output, gout its gradient.
   Returns 0, or -1 with the error set. */
typedef int (*lz_backward_fn)(const struct lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin);

typedef struct lz_ag {
    lz_backward_fn backward;
    const char *name;        /* op name for error messages */
    lz_attrs attrs;
    int n_in;
    lz_tensor *in[];         /* owned references */
} lz_ag;

/* 1 if gradients flow through t (it requires grad or was made from such). */
int  lz_needs_grad(const lz_tensor *t);
/* Attaches a record to out when grad mode is on and an input needs grad.
   out may be NULL (then nothing happens). attrs may be NULL. */
void lz_ag_attach(lz_tensor *out, const char *name, lz_backward_fn fn,
                  int n_in, lz_tensor *const *in, const lz_attrs *attrs);
void lz_ag_free(lz_ag *ag);
int  lz_grad_enabled(void);
/* Closes any open no-grad section (lz_shutdown). */
void lz_autograd_shutdown(void);

#endif
