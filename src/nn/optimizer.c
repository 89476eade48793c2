/* The optimizers' shared base (nn/optimizer.h): parameters, learning rate,
 * named state, and the calls that work the same for every optimizer. */
#include "nn/optimizer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/thread.h"
#include "nn/optim_opts.h"

int lz_optim_rate_ok(float lr)
{
    return lr >= 0.0f && !isinf(lr);   /* NaN fails the comparison */
}

lz_optimizer *lz_optim_new(size_t size, const lz_optimizer_vt *vt, const char *fn,
                           lz_tensor *const *params, int n, float lr)
{
    if (lz_optim_check_params(fn, params, n))
        return NULL;
    if (!lz_optim_rate_ok(lr))
        return lz_errorf("%s: invalid learning rate (lr) %g: must be finite and >= 0", fn,
                         (double)lr);
    lz_optimizer *o = calloc(1, size);
    if (!o)
        return lz_errorf("%s: out of memory", fn);
    o->vt = vt;
    o->made_by = fn;
    o->params = calloc((size_t)(n > 0 ? n : 1), sizeof *o->params);
    if (!o->params) {
        free(o);
        return lz_errorf("%s: out of memory", fn);
    }
    if (lz_optim_hold_params(fn, o->params, params, n) != 0) {
        free(o->params);
        free(o);
        return NULL;
    }
    o->n = n;
    o->lr_value = lr;
    if (!(o->lr = lz_scalar(lr))) {
        lz_optim_free(o);
        return NULL;
    }
    return o;
}

/* Room for one more entry in a growing array of elem-sized entries. */
static int grow(void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return 0;
    int c = *cap ? *cap * 2 : 8;
    void *a = realloc(*arr, (size_t)c * elem);
    if (!a)
        return -1;
    *arr = a;
    *cap = c;
    return 0;
}

lz_tensor *lz_optim_scalar(lz_optimizer *o, float value)
{
    if (grow((void **)&o->owned, &o->cap_owned, o->n_owned, sizeof *o->owned) != 0)
        return lz_errorf("%s: out of memory", o->made_by);
    lz_tensor *t = lz_scalar(value);
    if (t)
        o->owned[o->n_owned++] = t;
    return t;
}

/* Room for one more state entry: its tensor and its name. */
static int grow_state(lz_optimizer *o)
{
    if (o->n_state < o->cap_state)
        return 0;
    int c = o->cap_state ? o->cap_state * 2 : 8;
    lz_tensor **t = realloc(o->state, (size_t)c * sizeof *t);
    if (!t)
        return -1;
    o->state = t;
    char **names = realloc(o->state_names, (size_t)c * sizeof *names);
    if (!names)
        return -1;
    o->state_names = names;
    o->cap_state = c;
    return 0;
}

static lz_tensor *add_state(lz_optimizer *o, lz_tensor *t, const char *fmt, va_list ap)
{
    if (!t)
        return NULL;
    char name[256];
    vsnprintf(name, sizeof name, fmt, ap);
    char *copy = strdup(name);
    if (!copy || grow_state(o) != 0) {
        free(copy);
        lz_free(t);
        return lz_errorf("%s: out of memory", o->made_by);
    }
    o->state[o->n_state] = t;
    o->state_names[o->n_state++] = copy;
    return t;
}

lz_tensor *lz_optim_add_state(lz_optimizer *o, lz_tensor *t, const char *name_fmt, ...)
{
    va_list ap;
    va_start(ap, name_fmt);
    t = add_state(o, t, name_fmt, ap);
    va_end(ap);
    return t;
}

lz_tensor *lz_optim_zeros_like(lz_optimizer *o, int i, const char *name_fmt, ...)
{
    lz_tensor *p = o->params[i];
    int64_t shape[LZ_MAX_DIMS];
    for (int d = 0; d < lz_ndim(p); d++)
        shape[d] = lz_dim(p, d);
    va_list ap;
    va_start(ap, name_fmt);
    lz_tensor *t = add_state(o, lz_zeros(LZ_F32, lz_ndim(p), shape), name_fmt, ap);
    va_end(ap);
    return t;
}

int lz_optim_step(lz_optimizer *o, const char *fn)
{
    if (!o)
        return lz_errorf_int("%s: optimizer is NULL", fn);
    if (lz_owner_check(fn))
        return -1;
    lz_optim_undo undo;
    if (lz_optim_undo_begin(&undo, fn, o->params, o->n, o->state, o->n_state) != 0)
        return -1;
    lz_no_grad_begin();
    lz_scope_begin();
    int rc = o->vt->step(o, fn);
    lz_scope_end();
    lz_no_grad_end();
    return lz_optim_undo_end(&undo, rc);
}

void lz_optim_zero_grad(lz_optimizer *o, const char *fn)
{
    if (!o) {
        lz_errorf("%s: optimizer is NULL", fn);
        return;
    }
    if (lz_owner_check(fn))
        return;
    for (int i = 0; i < o->n; i++)
        lz_zero_grad(o->params[i]);
}

int lz_optim_set_lr(lz_optimizer *o, float lr, const char *fn)
{
    if (!o)
        return lz_errorf_int("%s: optimizer is NULL", fn);
    if (lz_owner_check(fn))
        return -1;
    if (!lz_optim_rate_ok(lr))
        return lz_errorf_int("%s: invalid learning rate %g (the rate stays %g)", fn, (double)lr,
                             (double)o->lr_value);
    o->lr_value = lr;
    return lz_copy_from_host(o->lr, &lr, sizeof lr);
}

int lz_optim_state(lz_optimizer *o, lz_params *into, const char *prefix, const char *fn)
{
    if (!o || !into || !prefix)
        return lz_errorf_int("%s: NULL argument", fn);
    char name[512];
    for (int i = 0; i < o->n_state; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, o->state_names[i]);
        if (!lz_params_add(into, name, lz_retain(o->state[i]), 0))
            return -1;
    }
    return 0;
}

void lz_optim_free(lz_optimizer *o)
{
    if (!o)
        return;
    if (o->vt->free)
        o->vt->free(o);
    for (int i = 0; i < o->n_state; i++) {
        lz_free(o->state[i]);
        free(o->state_names[i]);
    }
    for (int i = 0; i < o->n_owned; i++)
        lz_free(o->owned[i]);
    lz_free(o->lr);
    lz_optim_drop_params(o->params, o->n);
    free(o->params);
    free(o->state);
    free(o->state_names);
    free(o->owned);
    free(o);
}

/* ---- the public interface ------------------------------------------- */

int lz_optimizer_step(lz_optimizer *opt)
{
    return lz_optim_step(opt, "lz_optimizer_step");
}

void lz_optimizer_zero_grad(lz_optimizer *opt)
{
    lz_optim_zero_grad(opt, "lz_optimizer_zero_grad");
}

int lz_optimizer_set_lr(lz_optimizer *opt, float lr)
{
    return lz_optim_set_lr(opt, lr, "lz_optimizer_set_lr");
}

float lz_optimizer_lr(const lz_optimizer *opt)
{
    if (!opt) {
        lz_errorf("lz_optimizer_lr: optimizer is NULL");
        return NAN;
    }
    return opt->lr_value;
}

int lz_optimizer_state(lz_optimizer *opt, lz_params *into, const char *prefix)
{
    return lz_optim_state(opt, into, prefix, "lz_optimizer_state");
}

const char *lz_optimizer_name(const lz_optimizer *opt)
{
    if (!opt)
        return lz_errorf("lz_optimizer_name: optimizer is NULL");
    return opt->vt->name;
}

void lz_optimizer_free(lz_optimizer *opt)
{
    lz_optim_free(opt);
}
