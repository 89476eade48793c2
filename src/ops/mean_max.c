/* Mean and max over axes, and their backward rules. Their gradients are
 * element-wise ops (a scale; the max's ties sharing a division), so they
 * sit above elementwise.c, on the constructor the reductions share
 * (reduce.c). */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"
#include "ops/reduce.h"

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
    lz_tensor *gs = lz_scale(lz_reduce_keepdim_view(ag, g), n ? 1.0f / (float)n : 0.0f);
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
    lz_tensor *ties = lz_eq(x, lz_reduce_keepdim_view(ag, out));
    lz_tensor *count = lz_sum_axes(ties, naxes, axes, 1);
    gin[0] = lz_mul(ties, lz_div(lz_reduce_keepdim_view(ag, g), count));
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_mean_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return lz_reduce_op("lz_mean_axes", LZ_OP_MEAN, mean_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_max_axes(lz_tensor *x, int naxes, const int *axes, int keepdim)
{
    return lz_reduce_op("lz_max_axes", LZ_OP_MAX, max_backward, x, naxes, axes, keepdim);
}

lz_tensor *lz_mean(lz_tensor *x)
{
    return lz_reduce_op("lz_mean", LZ_OP_MEAN, mean_backward, x, 0, NULL, 0);
}
