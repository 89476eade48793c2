/* What the optimizers' base (nn/optimizer.c) and the schedules build on:
 * reading an options field whose zero means torch's default, checking and
 * holding the parameter list, and undoing a step that failed part-way. */
#ifndef LZ_OPTIM_OPTS_H
#define LZ_OPTIM_OPTS_H

#include "lazyc.h"
#include "base/opt_or.h"

/* 0, or -1 with an error naming fn and the parameter: a NULL array or
   entry, a dtype other than f32, a tensor that does not require grad, or
   one listed twice. */
int lz_optim_check_params(const char *fn, lz_tensor *const *params, int n);

/* The optimizer's own references to its parameters (lz_retain handles), so
   a program may free its parameters, or their lz_params set, before the
   optimizer. params must have n entries; dst has room for them. 0, or -1
   with "fn: out of memory" and none held. */
int  lz_optim_hold_params(const char *fn, lz_tensor **dst, lz_tensor *const *params, int n);
/* Drops the references lz_optim_hold_params took (NULL entries skipped). */
void lz_optim_drop_params(lz_tensor **held, int n);

/* An optimizer step runs all or nothing: the values (nodes) its tensors
   hold before it, so that a failure part-way puts every one back and no
   parameter is updated without the others. */
typedef struct lz_optim_undo {
    int n;
    lz_tensor **t;
    struct lz_node **node;
} lz_optim_undo;

/* Records the tensors of a[0..na) and b[0..nb). -1 and an error naming
   fn when out of memory (nothing recorded). */
int  lz_optim_undo_begin(lz_optim_undo *u, const char *fn, lz_tensor *const *a, int na,
                         lz_tensor *const *b, int nb);
/* rc != 0: every tensor gets its recorded value back. Frees u; returns rc. */
int  lz_optim_undo_end(lz_optim_undo *u, int rc);

#endif
