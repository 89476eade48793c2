/* timm_vision_transformer: torchvision 0.14's VisionTransformer(image_size=S,
 * patch_size=16, num_layers=L, num_heads=6, hidden_dim=384, mlp_dim=1536)
 * (ViT-S/16), parameter names and initialisation as its state_dict and
 * _init_weights. Its dropout and attention dropout are 0.0 by default, so
 * the model has no random op and lz_model_set_dropout changes nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "init.h"
#include "layers.h"
#include "transformer.h"
#include "zoo_internal.h"

typedef struct vit {
    int64_t image, patch, hidden, mlp, classes;
    int layers, heads;
} vit;

static lz_tensor *encoder_block(const lz_params *p, const vit *v, int i, lz_tensor *x)
{
    char pre[96];
    snprintf(pre, sizeof pre, "encoder.layers.encoder_layer_%d", i);
    lz_tensor *h = lz_layer_norm(x, 1, lz_tf_param(p, "%s.ln_1.weight", pre),
                                 lz_tf_param(p, "%s.ln_1.bias", pre), 1e-6f);
    char att[128];
    snprintf(att, sizeof att, "%s.self_attention", pre);
    x = lz_add(x, lz_tf_self_attention(p, att, h, v->heads, 0.0f));
    h = lz_layer_norm(x, 1, lz_tf_param(p, "%s.ln_2.weight", pre),
                      lz_tf_param(p, "%s.ln_2.bias", pre), 1e-6f);
    h = lz_gelu(lz_linear(h, lz_tf_param(p, "%s.mlp.0.weight", pre), lz_tf_param(p, "%s.mlp.0.bias", pre)));
    h = lz_linear(h, lz_tf_param(p, "%s.mlp.3.weight", pre), lz_tf_param(p, "%s.mlp.3.bias", pre));
    return lz_add(x, h);
}

static lz_tensor *vit_forward(lz_model *m, lz_tensor *x, int training)
{
    (void)training;   /* no dropout, no batch norm */
    const vit *v = m->impl;
    const lz_params *p = m->params;
    if (!x) return NULL;
    if (lz_ndim(x) != 4 || lz_dim(x, 1) != 3 || lz_dim(x, 2) != v->image || lz_dim(x, 3) != v->image) {
        /* the position embedding fixes the number of patches */
        lz_set_error("%s: input must be [B, 3, %lld, %lld] images", m->spec.name,
                         (long long)v->image, (long long)v->image);
        return NULL;
    }
    int64_t b = lz_dim(x, 0), e = v->hidden;
    lz_scope_begin();
    lz_conv2d_opts co = {.stride = {(int)v->patch, (int)v->patch}};
    lz_tensor *y = lz_conv2d(x, lz_tf_param(p, "conv_proj.weight"), lz_tf_param(p, "conv_proj.bias"), co);
    /* [B, E, nh, nw] -> [B, nh*nw, E], as _process_input */
    int64_t tokens[3] = {b, e, -1};
    y = lz_transpose(lz_reshape(y, 3, tokens), 1, 2);
    int64_t cls_shape[3] = {b, 1, e};
    lz_tensor *parts[2] = {lz_expand(lz_tf_param(p, "class_token"), 3, cls_shape), y};
    y = lz_cat(parts, 2, 1);
    y = lz_add(y, lz_tf_param(p, "encoder.pos_embedding"));
    for (int i = 0; i < v->layers; i++) y = encoder_block(p, v, i, y);
    y = lz_layer_norm(y, 1, lz_tf_param(p, "encoder.ln.weight"), lz_tf_param(p, "encoder.ln.bias"), 1e-6f);
    int64_t first[2] = {b, e};
    y = lz_reshape(lz_slice(y, 1, 0, 1), 2, first);   /* the class token: x[:, 0] */
    y = lz_linear(y, lz_tf_param(p, "heads.head.weight"), lz_tf_param(p, "heads.head.bias"));
    lz_keep(y);
    lz_scope_end();
    return y;
}

static int add_params(lz_params *p, lz_init_rng *r, const vit *v)
{
    int64_t e = v->hidden, n_tokens = (v->image / v->patch) * (v->image / v->patch) + 1;
    int64_t cls[3] = {1, 1, e}, pos[3] = {1, n_tokens, e};
    int64_t conv_w[4] = {e, 3, v->patch, v->patch};
    int64_t fan_in = 3 * v->patch * v->patch;
    /* state_dict order: class_token comes first */
    if (!lz_init_const(p, "class_token", LZ_F32, 3, cls, 0.0, 1)) return -1;
    /* trunc_normal_(std=sqrt(1/fan_in)) truncates at +-2 absolute, about
       55 standard deviations: a plain normal draws the same values. */
    if (!lz_init_normal(p, r, "conv_proj.weight", 4, conv_w, (float)sqrt(1.0 / (double)fan_in))) return -1;
    if (!lz_init_const(p, "conv_proj.bias", LZ_F32, 1, &e, 0.0, 1)) return -1;
    if (!lz_init_normal(p, r, "encoder.pos_embedding", 3, pos, 0.02f)) return -1;
    char pre[128], name[192];
    for (int i = 0; i < v->layers; i++) {
        snprintf(pre, sizeof pre, "encoder.layers.encoder_layer_%d", i);
        snprintf(name, sizeof name, "%s.ln_1", pre);
        if (lz_tf_init_layer_norm(p, name, e)) return -1;
        snprintf(name, sizeof name, "%s.self_attention", pre);
        if (lz_tf_init_self_attention(p, r, name, e)) return -1;
        snprintf(name, sizeof name, "%s.ln_2", pre);
        if (lz_tf_init_layer_norm(p, name, e)) return -1;
        /* MLPBlock: xavier_uniform weights, normal(std=1e-6) biases */
        static const char *const lin[2] = {"mlp.0", "mlp.3"};
        for (int j = 0; j < 2; j++) {
            int64_t in = j ? v->mlp : e, out = j ? e : v->mlp, w[2] = {out, in};
            snprintf(name, sizeof name, "%s.%s.weight", pre, lin[j]);
            if (!lz_init_uniform(p, r, name, 2, w, (float)sqrt(6.0 / (double)(in + out)))) return -1;
            snprintf(name, sizeof name, "%s.%s.bias", pre, lin[j]);
            if (!lz_init_normal(p, r, name, 1, &out, 1e-6f)) return -1;
        }
    }
    if (lz_tf_init_layer_norm(p, "encoder.ln", e)) return -1;
    /* the classification head starts at zero, as torchvision's */
    int64_t head_w[2] = {v->classes, e};
    if (!lz_init_const(p, "heads.head.weight", LZ_F32, 2, head_w, 0.0, 1)) return -1;
    if (!lz_init_const(p, "heads.head.bias", LZ_F32, 1, &v->classes, 0.0, 1)) return -1;
    return 0;
}

int lz_zoo_build_vit(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    vit *v = calloc(1, sizeof *v);
    if (!v) return -1;
    *v = (vit){.image = bench_size == 2 ? 224 : bench_size ? 128 : 32, .patch = 16, .hidden = 384, .mlp = 1536,
               .classes = bench_size ? 1000 : 10, .layers = bench_size ? 12 : 2, .heads = 6};
    m->impl = v;
    m->free_impl = free;
    m->forward = vit_forward;
    int64_t batch = bench_size == 2 ? 64 : bench_size ? 8 : 2;
    m->spec = (lz_model_spec){.name = name, .input_ndim = 4,
                              .input_shape = {batch, 3, v->image, v->image}, .input_dtype = LZ_F32,
                              .target_ndim = 1, .target_shape = {batch}, .num_classes = v->classes};
    lz_init_rng r = {seed ? seed : 0x9E3779B97F4A7C15ull};   /* seed 0 means the default seed */
    return add_params(m->params, &r, v);
}
