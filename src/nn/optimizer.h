/* What an optimizer implements, and the base every optimizer shares.
 *
 * An optimizer is one file: a struct whose first member is lz_optimizer,
 * a vtable (its name and its step), and a constructor that calls
 * lz_optim_new and makes its scalars and state with the helpers below.
 * The base holds the parameters (its own references), the learning rate
 * as 0-d data, and the state tensors under their checkpoint names; it
 * gives every optimizer zero_grad, set_lr, state, free, the NULL and
 * thread checks, and a step that runs all or nothing. */
#ifndef LZ_NN_OPTIMIZER_H
#define LZ_NN_OPTIMIZER_H

#include "lazyc.h"
#include "lazyc_optim.h"

typedef struct lz_optimizer_vt {
    const char *name;        /* lz_optimizer_name's answer, e.g. "adamw" */
    /* Records the update of every parameter that has a gradient. Runs in
       a no-grad section and a scope the base opened (temporaries belong
       to the scope); on -1 the base gives every parameter and state
       tensor its value back. fn names the public call, for errors. */
    int  (*step)(lz_optimizer *opt, const char *fn);
    /* Frees what the optimizer allocated beyond the base (may be NULL). */
    void (*free)(lz_optimizer *opt);
} lz_optimizer_vt;

struct lz_optimizer {
    const lz_optimizer_vt *vt;
    const char *made_by;     /* the constructor's name, for the helpers' errors */
    int n;
    lz_tensor **params;      /* held (lz_optim_hold_params) */
    lz_tensor *lr;           /* 0-d data: a new rate is new data, never a new graph */
    float lr_value;
    int n_state, cap_state;
    lz_tensor **state;       /* owned, in the order added: the checkpoint's order */
    char **state_names;
    int n_owned, cap_owned;
    lz_tensor **owned;       /* scalars: freed with the optimizer */
};

/* Checks the parameters (lz_optim_check_params) and the learning rate,
   then allocates size bytes (the optimizer's struct, lz_optimizer first),
   takes references to the parameters and makes the rate's tensor. NULL
   with an error naming fn. */
lz_optimizer *lz_optim_new(size_t size, const lz_optimizer_vt *vt, const char *fn,
                           lz_tensor *const *params, int n, float lr);
/* A 0-d data tensor the optimizer owns. NULL on failure. */
lz_tensor *lz_optim_scalar(lz_optimizer *o, float value);
/* Adds t to the state (owned by o from here, even on failure), named
   prefix.NAME by lz_optimizer_state. Returns t, or NULL. */
lz_tensor *lz_optim_add_state(lz_optimizer *o, lz_tensor *t, const char *name_fmt, ...)
    LZ_PRINTF_FORMAT(3, 4);
/* State of zeros shaped like parameter i: data, so that step 1 reads a
   data leaf like every later step and compiles the same graph. */
lz_tensor *lz_optim_zeros_like(lz_optimizer *o, int i, const char *name_fmt, ...)
    LZ_PRINTF_FORMAT(3, 4);

/* The interface's calls, naming fn in their errors (the public lz_sgd_*,
   lz_adamw_* and lz_optimizer_* calls are these with their own name). */
int   lz_optim_step(lz_optimizer *o, const char *fn);
void  lz_optim_zero_grad(lz_optimizer *o, const char *fn);
int   lz_optim_set_lr(lz_optimizer *o, float lr, const char *fn);
int   lz_optim_state(lz_optimizer *o, lz_params *into, const char *prefix, const char *fn);
void  lz_optim_free(lz_optimizer *o);

/* 1 when lr is a rate set_lr accepts: finite and >= 0. */
int   lz_optim_rate_ok(float lr);

#endif
