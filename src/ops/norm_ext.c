/* Normalisations added for models from PyTorch, composed from recorded
 * ops (their gradient comes from those ops' rules): RMSNorm (Llama, T5),
 * GroupNorm (diffusion U-Nets, some convnets). LayerNorm without a bias is
 * lz_layer_norm with a NULL bias. */
#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

lz_tensor *lz_rms_norm(lz_tensor *x, int n_axes, lz_tensor *weight, float eps)
{
    if (lz_check_operands("lz_rms_norm", 1, &x)) return NULL;
    if (!lz_require_f32("lz_rms_norm", x)) return NULL;
    const int nd = lz_t_ndim(x);
    if (n_axes < 1 || n_axes > nd)
        return lz_errorf("lz_rms_norm: n_axes %d out of range for a %d-d tensor", n_axes, nd);
    if (!(eps >= 0.0f)) return lz_errorf("lz_rms_norm: eps %g must be >= 0", (double)eps);
    int axes[LZ_MAX_DIMS];
    for (int i = 0; i < n_axes; i++) axes[i] = nd - n_axes + i;
    lz_tensor *eps_t = lz_nn_const_scalar(eps);
    if (!eps_t) return NULL;
    lz_scope_begin();
    /* x * rsqrt(mean(x^2) + eps), torch's nn.RMSNorm and HF's LlamaRMSNorm */
    lz_tensor *ms = lz_mean_axes(lz_mul(x, x), n_axes, axes, 1);
    lz_tensor *y = lz_mul(x, lz_rsqrt(lz_add(ms, eps_t)));
    if (weight && y) y = lz_mul(y, weight);
    lz_keep(y);
    lz_scope_end();
    return y;
}

lz_tensor *lz_group_norm(lz_tensor *x, int groups, lz_tensor *weight, lz_tensor *bias, float eps)
{
    if (lz_check_operands("lz_group_norm", 1, &x)) return NULL;
    if (!lz_require_f32("lz_group_norm", x)) return NULL;
    const int nd = lz_t_ndim(x);
    const int64_t *s = lz_t_shape(x);
    if (nd < 2) return lz_errorf("lz_group_norm: x must be [N, C, ...], got %d-d", nd);
    if (groups < 1 || s[1] % groups)
        return lz_errorf("lz_group_norm: %lld channels do not split into %d groups", (long long)s[1], groups);
    int64_t g3[3] = {s[0], groups, -1}, cshape[LZ_MAX_DIMS];
    for (int d = 0; d < nd; d++) cshape[d] = d == 1 ? s[1] : 1;
    lz_scope_begin();
    /* each (sample, group) normalised over its channels and positions */
    lz_tensor *y = lz_reshape(lz_layer_norm(lz_reshape(x, 3, g3), 1, NULL, NULL, eps), nd, s);
    if (weight && y) y = lz_mul(y, lz_reshape(weight, nd, cshape));
    if (bias && y) y = lz_add(y, lz_reshape(bias, nd, cshape));
    lz_keep(y);
    lz_scope_end();
    return y;
}
