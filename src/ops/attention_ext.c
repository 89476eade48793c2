/* lz_attention with torch's scaled_dot_product_attention options: a
 * causal mask (query i sees keys j <= i, top-left aligned as torch's
 * is_causal), dropout on the attention weights drawn from lazyc's
 * generator in the graph, and grouped-query attention (k and v with fewer
 * heads, each shared by a group of query heads, as torch's enable_gqa).
 * Composed from recorded ops, so the gradient comes from their rules. */
#include <math.h>

#include "base/error.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

/* k [..., Hkv, S, d] -> [..., Hkv * rep, S, d], each head repeated rep
   times in a row (torch's repeat_interleave on the head axis). */
static lz_tensor *repeat_heads(lz_tensor *k, int64_t rep)
{
    const int nd = lz_t_ndim(k);
    int64_t s5[LZ_MAX_DIMS], e5[LZ_MAX_DIMS], out[LZ_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++) s5[d] = e5[d] = out[d] = lz_t_shape(k)[d];
    s5[nd - 2] = 1, e5[nd - 2] = rep;
    for (int d = nd - 2; d < nd; d++) s5[d + 1] = e5[d + 1] = lz_t_shape(k)[d];
    out[nd - 3] *= rep;
    out[nd - 2] = lz_t_shape(k)[nd - 2], out[nd - 1] = lz_t_shape(k)[nd - 1];
    return lz_reshape(lz_expand(lz_reshape(k, nd + 1, s5), nd + 1, e5), nd, out);
}

lz_tensor *lz_attention_ex(lz_tensor *q, lz_tensor *k, lz_tensor *v, const lz_attention_opts *opts)
{
    static const lz_attention_opts plain = {0};
    if (!opts) opts = &plain;
    if (!opts->causal && opts->dropout_p == 0.0f && !opts->enable_gqa)
        return lz_attention(q, k, v, opts->mask, opts->scale);
    lz_tensor *in[3] = {q, k, v};
    if (lz_check_operands("lz_attention_ex", 3, in)) return NULL;
    for (int i = 0; i < 3; i++)
        if (!lz_require_f32("lz_attention_ex", in[i])) return NULL;
    if (opts->mask && !lz_require_f32("lz_attention_ex (mask)", opts->mask)) return NULL;
    if (!(opts->dropout_p >= 0.0f && opts->dropout_p < 1.0f))
        return lz_errorf("lz_attention_ex: dropout_p %g is not in [0, 1)", (double)opts->dropout_p);
    if (opts->causal && opts->mask)
        return lz_errorf("lz_attention_ex: a mask and causal together (torch refuses them too)");
    if (!isfinite(opts->scale)) return lz_errorf("lz_attention_ex: scale %g is not finite", (double)opts->scale);
    const int nq = lz_t_ndim(q), nk = lz_t_ndim(k);
    if (nq < 2 || nk < 2 || lz_t_ndim(v) < 2) return lz_attention(q, k, v, opts->mask, opts->scale);
    const int64_t d = lz_t_shape(q)[nq - 1];
    if (opts->scale == 0.0f && d == 0)
        return lz_errorf("lz_attention_ex: head dim of q is 0, so the default scale 1/sqrt(d) is undefined");
    lz_tensor *scale_t = NULL;
    if (opts->scale != 0.0f && !(scale_t = lz_nn_const_scalar(opts->scale))) return NULL;

    lz_scope_begin();
    if (opts->enable_gqa && nq >= 3 && nk >= 3 && lz_t_ndim(v) >= 3) {
        const int64_t hq = lz_t_shape(q)[nq - 3], hk = lz_t_shape(k)[nk - 3];
        if (hk != hq) {
            if (hk <= 0 || hq % hk || lz_t_shape(v)[lz_t_ndim(v) - 3] != hk) {
                lz_scope_end();
                return lz_errorf("lz_attention_ex: %lld query heads are not a multiple of %lld key/value "
                                 "heads", (long long)hq, (long long)hk);
            }
            k = repeat_heads(k, hq / hk);
            v = repeat_heads(v, hq / hk);
        }
    }
    lz_tensor *s = lz_matmul(q, lz_transpose(k, -2, -1));
    s = scale_t ? lz_mul(s, scale_t) : lz_scale(s, (float)(1.0 / sqrt((double)d)));
    if (opts->mask && s) s = lz_add(s, opts->mask);
    if (opts->causal && s) s = lz_tri_mask(s, 0, 0, -INFINITY);
    lz_tensor *p = lz_softmax(s, -1);
    if (opts->dropout_p > 0.0f && p) p = lz_dropout(p, opts->dropout_p, 1);
    lz_tensor *y = lz_matmul(p, v);
    lz_keep(y);
    lz_scope_end();
    return y;
}
