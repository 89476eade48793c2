/* Neural-network ops that map onto one IR op each (embedding, hardtanh,
 * relu6) or onto an existing one (flatten), and the small helpers the
 * composed nn ops share (nn_internal.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

/* ---- shared helpers ------------------------------------------------------ */

typedef struct const_entry { float value; lz_tensor *t; } const_entry;
static const_entry *consts;
static int n_consts, cap_consts;

lz_tensor *lz_nn_const_scalar(float value)
{
    /* compare bits, so that -0.0 and 0.0 (or two NaNs) are told apart
       exactly as the kernels would see them */
    for (int i = 0; i < n_consts; i++)
        if (!memcmp(&consts[i].value, &value, sizeof value)) return consts[i].t;
    if (n_consts == cap_consts) {
        int cap = cap_consts ? cap_consts * 2 : 8;
        const_entry *c = realloc(consts, sizeof *c * (size_t)cap);
        if (!c) return lz_errorf("lz_nn_const_scalar: out of memory");
        consts = c;
        cap_consts = cap;
    }
    lz_tensor *t = lz_internal_scalar(value);
    if (!t) return NULL;
    /* the library keeps this handle for the life of the process: no scope
       the caller has open may drop it */
    lz_scope_forget(t);
    consts[n_consts++] = (const_entry){value, t};
    return t;
}

void lz_nn_consts_shutdown(void)
{
    for (int i = 0; i < n_consts; i++) lz_free(consts[i].t);
    free(consts);
    consts = NULL;
    n_consts = cap_consts = 0;
}

static int alias_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_same_value(gout);
    return 0;
}

lz_tensor *lz_nn_alias(const char *name, lz_tensor *x)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    lz_node_ref(x->node);
    lz_tensor *t = lz_tensor_wrap(x->node);
    lz_ag_attach(t, name, alias_backward, 1, &x, NULL);
    return t;
}

/* ---- embedding ----------------------------------------------------------- */

static int embedding_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    lz_tensor *w = ag->in[0];
    if (!lz_needs_grad(w)) return 0;
    lz_tensor *in[2] = {gout, ag->in[1]};
    gin[0] = lz_record(LZ_OP_EMBEDDING_GRAD, LZ_F32, 2, lz_t_shape(w), 2, in, NULL);
    return gin[0] ? 0 : -1;
}

/* Indices are data, so one out of range is found by the kernel, which
   fails the execution with a message naming it. */
lz_tensor *lz_embedding(lz_tensor *weight, lz_tensor *indices)
{
    lz_tensor *in[2] = {weight, indices};
    if (lz_check_operands("lz_embedding", 2, in)) return NULL;
    if (!lz_require_f32("lz_embedding", weight)) return NULL;
    char sa[96], sb[96];
    if (lz_t_ndim(weight) != 2)
        return lz_errorf("lz_embedding: weight must be [V, D], got %s",
                         lz_shape_str(sa, lz_t_ndim(weight), lz_t_shape(weight)));
    lz_dtype di = lz_t_dtype(indices);
    if (di != LZ_I64 && di != LZ_I32)
        return lz_errorf("lz_embedding: indices dtype %s not supported (i64 or i32)",
                         lz_dtype_name(di));
    int ni = lz_t_ndim(indices);
    if (ni + 1 > LZ_MAX_DIMS)
        return lz_errorf("lz_embedding: indices %s have too many dimensions (at most %d)",
                         lz_shape_str(sb, ni, lz_t_shape(indices)), LZ_MAX_DIMS - 1);
    int64_t shape[LZ_MAX_DIMS];
    for (int d = 0; d < ni; d++) shape[d] = lz_t_shape(indices)[d];
    shape[ni] = lz_t_shape(weight)[1];
    lz_tensor *t = lz_record(LZ_OP_EMBEDDING, LZ_F32, ni + 1, shape, 2, in, NULL);
    lz_ag_attach(t, "lz_embedding", embedding_backward, 2, in, NULL);
    return t;
}

/* ---- hardtanh / relu6 ------------------------------------------------------ */

/* Like torch: the gradient passes only strictly inside (min, max); at the
   bounds and outside it is 0. */
static int hardtanh_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    return lz_grad_of_x_g(LZ_OP_HARDTANH_GRAD, ag, gout, gin, &ag->attrs);
}

static lz_tensor *hardtanh(const char *name, lz_tensor *x, float min_val, float max_val)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    if (!lz_require_f32(name, x)) return NULL;
    if (!(min_val <= max_val))
        return lz_errorf("%s: min_val %g must not exceed max_val %g", name, (double)min_val,
                         (double)max_val);
    lz_attrs a = {.n_fattr = 2, .fattr = {min_val, max_val}};
    lz_tensor *t = lz_record(LZ_OP_HARDTANH, LZ_F32, lz_t_ndim(x), lz_t_shape(x), 1, &x, &a);
    lz_ag_attach(t, name, hardtanh_backward, 1, &x, &a);
    return t;
}

lz_tensor *lz_hardtanh(lz_tensor *x, float min_val, float max_val)
{
    return hardtanh("lz_hardtanh", x, min_val, max_val);
}

lz_tensor *lz_relu6(lz_tensor *x)
{
    return hardtanh("lz_relu6", x, 0.0f, 6.0f);
}

/* ---- flatten ---------------------------------------------------------------- */

lz_tensor *lz_flatten(lz_tensor *x, int start_axis)
{
    if (lz_check_operands("lz_flatten", 1, &x)) return NULL;
    int nd = lz_t_ndim(x);
    const int64_t *s = lz_t_shape(x);
    if (nd == 0) {
        /* torch.flatten of a 0-d tensor gives [1] */
        if (start_axis != 0 && start_axis != -1)
            return lz_errorf("lz_flatten: start_axis %d out of range for a 0-d tensor", start_axis);
        const int64_t one[1] = {1};
        return lz_reshape(x, 1, one);
    }
    int start = lz_norm_axis("lz_flatten", start_axis, nd);
    if (start < 0) return NULL;
    int64_t shape[LZ_MAX_DIMS];
    for (int d = 0; d < start; d++) shape[d] = s[d];
    shape[start] = lz_shape_numel(nd - start, s + start);
    return lz_reshape(x, start + 1, shape);
}
