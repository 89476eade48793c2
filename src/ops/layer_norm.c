/* Layer norm: one LAYER_NORM step normalises each row of the last n_axes
 * axes (like torch, with the biased variance), and weight and bias follow
 * as element-wise steps, which fuse with whatever comes next; their
 * gradients come from mul's and add's rules. Composed from mean, sub, mul
 * and rsqrt steps it took nine kernels forward and more backward
 * (docs/performance.md, "Layer norm"). */
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

static int layer_norm_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    return lz_grad_of_x_g(LZ_OP_LAYER_NORM_GRAD, ag, gout, gin, &ag->attrs);
}

static int check_affine(const char *what, lz_tensor *p, lz_tensor *x, int n_axes)
{
    if (!p) return 0;
    if (!lz_require_f32("lz_layer_norm", p)) return -1;
    const int nd = lz_t_ndim(x);
    const int64_t *tail = lz_t_shape(x) + nd - n_axes;
    if (lz_t_ndim(p) != n_axes || memcmp(lz_t_shape(p), tail, sizeof(int64_t) * (size_t)n_axes)) {
        char sa[96], sb[96], sc[96];
        return lz_errorf_int("lz_layer_norm: %s %s must have the normalised shape %s of x %s", what,
                             lz_shape_str(sa, lz_t_ndim(p), lz_t_shape(p)),
                             lz_shape_str(sb, n_axes, tail), lz_shape_str(sc, nd, lz_t_shape(x)));
    }
    return 0;
}

lz_tensor *lz_layer_norm(lz_tensor *x, int n_axes, lz_tensor *weight, lz_tensor *bias, float eps)
{
    if (lz_check_operands("lz_layer_norm", 1, &x)) return NULL;
    if (!lz_require_f32("lz_layer_norm", x)) return NULL;
    const int nd = lz_t_ndim(x);
    if (n_axes < 1 || n_axes > nd) {
        char s[96];
        return lz_errorf("lz_layer_norm: n_axes %d out of range [1, %d] for x %s", n_axes, nd,
                         lz_shape_str(s, nd, lz_t_shape(x)));
    }
    if (!(eps >= 0.0f)) return lz_errorf("lz_layer_norm: eps %g must be >= 0", (double)eps);
    if (check_affine("weight", weight, x, n_axes) || check_affine("bias", bias, x, n_axes))
        return NULL;
    const int64_t row = lz_shape_numel(n_axes, lz_t_shape(x) + nd - n_axes);
    if (row == 0) {
        char s[96];
        return lz_errorf("lz_layer_norm: normalised axes of x %s are empty",
                         lz_shape_str(s, nd, lz_t_shape(x)));
    }
    lz_attrs at = {.n_iattr = 1, .iattr = {row}, .n_fattr = 1, .fattr = {eps}};
    /* the temporaries die with this scope; only the result is kept */
    lz_scope_begin();
    lz_tensor *y = lz_record(LZ_OP_LAYER_NORM, LZ_F32, nd, lz_t_shape(x), 1, &x, &at);
    lz_ag_attach(y, "lz_layer_norm", layer_norm_backward, 1, &x, &at);
    if (weight) y = lz_mul(y, weight);
    if (bias) y = lz_add(y, bias);
    lz_keep(y);
    lz_scope_end();
    return y;
}
