/* Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_
 * (norm 2): norm = sqrt(sum of every gradient's squares), each gradient
 * scaled by min(max_norm / (norm + 1e-6), 1). Recorded as ops between the
 * backward and the optimizer step, so it runs inside the step's one
 * execution and the norm never visits the host unless read. */
#include <math.h>

#include "lazyc.h"
#include "base/error.h"
#include "ops/ops_util.h"

lz_tensor *lz_clip_grad_norm(lz_tensor *const *params, int n, float max_norm)
{
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return lz_errorf("lz_clip_grad_norm: max_norm %g must be positive and finite", (double)max_norm);
    if (n < 0 || (n > 0 && !params)) return lz_errorf("lz_clip_grad_norm: bad parameter list");
    lz_no_grad_begin();
    lz_scope_begin();
    lz_tensor *sq = NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        lz_tensor *g = params[i] ? lz_grad(params[i]) : NULL;
        if (!g) continue;
        if (lz_tensor_dtype(g) != LZ_F32) {
            lz_errorf("lz_clip_grad_norm: gradient %d is %s, not f32", i, lz_dtype_name(lz_tensor_dtype(g)));
            rc = -1;
            break;
        }
        lz_tensor *s = lz_sum(lz_mul(g, g));
        sq = sq ? lz_add(sq, s) : s;
        if (!sq) rc = -1;
    }
    lz_tensor *norm = NULL;
    if (rc == 0 && !sq) {
        lz_errorf("lz_clip_grad_norm: none of the %d tensors has a gradient (call it after lz_backward)", n);
        rc = -1;
    }
    if (rc == 0) {
        norm = lz_sqrt(sq);
        lz_attrs a = {.n_fattr = 1, .fattr = {max_norm}};
        lz_tensor *coef = norm ? lz_record(LZ_OP_CLIP_COEF, LZ_F32, 0, lz_t_shape(norm), 1, &norm, &a) : NULL;
        for (int i = 0; i < n && rc == 0 && coef; i++) {
            lz_tensor *g = params[i] ? lz_grad(params[i]) : NULL;
            if (g) rc = lz_assign(g, lz_mul(g, coef));
        }
        if (!coef) rc = -1;
    }
    if (rc == 0) lz_keep(norm);
    lz_scope_end();
    lz_no_grad_end();
    return rc == 0 ? norm : NULL;
}
