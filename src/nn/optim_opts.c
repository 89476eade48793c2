#include "nn/optim_opts.h"

#include <stdlib.h>

#include "base/error.h"
#include "engine/tensor.h"

int lz_optim_check_params(const char *fn, lz_tensor *const *params, int n)
{
    if (n < 0)
        return lz_errorf_int("%s: negative parameter count %d", fn, n);
    if (n > 0 && !params)
        return lz_errorf_int("%s: %d parameters given with a NULL array", fn, n);
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return lz_errorf_int("%s: parameter %d is NULL", fn, i);
        if (lz_tensor_dtype(params[i]) != LZ_F32)
            return lz_errorf_int("%s: parameter %d is %s, expected f32", fn, i,
                                 lz_dtype_name(lz_tensor_dtype(params[i])));
        /* it would never get a gradient, so the step would silently skip it */
        if (!lz_tensor_of(params[i])->requires_grad)
            return lz_errorf_int("%s: parameter %d does not require grad (call "
                                 "lz_requires_grad(t, 1), or leave a frozen tensor out)", fn, i);
        /* twice in the list would be updated twice per step */
        for (int j = 0; j < i; j++)
            if (lz_tensor_of(params[j]) == lz_tensor_of(params[i]))
                return lz_errorf_int("%s: parameter %d is parameter %d again", fn, i, j);
    }
    return 0;
}

int lz_optim_undo_begin(lz_optim_undo *u, const char *fn, lz_tensor *const *a, int na,
                        lz_tensor *const *b, int nb)
{
    int cap = na + nb + 1;
    u->n = 0;
    u->t = malloc(sizeof *u->t * (size_t)cap);
    u->node = malloc(sizeof *u->node * (size_t)cap);
    if (!u->t || !u->node) {
        free(u->t);
        free(u->node);
        u->t = NULL, u->node = NULL;
        return lz_errorf_int("%s: out of memory", fn);
    }
    for (int i = 0; i < na; i++) u->t[u->n++] = a[i];
    for (int i = 0; i < nb; i++) u->t[u->n++] = b[i];
    for (int i = 0; i < u->n; i++) {
        u->node[i] = u->t[i]->node;
        lz_node_ref(u->node[i]);
    }
    return 0;
}

int lz_optim_undo_end(lz_optim_undo *u, int rc)
{
    for (int i = 0; i < u->n; i++) {
        if (rc != 0 && u->t[i]->node != u->node[i])
            lz_tensor_set_node(u->t[i], u->node[i]);   /* takes the reference */
        else
            lz_node_unref(u->node[i]);
    }
    free(u->t);
    free(u->node);
    return rc;
}

int lz_optim_hold_params(const char *fn, lz_tensor **dst, lz_tensor *const *params, int n)
{
    for (int i = 0; i < n; i++)
        if (!(dst[i] = lz_retain(params[i]))) {
            lz_optim_drop_params(dst, i);
            return lz_errorf_int("%s: out of memory", fn);
        }
    return 0;
}

void lz_optim_drop_params(lz_tensor **held, int n)
{
    for (int i = 0; held && i < n; i++) {
        lz_free(held[i]);
        held[i] = NULL;
    }
}
