/* Element-wise losses with torch's reductions, composed from recorded ops:
 * MSE, L1, smooth L1 (Huber with beta) and BCE with logits in torch's
 * stable form. */
#include <math.h>

#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

static lz_tensor *reduce(const char *name, lz_tensor *l, lz_reduction r)
{
    if (r == LZ_REDUCTION_MEAN) return lz_mean(l);
    if (r == LZ_REDUCTION_SUM) return lz_sum(l);
    if (r == LZ_REDUCTION_NONE) return l;   /* the caller keeps it past its scope */
    return lz_errorf("%s: unknown reduction %d", name, (int)r);
}

static int check_pair(const char *name, lz_tensor *a, lz_tensor *b)
{
    lz_tensor *in[2] = {a, b};
    if (lz_check_operands(name, 2, in)) return -1;
    if (!lz_require_f32(name, a) || !lz_require_f32(name, b)) return -1;
    return 0;
}

lz_tensor *lz_mse_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction)
{
    if (check_pair("lz_mse_loss", input, target)) return NULL;
    lz_scope_begin();
    lz_tensor *d = lz_sub(input, target);
    lz_tensor *y = d ? reduce("lz_mse_loss", lz_mul(d, d), reduction) : NULL;
    lz_keep(y);
    lz_scope_end();
    return y;
}

/* |d| as max(d, -d): gradient 0 at d == 0 (ties split), as torch's sign */
static lz_tensor *absval(lz_tensor *d) { return lz_maximum(d, lz_neg(d)); }

lz_tensor *lz_l1_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction)
{
    if (check_pair("lz_l1_loss", input, target)) return NULL;
    lz_scope_begin();
    lz_tensor *y = reduce("lz_l1_loss", absval(lz_sub(input, target)), reduction);
    lz_keep(y);
    lz_scope_end();
    return y;
}

lz_tensor *lz_smooth_l1_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction, float beta)
{
    if (check_pair("lz_smooth_l1_loss", input, target)) return NULL;
    if (!(beta >= 0.0f) || !isfinite(beta)) return lz_errorf("lz_smooth_l1_loss: beta %g must be >= 0", (double)beta);
    lz_scope_begin();
    lz_tensor *d = lz_sub(input, target), *ad = absval(d), *l;
    if (beta == 0.0f) {
        l = ad;
    } else {
        /* 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere */
        lz_tensor *beta_t = lz_nn_const_scalar(beta), *half_beta = lz_nn_const_scalar(0.5f * beta);
        l = lz_where(lz_lt(ad, beta_t), lz_scale(lz_mul(d, d), 0.5f / beta), lz_sub(ad, half_beta));
    }
    lz_tensor *y = reduce("lz_smooth_l1_loss", l, reduction);
    lz_keep(y);
    lz_scope_end();
    return y;
}

lz_tensor *lz_bce_with_logits(lz_tensor *logits, lz_tensor *target, lz_tensor *weight, lz_tensor *pos_weight,
                              lz_reduction reduction)
{
    if (check_pair("lz_bce_with_logits", logits, target)) return NULL;
    lz_tensor *one = lz_nn_const_scalar(1.0f);
    if (!one) return NULL;
    lz_scope_begin();
    lz_tensor *x = logits, *t = target;
    /* log(1 + exp(-|x|)): the stable softplus torch uses */
    lz_tensor *soft = lz_log(lz_add(one, lz_exp(lz_neg(absval(x)))));
    lz_tensor *l;
    if (!pos_weight) {
        l = lz_add(lz_sub(lz_relu(x), lz_mul(x, t)), soft);
    } else {
        lz_tensor *lw = lz_add(one, lz_mul(lz_sub(pos_weight, one), t));
        l = lz_add(lz_mul(lz_sub(one, t), x), lz_mul(lw, lz_add(soft, lz_relu(lz_neg(x)))));
    }
    if (weight && l) l = lz_mul(l, weight);
    lz_tensor *y = l ? reduce("lz_bce_with_logits", l, reduction) : NULL;
    lz_keep(y);
    lz_scope_end();
    return y;
}
