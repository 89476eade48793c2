/* Indexing ops added for models from PyTorch: the triangular mask
 * (tril/triu and causal attention), cumsum, gather with its scatter-add
 * gradient, index_select and argmax. Indices are data, checked by the
 * kernels when the graph runs. */
#include <math.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static int int_or_f32(const char *name, const lz_tensor *t)
{
    lz_dtype d = lz_t_dtype(t);
    if (d == LZ_F32 || d == LZ_I64 || d == LZ_I32) return 1;
    lz_errorf("%s: dtype %s not supported (f32, i64 or i32)", name, lz_dtype_name(d));
    return 0;
}

static int is_index(const char *name, const lz_tensor *idx)
{
    if (lz_t_dtype(idx) == LZ_I64 || lz_t_dtype(idx) == LZ_I32) return 1;
    lz_errorf("%s: indices must be i64 or i32, not %s", name, lz_dtype_name(lz_t_dtype(idx)));
    return 0;
}

/* ---- tri mask ------------------------------------------------------------------ */

static lz_tensor *tri_record(lz_tensor *x, int64_t k, int upper, float fill);

static int tri_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = tri_record(g, ag->attrs.iattr[0], (int)ag->attrs.iattr[1], 0.0f);
    return gin[0] ? 0 : -1;
}

static lz_tensor *tri_record(lz_tensor *x, int64_t k, int upper, float fill)
{
    lz_attrs a = {.n_iattr = 2, .iattr = {k, upper}, .n_fattr = 1, .fattr = {fill}};
    lz_tensor *t = lz_record(LZ_OP_TRI_MASK, lz_t_dtype(x), lz_t_ndim(x), lz_t_shape(x), 1, &x, &a);
    if (lz_t_dtype(x) == LZ_F32) lz_ag_attach(t, "lz_tri_mask", tri_backward, 1, &x, &a);
    return t;
}

lz_tensor *lz_tri_mask(lz_tensor *x, int64_t k, int upper, float fill)
{
    if (lz_check_operands("lz_tri_mask", 1, &x)) return NULL;
    if (!int_or_f32("lz_tri_mask", x)) return NULL;
    if (lz_t_ndim(x) < 2) return lz_errorf("lz_tri_mask: x must be at least 2-d, got %d-d", lz_t_ndim(x));
    /* an integer tensor's fill must be an integer it can hold (converting
       -inf or 1e30 to an integer is undefined in C) */
    if (lz_t_dtype(x) != LZ_F32) {
        const double lim = lz_t_dtype(x) == LZ_I64 ? 9.2e18 : 2147483647.0;
        if (!isfinite(fill) || fill != truncf(fill) || fabs((double)fill) > lim)
            return lz_errorf("lz_tri_mask: fill %g is not a value of %s", (double)fill,
                             lz_dtype_name(lz_t_dtype(x)));
    }
    return tri_record(x, k, upper != 0, fill);
}

/* ---- cumsum --------------------------------------------------------------------- */

static lz_tensor *cumsum_record(lz_tensor *x, int axis, int reverse);

/* the gradient of a running sum is the running sum from the other end */
static int cumsum_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = cumsum_record(g, (int)ag->attrs.iattr[0], !ag->attrs.iattr[1]);
    return gin[0] ? 0 : -1;
}

static lz_tensor *cumsum_record(lz_tensor *x, int axis, int reverse)
{
    lz_attrs a = {.n_iattr = 2, .iattr = {axis, reverse}};
    lz_tensor *t = lz_record(LZ_OP_CUMSUM, lz_t_dtype(x), lz_t_ndim(x), lz_t_shape(x), 1, &x, &a);
    if (lz_t_dtype(x) == LZ_F32) lz_ag_attach(t, "lz_cumsum", cumsum_backward, 1, &x, &a);
    return t;
}

lz_tensor *lz_cumsum(lz_tensor *x, int axis)
{
    if (lz_check_operands("lz_cumsum", 1, &x)) return NULL;
    if (!int_or_f32("lz_cumsum", x)) return NULL;
    if (lz_t_ndim(x) == 0) return lz_errorf("lz_cumsum: x is 0-d");
    if ((axis = lz_norm_axis("lz_cumsum", axis, lz_t_ndim(x))) < 0) return NULL;
    return cumsum_record(x, axis, 0);
}

/* ---- gather and scatter-add ------------------------------------------------------ */

static lz_tensor *scatter_record(lz_tensor *src, int axis, lz_tensor *idx, int nd, const int64_t *shape);

static int gather_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    gin[0] = scatter_record(g, (int)ag->attrs.iattr[0], ag->in[1], lz_t_ndim(x), lz_t_shape(x));
    return gin[0] ? 0 : -1;
}

static lz_tensor *gather_record(lz_tensor *x, int axis, lz_tensor *idx)
{
    lz_tensor *in[2] = {x, idx};
    lz_attrs a = {.n_iattr = 1, .iattr = {axis}};
    lz_tensor *t = lz_record(LZ_OP_GATHER, lz_t_dtype(x), lz_t_ndim(idx), lz_t_shape(idx), 2, in, &a);
    if (lz_t_dtype(x) == LZ_F32) lz_ag_attach(t, "lz_gather", gather_backward, 2, in, &a);
    return t;
}

static int scatter_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = gather_record(g, (int)ag->attrs.iattr[0], ag->in[1]);
    return gin[0] ? 0 : -1;
}

static lz_tensor *scatter_record(lz_tensor *src, int axis, lz_tensor *idx, int nd, const int64_t *shape)
{
    lz_tensor *in[2] = {src, idx};
    lz_attrs a = {.n_iattr = 1, .iattr = {axis}};
    lz_tensor *t = lz_record(LZ_OP_SCATTER_ADD, LZ_F32, nd, shape, 2, in, &a);
    lz_ag_attach(t, "lz_scatter_add", scatter_backward, 2, in, &a);
    return t;
}

/* idx's shape against x's for gather/scatter along axis: same ndim, no
   larger off the axis. Returns the normalised axis or -1. */
static int check_index_shape(const char *name, const lz_tensor *x, int axis, const lz_tensor *idx)
{
    if (!is_index(name, idx)) return -1;
    const int nd = lz_t_ndim(x);
    if ((axis = lz_norm_axis(name, axis, nd)) < 0) return -1;
    char sx[96], si[96];
    int ok = lz_t_ndim(idx) == nd && nd > 0;
    for (int d = 0; ok && d < nd; d++) ok = d == axis || lz_t_shape(idx)[d] <= lz_t_shape(x)[d];
    if (!ok)
        return lz_errorf_int("%s: indices %s do not fit x %s along axis %d (same ndim, no larger off "
                             "the axis)", name, lz_shape_str(si, lz_t_ndim(idx), lz_t_shape(idx)),
                             lz_shape_str(sx, nd, lz_t_shape(x)), axis);
    return axis;
}

lz_tensor *lz_gather(lz_tensor *x, int axis, lz_tensor *idx)
{
    lz_tensor *in[2] = {x, idx};
    if (lz_check_operands("lz_gather", 2, in)) return NULL;
    if (!int_or_f32("lz_gather", x)) return NULL;
    if ((axis = check_index_shape("lz_gather", x, axis, idx)) < 0) return NULL;
    return gather_record(x, axis, idx);
}

static int scatter_add_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (lz_needs_grad(ag->in[0]) && !(gin[0] = lz_same_value(g))) return -1;
    if (lz_needs_grad(ag->in[2]) && !(gin[2] = gather_record(g, (int)ag->attrs.iattr[0], ag->in[1])))
        return -1;
    return 0;
}

lz_tensor *lz_scatter_add(lz_tensor *base, int axis, lz_tensor *idx, lz_tensor *src)
{
    lz_tensor *in[3] = {base, idx, src};
    if (lz_check_operands("lz_scatter_add", 3, in)) return NULL;
    if (!lz_require_f32("lz_scatter_add", base) || !lz_require_f32("lz_scatter_add", src)) return NULL;
    if ((axis = check_index_shape("lz_scatter_add", base, axis, idx)) < 0) return NULL;
    int same = lz_t_ndim(src) == lz_t_ndim(idx);
    for (int d = 0; same && d < lz_t_ndim(src); d++) same = lz_t_shape(src)[d] == lz_t_shape(idx)[d];
    if (!same) {
        char ss[96], si[96];
        return lz_errorf("lz_scatter_add: src %s must have the indices' shape %s",
                         lz_shape_str(ss, lz_t_ndim(src), lz_t_shape(src)),
                         lz_shape_str(si, lz_t_ndim(idx), lz_t_shape(idx)));
    }
    lz_no_grad_begin();
    lz_tensor *sc = scatter_record(src, axis, idx, lz_t_ndim(base), lz_t_shape(base));
    lz_no_grad_end();
    lz_tensor *parts[2] = {base, sc};
    lz_tensor *t = sc ? lz_record(LZ_OP_ADD, LZ_F32, lz_t_ndim(base), lz_t_shape(base), 2, parts, NULL)
                      : NULL;
    lz_free(sc);
    lz_attrs a = {.n_iattr = 1, .iattr = {axis}};
    lz_ag_attach(t, "lz_scatter_add", scatter_add_backward, 3, in, &a);
    return t;
}

lz_tensor *lz_index_select(lz_tensor *x, int axis, lz_tensor *idx)
{
    lz_tensor *in[2] = {x, idx};
    if (lz_check_operands("lz_index_select", 2, in)) return NULL;
    if (!int_or_f32("lz_index_select", x) || !is_index("lz_index_select", idx)) return NULL;
    const int nd = lz_t_ndim(x);
    if ((axis = lz_norm_axis("lz_index_select", axis, nd)) < 0) return NULL;
    if (lz_t_ndim(idx) != 1)
        return lz_errorf("lz_index_select: indices must be 1-d, got %d-d", lz_t_ndim(idx));
    int64_t one[LZ_MAX_DIMS], full[LZ_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        one[d] = d == axis ? lz_t_shape(idx)[0] : 1;
        full[d] = d == axis ? lz_t_shape(idx)[0] : lz_t_shape(x)[d];
    }
    lz_scope_begin();
    lz_tensor *e = lz_expand(lz_reshape(idx, nd, one), nd, full);
    lz_tensor *t = e ? lz_gather(x, axis, e) : NULL;
    lz_keep(t);
    lz_scope_end();
    return t;
}

/* ---- argmax ------------------------------------------------------------------- */

lz_tensor *lz_argmax(lz_tensor *x, int axis, int keepdim)
{
    if (lz_check_operands("lz_argmax", 1, &x)) return NULL;
    if (!int_or_f32("lz_argmax", x)) return NULL;
    const int nd = lz_t_ndim(x);
    if (nd == 0) return lz_errorf("lz_argmax: x is 0-d");
    if ((axis = lz_norm_axis("lz_argmax", axis, nd)) < 0) return NULL;
    if (lz_t_shape(x)[axis] == 0) return lz_errorf("lz_argmax: axis %d is empty", axis);
    int64_t shape[LZ_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (d != axis) shape[n++] = lz_t_shape(x)[d];
        else if (keepdim) shape[n++] = 1;
    }
    lz_attrs a = {.n_iattr = 2, .iattr = {axis, keepdim != 0}};
    return lz_record(LZ_OP_ARGMAX, LZ_I64, n, shape, 1, &x, &a);
}
