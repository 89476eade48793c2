#include "layers.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* Prefixes up to 255 characters (the longest torchvision key is about 60);
   a full name adds "." and a leaf such as "num_batches_tracked". */
#define PREFIX_LEN 256
#define NAME_MAX_LEN (PREFIX_LEN + 32)

void lz_layer_ctx_init(lz_layer_ctx *c, lz_params *p, uint64_t seed)
{
    c->params = p;
    c->rng.s = seed ? seed : 0x9E3779B97F4A7C15ull;  /* seed 0 means the default seed */
    c->conv_init = LZ_INIT_TORCH_DEFAULT;
    c->linear_init = LZ_INIT_TORCH_DEFAULT;
    c->failed = 0;
}

static int fail(lz_layer_ctx *c)
{
    c->failed = 1;
    return -1;
}

/* "<prefix>.<leaf>", or "<leaf>" for an empty prefix. */
static void leaf_name(char *out, const char *prefix, const char *leaf)
{
    if (prefix[0]) snprintf(out, NAME_MAX_LEN, "%s.%s", prefix, leaf);
    else snprintf(out, NAME_MAX_LEN, "%s", leaf);
}

/* weight and bias of a conv or linear layer, drawn as init says. */
static int make_weight_bias(lz_layer_ctx *c, lz_layer_init init, const char *prefix,
                            int ndim, const int64_t *wshape, int64_t fan_in, int64_t fan_out,
                            int bias, lz_tensor **w, lz_tensor **b)
{
    char name[NAME_MAX_LEN];
    leaf_name(name, prefix, "weight");
    switch (init) {
    case LZ_INIT_KAIMING_FAN_OUT:
        *w = lz_init_normal(c->params, &c->rng, name, ndim, wshape,
                            (float)sqrt(2.0 / (double)(fan_out > 0 ? fan_out : 1)));
        break;
    case LZ_INIT_NORMAL_001:
        *w = lz_init_normal(c->params, &c->rng, name, ndim, wshape, 0.01f);
        break;
    case LZ_INIT_ZEROS:
        *w = lz_init_const(c->params, name, LZ_F32, ndim, wshape, 0.0, 1);
        break;
    default:
        *w = lz_init_uniform(c->params, &c->rng, name, ndim, wshape, lz_init_default_bound(fan_in));
        break;
    }
    if (!*w) return fail(c);
    *b = NULL;
    if (!bias) return 0;
    leaf_name(name, prefix, "bias");
    int64_t bshape[1] = { wshape[0] };
    if (init == LZ_INIT_TORCH_DEFAULT)
        *b = lz_init_uniform(c->params, &c->rng, name, 1, bshape, lz_init_default_bound(fan_in));
    else
        *b = lz_init_const(c->params, name, LZ_F32, 1, bshape, 0.0, 1);
    return *b ? 0 : fail(c);
}

int lz_conv_make(lz_layer_ctx *c, lz_conv_layer *l, int64_t in, int64_t out,
                 int k, int stride, int pad, int groups, int bias,
                 const char *name_fmt, ...)
{
    *l = (lz_conv_layer){0};
    if (c->failed) return -1;
    char prefix[PREFIX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(prefix, sizeof prefix, name_fmt, ap);
    va_end(ap);
    if (groups < 1) groups = 1;
    int64_t shape[4] = { out, in / groups, k, k };
    if (make_weight_bias(c, c->conv_init, prefix, 4, shape, shape[1] * k * k, out * k * k,
                         bias, &l->weight, &l->bias))
        return -1;
    l->opts = (lz_conv2d_opts){ .stride = { stride, stride }, .padding = { pad, pad },
                                .dilation = { 1, 1 }, .groups = groups };
    return 0;
}

int lz_bn_make(lz_layer_ctx *c, lz_bn_layer *l, int64_t ch, const char *name_fmt, ...)
{
    *l = (lz_bn_layer){ .eps = 1e-5f, .momentum = 0.1f };
    if (c->failed) return -1;
    char prefix[PREFIX_LEN], name[NAME_MAX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(prefix, sizeof prefix, name_fmt, ap);
    va_end(ap);
    int64_t shape[1] = { ch };
    leaf_name(name, prefix, "weight");
    l->weight = lz_init_const(c->params, name, LZ_F32, 1, shape, 1.0, 1);
    leaf_name(name, prefix, "bias");
    l->bias = l->weight ? lz_init_const(c->params, name, LZ_F32, 1, shape, 0.0, 1) : NULL;
    leaf_name(name, prefix, "running_mean");
    l->running_mean = l->bias ? lz_init_const(c->params, name, LZ_F32, 1, shape, 0.0, 0) : NULL;
    leaf_name(name, prefix, "running_var");
    l->running_var = l->running_mean ? lz_init_const(c->params, name, LZ_F32, 1, shape, 1.0, 0) : NULL;
    leaf_name(name, prefix, "num_batches_tracked");
    if (!l->running_var || !lz_init_const(c->params, name, LZ_I64, 0, NULL, 0.0, 0))
        return fail(c);
    return 0;
}

int lz_linear_make(lz_layer_ctx *c, lz_linear_layer *l, int64_t in, int64_t out, int bias,
                   const char *name_fmt, ...)
{
    *l = (lz_linear_layer){0};
    if (c->failed) return -1;
    char prefix[PREFIX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(prefix, sizeof prefix, name_fmt, ap);
    va_end(ap);
    int64_t shape[2] = { out, in };
    return make_weight_bias(c, c->linear_init, prefix, 2, shape, in, out, bias, &l->weight, &l->bias);
}

int lz_ln_make(lz_layer_ctx *c, lz_ln_layer *l, int64_t dim, const char *name_fmt, ...)
{
    *l = (lz_ln_layer){ .eps = 1e-5f };
    if (c->failed) return -1;
    char prefix[PREFIX_LEN], name[NAME_MAX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(prefix, sizeof prefix, name_fmt, ap);
    va_end(ap);
    int64_t shape[1] = { dim };
    leaf_name(name, prefix, "weight");
    l->weight = lz_init_const(c->params, name, LZ_F32, 1, shape, 1.0, 1);
    leaf_name(name, prefix, "bias");
    l->bias = l->weight ? lz_init_const(c->params, name, LZ_F32, 1, shape, 0.0, 1) : NULL;
    return l->bias ? 0 : fail(c);
}

int lz_embedding_make(lz_layer_ctx *c, lz_tensor **weight, int64_t num, int64_t dim,
                      const char *name_fmt, ...)
{
    *weight = NULL;
    if (c->failed) return -1;
    char prefix[PREFIX_LEN], name[NAME_MAX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(prefix, sizeof prefix, name_fmt, ap);
    va_end(ap);
    int64_t shape[2] = { num, dim };
    leaf_name(name, prefix, "weight");
    *weight = lz_init_normal(c->params, &c->rng, name, 2, shape, 1.0f);
    return *weight ? 0 : fail(c);
}

lz_tensor *lz_param_make(lz_layer_ctx *c, int ndim, const int64_t *shape, float std,
                         const char *name_fmt, ...)
{
    if (c->failed) return NULL;
    char name[NAME_MAX_LEN];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(name, sizeof name, name_fmt, ap);
    va_end(ap);
    lz_tensor *t;
    if (std > 0)
        t = lz_init_normal(c->params, &c->rng, name, ndim, shape, std);
    else if (c->linear_init == LZ_INIT_ZEROS)
        t = lz_init_const(c->params, name, LZ_F32, ndim, shape, 0.0, 1);
    else if (c->linear_init == LZ_INIT_NORMAL_001)
        t = lz_init_normal(c->params, &c->rng, name, ndim, shape, 0.01f);
    else
        t = lz_init_uniform(c->params, &c->rng, name, ndim, shape,
                            lz_init_default_bound(ndim > 0 ? shape[ndim - 1] : 1));
    if (!t) fail(c);
    return t;
}

lz_tensor *lz_conv_forward(const lz_conv_layer *l, lz_tensor *x)
{
    return lz_conv2d(x, l->weight, l->bias, l->opts);
}

lz_tensor *lz_bn_forward(const lz_bn_layer *l, lz_tensor *x, int training)
{
    return lz_batch_norm(x, l->weight, l->bias, l->running_mean, l->running_var,
                         training, l->momentum, l->eps);
}

lz_tensor *lz_act_forward(lz_tensor *x, lz_act act)
{
    switch (act) {
    case LZ_ACT_RELU:  return lz_relu(x);
    case LZ_ACT_RELU6: return lz_relu6(x);
    default: {
        /* a new handle either way, so callers free what they get */
        int64_t shape[LZ_MAX_DIMS];
        int nd = x ? lz_ndim(x) : 0;
        for (int d = 0; d < nd; d++) shape[d] = lz_dim(x, d);
        return x ? lz_reshape(x, nd, shape) : NULL;
    }
    }
}

lz_tensor *lz_conv_bn_act(const lz_conv_layer *conv, const lz_bn_layer *bn, lz_tensor *x,
                          int training, lz_act act)
{
    lz_tensor *y = lz_conv_forward(conv, x);
    if (!y) return NULL;
    y = lz_layer_then(y, lz_bn_forward(bn, y, training));
    if (!y || act == LZ_ACT_NONE) return y;
    return lz_layer_then(y, lz_act_forward(y, act));
}

lz_tensor *lz_linear_forward(const lz_linear_layer *l, lz_tensor *x)
{
    return lz_linear(x, l->weight, l->bias);
}

lz_tensor *lz_ln_forward(const lz_ln_layer *l, lz_tensor *x)
{
    return lz_layer_norm(x, 1, l->weight, l->bias, l->eps);
}
