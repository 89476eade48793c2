/* Reductions: sum, mean and max over a set of axes, and their backward
 * rules. The node keeps the reduced axes as a bitmask (iattr[0]) and
 * keepdim (iattr[1]). */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static lz_tensor *reduce(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x, int naxes,
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
static lz_tensor *keepdim_view(const lz_ag *ag, lz_tensor *g)
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
    gin[0] = lz_expand(keepdim_view(ag, g), lz_t_ndim(x), lz_t_shape(x));
    return gin[0] ? 0 : -1;
}

static int mean_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    int64_t n = 1;
    for (int d = 0; d < lz_t_ndim(x); d++)
        if (ag->attrs.iattr[0] >> d & 1) n *= lz_t_shape(x)[d];
    /* 1/n depends only on shapes, so it may be baked into the graph; with
       n == 0, x has no elements and the factor is never used */
    lz_tensor *gs = lz_scale(keepdim_view(ag, g), n ? 1.0f / (float)n : 0.0f);
    gin[0] = lz_expand(gs, lz_t_ndim(x), lz_t_shape(x));
    return gin[0] ? 0 : -1;
}

/* Like torch.amax: the gradient is shared evenly among the elements equal
   to the max. */
static int max_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    int axes[LZ_MAX_DIMS], naxes = 0;
    for (int d = 0; d < lz_t_ndim(x); d++)
        if (ag->attrs.iattr[0] >> d & 1) axes[naxes++] = d;
    if (naxes == 0) {   /* nothing reduced: the op was a copy */
        gin[0] = lz_cast(g, LZ_F32);
        return gin[0] ? 0 : -1;
    }
    lz_tensor *ties = lz_eq(x, keepdim_view(ag, out));
    lz_tensor *count = lz_sum_axes(ties, naxes, axes, 1);
    gin[0] = lz_mul(ties, lz_div(keepdim_view(ag, g), count));
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_sum_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return reduce("lz_sum_axes", LZ_OP_SUM, sum_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_mean_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return reduce("lz_mean_axes", LZ_OP_MEAN, mean_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_max_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return reduce("lz_max_axes", LZ_OP_MAX, max_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_sum(lz_tensor *x)
{
    return reduce("lz_sum", LZ_OP_SUM, sum_backward, x, 0, NULL, 0);
}

lz_tensor *lz_mean(lz_tensor *x)
{
    return reduce("lz_mean", LZ_OP_MEAN, mean_backward, x, 0, NULL, 0);
}
