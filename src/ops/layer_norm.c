/* Layer norm, composed from recorded ops (mean, sub, mul, rsqrt), so its
 * gradient comes from their rules and it fuses with its neighbours like any
 * other element-wise chain. Like torch it normalises with the biased
 * variance of the last n_axes axes. */
#include <string.h>

#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

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
    if (lz_shape_numel(n_axes, lz_t_shape(x) + nd - n_axes) == 0) {
        char s[96];
        return lz_errorf("lz_layer_norm: normalised axes of x %s are empty",
                         lz_shape_str(s, nd, lz_t_shape(x)));
    }
    lz_tensor *eps_t = lz_nn_const_scalar(eps);
    if (!eps_t) return NULL;

    int axes[LZ_MAX_DIMS];
    for (int i = 0; i < n_axes; i++) axes[i] = nd - n_axes + i;
    /* the temporaries die with this scope; only the result is kept */
    lz_scope_begin();
    lz_tensor *xc = lz_sub(x, lz_mean_axes(x, n_axes, axes, 1));
    lz_tensor *var = lz_mean_axes(lz_mul(xc, xc), n_axes, axes, 1);
    lz_tensor *y = lz_mul(xc, lz_rsqrt(lz_add(var, eps_t)));
    if (weight) y = lz_mul(y, weight);
    if (bias) y = lz_add(y, bias);
    lz_keep(y);
    lz_scope_end();
    return y;
}
