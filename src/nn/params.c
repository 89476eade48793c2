/* Named parameter sets: a model's parameters and buffers in definition
 * order, named like PyTorch's state_dict keys, owning their tensors. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/thread.h"
#include "engine/tensor.h"

struct lz_params {
    int n, cap;
    char **names;
    lz_tensor **ts;
    unsigned char *trainable;
};

lz_params *lz_params_new(void)
{
    lz_params *p = calloc(1, sizeof *p);
    if (!p) return lz_errorf("lz_params_new: out of memory");
    return p;
}

void lz_params_free(lz_params *p)
{
    if (!p || lz_owner_check("lz_params_free")) return;
    for (int i = 0; i < p->n; i++) {
        lz_free(p->ts[i]);
        free(p->names[i]);
    }
    free(p->names);
    free(p->ts);
    free(p->trainable);
    free(p);
}

static int find_index(const lz_params *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0) return i;
    return -1;
}

static int grow(lz_params *p)
{
    if (p->n < p->cap) return 0;
    int cap = p->cap ? p->cap * 2 : 16;
    char **names = realloc(p->names, sizeof *names * (size_t)cap);
    if (names) p->names = names;
    lz_tensor **ts = realloc(p->ts, sizeof *ts * (size_t)cap);
    if (ts) p->ts = ts;
    unsigned char *tr = realloc(p->trainable, (size_t)cap);
    if (tr) p->trainable = tr;
    if (!names || !ts || !tr) return -1;
    p->cap = cap;
    return 0;
}

/* The handle is consumed even on failure, so model code can write
   lz_params_add(p, "fc.weight", lz_zeros(...), 1) and check only the
   result without leaking the tensor. */
lz_tensor *lz_params_add(lz_params *p, const char *name, lz_tensor *t, int trainable)
{
    if (lz_owner_check("lz_params_add")) return NULL;
    if (!t) {
        if (!lz_last_error())
            lz_errorf("lz_params_add: tensor for '%s' is NULL", name ? name : "(null)");
        return NULL;
    }
    const char *why = NULL;
    if (!p) why = "parameter set is NULL";
    else if (!name || !*name) why = "name is NULL or empty";
    if (why) {
        lz_errorf("lz_params_add: %s", why);
        lz_free(t);
        return NULL;
    }
    if (find_index(p, name) >= 0) {
        lz_errorf("lz_params_add: duplicate name '%s'", name);
        lz_free(t);
        return NULL;
    }
    if (trainable && lz_tensor_dtype(t) != LZ_F32) {
        lz_errorf("lz_params_add: '%s' is %s; only f32 tensors can be trainable", name,
                  lz_dtype_name(lz_tensor_dtype(t)));
        lz_free(t);
        return NULL;
    }
    char *copy = strdup(name);
    if (!copy || grow(p)) {
        free(copy);
        lz_free(t);
        return lz_errorf("lz_params_add: out of memory adding '%s'", name);
    }
    /* The set now holds the creation handle: a scope open around the
       model's constructor must not drop it at its end. */
    lz_scope_forget(t);
    p->names[p->n] = copy;
    p->ts[p->n] = t;
    p->trainable[p->n] = trainable != 0;
    p->n++;
    if (trainable) lz_requires_grad(t, 1);
    return t;
}

int lz_params_count(const lz_params *p) { return p ? p->n : 0; }

const char *lz_params_name(const lz_params *p, int i)
{
    if (!p || i < 0 || i >= p->n) return lz_errorf("lz_params_name: index %d out of range [0, %d)", i, p ? p->n : 0);
    return p->names[i];
}

lz_tensor *lz_params_at(const lz_params *p, int i)
{
    if (!p || i < 0 || i >= p->n) return lz_errorf("lz_params_at: index %d out of range [0, %d)", i, p ? p->n : 0);
    return p->ts[i];
}

int lz_params_trainable(const lz_params *p, int i)
{
    return p && i >= 0 && i < p->n ? p->trainable[i] : 0;
}

lz_tensor *lz_params_find(const lz_params *p, const char *name)
{
    if (!p || !name) return lz_errorf("lz_params_find: %s is NULL", p ? "name" : "parameter set");
    int i = find_index(p, name);
    return i >= 0 ? p->ts[i] : NULL;
}

int lz_params_trainable_list(const lz_params *p, lz_tensor **out, int cap)
{
    if (!p) return 0;
    int k = 0;
    for (int i = 0; i < p->n; i++)
        if (p->trainable[i]) {
            if (out && k < cap) out[k] = p->ts[i];
            k++;
        }
    return k;
}

int64_t lz_params_numel(const lz_params *p, int trainable_only)
{
    if (!p) return 0;
    int64_t n = 0;
    for (int i = 0; i < p->n; i++)
        if (!trainable_only || p->trainable[i]) n += lz_numel(p->ts[i]);
    return n;
}
