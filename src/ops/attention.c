/* Scaled dot-product attention, composed from recorded ops:
 * softmax(q k^T * scale + mask) v over the last two axes. Its gradient
 * comes from the rules of matmul, softmax and the element-wise ops. */
#include <math.h>

#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

lz_tensor *lz_attention(lz_tensor *q, lz_tensor *k, lz_tensor *v, lz_tensor *mask, float scale)
{
    lz_tensor *in[3] = {q, k, v};
    if (lz_check_operands("lz_attention", 3, in)) return NULL;
    if (!lz_require_f32("lz_attention", q) || !lz_require_f32("lz_attention", k) ||
        !lz_require_f32("lz_attention", v) || (mask && !lz_require_f32("lz_attention", mask)))
        return NULL;
    char sq[96], sk[96], sv[96];
    const int nq = lz_t_ndim(q), nk = lz_t_ndim(k), nv = lz_t_ndim(v);
    const int64_t *shq = lz_t_shape(q), *shk = lz_t_shape(k), *shv = lz_t_shape(v);
    if (nq < 2 || nk < 2 || nv < 2)
        return lz_errorf("lz_attention: q %s, k %s and v %s must be at least 2-d ([..., L, d])",
                         lz_shape_str(sq, nq, shq), lz_shape_str(sk, nk, shk), lz_shape_str(sv, nv, shv));
    if (shq[nq - 1] != shk[nk - 1])
        return lz_errorf("lz_attention: q %s and k %s have different head dims %lld and %lld",
                         lz_shape_str(sq, nq, shq), lz_shape_str(sk, nk, shk),
                         (long long)shq[nq - 1], (long long)shk[nk - 1]);
    if (shk[nk - 2] != shv[nv - 2])
        return lz_errorf("lz_attention: k %s and v %s have different key lengths %lld and %lld",
                         lz_shape_str(sk, nk, shk), lz_shape_str(sv, nv, shv),
                         (long long)shk[nk - 2], (long long)shv[nv - 2]);
    int nb, nb2;
    int64_t batch[LZ_MAX_DIMS], batch2[LZ_MAX_DIMS];
    if (lz_broadcast_shape("lz_attention", nq - 2, shq, nk - 2, shk, &nb, batch) != 0 ||
        lz_broadcast_shape("lz_attention", nb, batch, nv - 2, shv, &nb2, batch2) != 0)
        return lz_errorf("lz_attention: batch dimensions of q %s, k %s and v %s do not broadcast",
                         lz_shape_str(sq, nq, shq), lz_shape_str(sk, nk, shk), lz_shape_str(sv, nv, shv));
    if (scale == 0.0f && shq[nq - 1] == 0)
        return lz_errorf("lz_attention: head dim of q %s is 0, so the default scale 1/sqrt(d) is undefined",
                         lz_shape_str(sq, nq, shq));
    if (!isfinite(scale)) return lz_errorf("lz_attention: scale %g is not finite", (double)scale);
    lz_tensor *scale_t = NULL;
    if (scale != 0.0f && !(scale_t = lz_nn_const_scalar(scale))) return NULL;

    lz_scope_begin();
    lz_tensor *s = lz_matmul(q, lz_transpose(k, -2, -1));
    /* 1/sqrt(d) depends on the shape alone, so it may be a constant of the
       graph; a scale the caller chose is a hyperparameter and stays data */
    s = scale_t ? lz_mul(s, scale_t) : lz_scale(s, (float)(1.0 / sqrt((double)shq[nq - 1])));
    if (mask && s) {
        lz_tensor *m = lz_add(s, mask);
        if (!m) {
            char sm[96], ss[96];
            lz_errorf("lz_attention: mask %s does not broadcast to the scores %s",
                      lz_shape_str(sm, lz_t_ndim(mask), lz_t_shape(mask)),
                      lz_shape_str(ss, lz_t_ndim(s), lz_t_shape(s)));
        }
        s = m;
    }
    lz_tensor *y = lz_matmul(lz_softmax(s, -1), v);
    lz_keep(y);
    lz_scope_end();
    return y;
}
