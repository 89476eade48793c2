/* Reductions' constructor, and the sum over axes with its partner, the
 * broadcast (lz_expand): each is the other's gradient, and the gradients
 * of broadcasting ops take the sum (lz_reduce_to_like), so they sit below
 * the element-wise ops (mean and max, above them: mean_max.c). The node
 * keeps the reduced axes as a bitmask (iattr[0]) and keepdim (iattr[1]). */
#include "ops/reduce.h"

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

lz_tensor *lz_reduce_op(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x, int naxes,
                        const int *axes, int keepdim)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    lz_dtype dt = lz_t_dtype(x);
    if (op == LZ_OP_MEAN && !lz_require_f32(name, x)) return NULL;
    if (!lz_refuse_bf16(name, x)) return NULL;
    int nd = lz_t_ndim(x);
    const int64_t *xs = lz_t_shape(x);
    if (naxes < 0 || naxes > nd)
        return lz_errorf("%s: %d axes given for a %d-d tensor", name, naxes, nd);
    if (naxes > 0 && !axes) return lz_errorf("%s: axes is NULL", name);
    char sbuf[96];
    int64_t mask = 0;
    if (naxes == 0) mask = ((int64_t)1 << nd) - 1;   /* no axes named: all of them */
    for (int i = 0; i < naxes; i++) {
        int a = lz_norm_axis(name, axes[i], nd);
        if (a < 0) return NULL;
        if (mask >> a & 1)
            return lz_errorf("%s: axis %d named twice for shape %s", name, axes[i],
                             lz_shape_str(sbuf, nd, xs));
        mask |= (int64_t)1 << a;
    }
    int ond = 0;
    int64_t oshape[LZ_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        if (!(mask >> d & 1)) oshape[ond++] = xs[d];
        else if (op == LZ_OP_MAX && xs[d] == 0)
            return lz_errorf("%s: cannot take the max over axis %d of size 0 in shape %s", name, d,
                             lz_shape_str(sbuf, nd, xs));
        else if (keepdim) oshape[ond++] = 1;
    }
    lz_attrs at = {.n_iattr = 2, .iattr = {mask, keepdim ? 1 : 0}};
    if (op == LZ_OP_SUM && dt == LZ_I32) {
        /* torch's rule: a sum of int32 is int64, so 2e9 + 2e9 does not wrap */
        lz_tensor *wide = lz_cast(x, LZ_I64);
        lz_tensor *t = wide ? lz_record(op, LZ_I64, ond, oshape, 1, &wide, &at) : NULL;
        lz_free(wide);
        return t;
    }
    lz_tensor *t = lz_record(op, dt, ond, oshape, 1, &x, &at);
    if (dt == LZ_F32) lz_ag_attach(t, name, bw, 1, &x, &at);
    return t;
}

/* The shape of the output with the reduced axes kept as size 1. */
static int keep_shape(const lz_ag *ag, int64_t *shape)
{
    const lz_tensor *x = ag->in[0];
    int nd = lz_t_ndim(x);
    for (int d = 0; d < nd; d++) shape[d] = ag->attrs.iattr[0] >> d & 1 ? 1 : lz_t_shape(x)[d];
    return nd;
}

/* g (shaped like the output) with the reduced axes restored as size 1, so
   it broadcasts against the input. */
lz_tensor *lz_reduce_keepdim_view(const lz_ag *ag, lz_tensor *g)
{
    if (ag->attrs.iattr[1]) return g;
    int64_t shape[LZ_MAX_DIMS];
    int nd = keep_shape(ag, shape);
    return lz_reshape(g, nd, shape);
}

static int sum_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    gin[0] = lz_expand(lz_reduce_keepdim_view(ag, g), lz_t_ndim(x), lz_t_shape(x));
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_sum_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return lz_reduce_op("lz_sum_axes", LZ_OP_SUM, sum_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_sum(lz_tensor *x)
{
    return lz_reduce_op("lz_sum", LZ_OP_SUM, sum_backward, x, 0, NULL, 0);
}

/* ---- expand --------------------------------------------------------------- */

static int expand_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_reduce_to_like(gout, ag->in[0]);
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_expand(lz_tensor *x, int ndim, const int64_t *shape)
{
    if (lz_check_operands("lz_expand", 1, &x)) return NULL;
    int nx = lz_t_ndim(x);
    const int64_t *sx = lz_t_shape(x);
    char sa[96], sb[96];
    if (ndim > 0 && !shape) return lz_errorf("lz_expand: shape is NULL");
    if (ndim < nx || ndim > LZ_MAX_DIMS)
        return lz_errorf("lz_expand: cannot expand %s to %d dimensions",
                         lz_shape_str(sa, nx, sx), ndim);
    int64_t s[LZ_MAX_DIMS];
    int off = ndim - nx;
    for (int d = 0; d < ndim; d++) {
        int xd = d - off;
        s[d] = shape[d];
        /* -1 keeps the source size, as in torch */
        if (s[d] == -1 && xd >= 0) s[d] = sx[xd];
        if (s[d] < 0 || (xd >= 0 && sx[xd] != 1 && sx[xd] != s[d]))
            return lz_errorf("lz_expand: cannot expand %s to %s (axis %d: %lld vs %lld)",
                             lz_shape_str(sa, nx, sx), lz_shape_str(sb, ndim, shape), d,
                             xd >= 0 ? (long long)sx[xd] : 1LL, (long long)shape[d]);
    }
    lz_tensor *t = lz_record(LZ_OP_EXPAND, lz_t_dtype(x), ndim, s, 1, &x, NULL);
    lz_ag_attach(t, "lz_expand", expand_backward, 1, &x, NULL);
    return t;
}

/* ---- the sum a broadcast's gradient takes ---------------------------------- */

lz_tensor *lz_reduce_to_like(lz_tensor *g, const lz_tensor *like)
{
    if (!g || !like) return NULL;
    int gn = lz_t_ndim(g), ln = lz_t_ndim(like);
    int axes[LZ_MAX_DIMS], n = 0;
    for (int d = 0; d < gn; d++) {
        int ld = d - (gn - ln);
        if (ld < 0 || (lz_t_shape(like)[ld] == 1 && lz_t_shape(g)[d] != 1)) axes[n++] = d;
    }
    if (!n && gn == ln) return lz_same_value(g);
    lz_tensor *s = n ? lz_sum_axes(g, n, axes, 1) : lz_same_value(g);
    lz_tensor *r = lz_reshape(s, ln, lz_t_shape(like));
    lz_free(s);
    return r;
}
