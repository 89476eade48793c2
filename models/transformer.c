#include "transformer.h"
#include "layers.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* Parameters are looked up by name at every trace rather than cached at
   build time, so a checkpoint loader that swaps a tensor in the set can
   never leave the model holding a stale handle. */
lz_tensor *lz_tf_param(const lz_params *p, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    lz_tensor *t = lz_params_find(p, name);
    if (!t) lz_set_error("model parameter %s is missing from the parameter set", name);
    return t;
}

/* [B, S, E] -> [B, H, S, E/H] */
static lz_tensor *split_heads(lz_tensor *x, int heads)
{
    int64_t b = lz_dim(x, 0), s = lz_dim(x, 1), e = lz_dim(x, 2);
    int64_t shape[4] = {b, s, heads, e / heads};
    static const int perm[4] = {0, 2, 1, 3};
    return lz_permute(lz_reshape(x, 4, shape), perm);
}

lz_tensor *lz_tf_self_attention(const lz_params *p, const char *prefix, lz_tensor *x,
                                int heads, float attn_dropout)
{
    if (!x) return NULL;
    int64_t b = lz_dim(x, 0), s = lz_dim(x, 1), e = lz_dim(x, 2);
    lz_scope_begin();
    lz_tensor *qkv = lz_linear(x, lz_tf_param(p, "%s.in_proj_weight", prefix),
                                  lz_tf_param(p, "%s.in_proj_bias", prefix));
    lz_tensor *q = split_heads(lz_slice(qkv, 2, 0, e), heads);
    lz_tensor *k = split_heads(lz_slice(qkv, 2, e, 2 * e), heads);
    lz_tensor *v = split_heads(lz_slice(qkv, 2, 2 * e, 3 * e), heads);
    lz_tensor *o;
    if (attn_dropout > 0) {
        /* nn.MultiheadAttention drops attention probabilities, which the
           fused op does not: compose it. The scale is the model's
           constant, an attribute of the op: as host data (lz_scalar) a
           captured step would freeze it, and say so. */
        lz_tensor *qs = lz_scale(q, (float)(1.0 / sqrt((double)(e / heads))));
        lz_tensor *att = lz_softmax(lz_matmul(qs, lz_transpose(k, 2, 3)), 3);
        o = lz_matmul(lz_dropout(att, attn_dropout, 1), v);
    } else {
        o = lz_attention(q, k, v, NULL, 0.0f);
    }
    static const int perm[4] = {0, 2, 1, 3};
    int64_t merged[3] = {b, s, e};
    o = lz_reshape(lz_permute(o, perm), 3, merged);
    lz_tensor *y = lz_linear(o, lz_tf_param(p, "%s.out_proj.weight", prefix),
                                lz_tf_param(p, "%s.out_proj.bias", prefix));
    lz_keep(y);
    lz_scope_end();
    return y;
}

int lz_tf_init_self_attention(lz_params *p, lz_init_rng *r, const char *prefix, int64_t dim)
{
    char name[256];
    int64_t w_in[2] = {3 * dim, dim}, b_in[1] = {3 * dim}, w_out[2] = {dim, dim}, b_out[1] = {dim};
    /* xavier_uniform over [3E, E]: fan_in E, fan_out 3E */
    float xavier = (float)sqrt(6.0 / (double)(dim + 3 * dim));
    snprintf(name, sizeof name, "%s.in_proj_weight", prefix);
    if (!lz_init_uniform(p, r, name, 2, w_in, xavier)) return -1;
    snprintf(name, sizeof name, "%s.in_proj_bias", prefix);
    if (!lz_init_const(p, name, LZ_F32, 1, b_in, 0.0, 1)) return -1;
    snprintf(name, sizeof name, "%s.out_proj.weight", prefix);
    if (!lz_init_uniform(p, r, name, 2, w_out, lz_init_default_bound(dim))) return -1;
    snprintf(name, sizeof name, "%s.out_proj.bias", prefix);
    if (!lz_init_const(p, name, LZ_F32, 1, b_out, 0.0, 1)) return -1;
    return 0;
}

int lz_tf_init_layer_norm(lz_params *p, const char *prefix, int64_t dim)
{
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (!lz_init_const(p, name, LZ_F32, 1, &dim, 1.0, 1)) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (!lz_init_const(p, name, LZ_F32, 1, &dim, 0.0, 1)) return -1;
    return 0;
}

int lz_tf_init_linear(lz_params *p, lz_init_rng *r, const char *prefix, int64_t in, int64_t out)
{
    char name[256];
    int64_t w[2] = {out, in};
    float bound = lz_init_default_bound(in);
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (!lz_init_uniform(p, r, name, 2, w, bound)) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (!lz_init_uniform(p, r, name, 1, &out, bound)) return -1;
    return 0;
}
