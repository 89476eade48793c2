/* mnasnet1_0 as torchvision 0.14 defines it (MNASNet B1, alpha 1.0): a
 * stem (conv, depthwise separable conv), six stacks of inverted residuals
 * with 3x3 or 5x5 depthwise convs, a 1x1 conv to 1280 channels, the mean
 * over H and W and a dropout(0.2) + linear classifier. Activations are
 * ReLU; every batch norm uses momentum 1 - 0.9997 (torchvision's
 * _BN_MOMENTUM, the paper's TensorFlow decay). Public API only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "zoo_internal.h"

enum { MN_MAX_UNITS = 3, MN_BLOCKS = 18 };   /* stem + 16 inverted residuals + last conv */

typedef struct mn_unit {
    lz_conv_layer conv;
    lz_bn_layer bn;
    lz_act act;
} mn_unit;

typedef struct mn_block {
    mn_unit unit[MN_MAX_UNITS];
    int n_units;
    int residual;
} mn_block;

typedef struct mnasnet {
    mn_block block[MN_BLOCKS];
    lz_linear_layer fc;
    float dropout_p;
} mnasnet;

/* layers.<idx> in torchvision's nn.Sequential: conv at conv_idx, its norm
   right after it. */
static void make_unit(lz_layer_ctx *c, mn_unit *u, int64_t in, int64_t out, int k, int stride,
                      int groups, lz_act act, const char *prefix, int conv_idx)
{
    lz_conv_make(c, &u->conv, in, out, k, stride, k / 2, groups, 0, "%s%d", prefix, conv_idx);
    lz_bn_make(c, &u->bn, out, "%s%d", prefix, conv_idx + 1);
    u->bn.momentum = (float)(1.0 - 0.9997);
    u->act = act;
}

/* _InvertedResidual(in, out, k, stride, expansion) at layers.<stack>.<i>:
   its own Sequential "layers" holds conv/bn/relu at 0-2, 3-5 and 6-7. */
static void make_inverted_residual(lz_layer_ctx *c, mn_block *b, int stack, int i, int64_t in,
                                   int64_t out, int k, int stride, int expansion)
{
    char prefix[64];
    int64_t mid = in * expansion;
    snprintf(prefix, sizeof prefix, "layers.%d.%d.layers.", stack, i);
    make_unit(c, &b->unit[0], in, mid, 1, 1, 1, LZ_ACT_RELU, prefix, 0);
    make_unit(c, &b->unit[1], mid, mid, k, stride, (int)mid, LZ_ACT_RELU, prefix, 3);
    make_unit(c, &b->unit[2], mid, out, 1, 1, 1, LZ_ACT_NONE, prefix, 6);
    b->n_units = 3;
    b->residual = in == out && stride == 1;
}

static lz_tensor *mnasnet_forward(lz_model *m, lz_tensor *x, int training)
{
    const mnasnet *net = m->impl;
    lz_scope_begin();
    lz_tensor *h = x;
    for (int i = 0; i < MN_BLOCKS && h; i++) {
        const mn_block *b = &net->block[i];
        lz_tensor *y = h;
        for (int u = 0; u < b->n_units && y; u++)
            y = lz_conv_bn_act(&b->unit[u].conv, &b->unit[u].bn, y, training, b->unit[u].act);
        h = b->residual ? lz_add(y, h) : y;
    }
    static const int hw[2] = {2, 3};
    h = lz_mean_axes(h, 2, hw, 0);
    if (training && m->dropout) h = lz_dropout(h, net->dropout_p, 1);
    lz_tensor *out = lz_linear_forward(&net->fc, h);
    lz_keep(out);
    lz_scope_end();
    return out;
}

int lz_zoo_build_mnasnet(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    (void)name;
    /* _get_depths(1.0) */
    static const int64_t depth[8] = {32, 16, 24, 40, 80, 96, 192, 320};
    /* _stack(depth[s], depth[s + 1], kernel, stride, expansion, repeats) */
    static const int stacks[6][4] = {
        {3, 2, 3, 3}, {5, 2, 3, 3}, {5, 2, 6, 3}, {3, 1, 6, 2}, {5, 2, 6, 4}, {3, 1, 6, 1},
    };
    lz_zoo_image_spec(&m->spec, "mnasnet1_0", bench_size, bench_size ? 1000 : 10);
    mnasnet *net = calloc(1, sizeof *net);
    if (!net) {
        free(net);
        return -1;
    }
    net->dropout_p = 0.2f;
    m->impl = net;
    m->free_impl = free;
    m->forward = mnasnet_forward;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    c.conv_init = LZ_INIT_KAIMING_FAN_OUT;     /* kaiming_normal_(fan_out, relu) */

    mn_block *b = &net->block[0];
    make_unit(&c, &b->unit[0], 3, depth[0], 3, 2, 1, LZ_ACT_RELU, "layers.", 0);
    make_unit(&c, &b->unit[1], depth[0], depth[0], 3, 1, (int)depth[0], LZ_ACT_RELU, "layers.", 3);
    make_unit(&c, &b->unit[2], depth[0], depth[1], 1, 1, 1, LZ_ACT_NONE, "layers.", 6);
    b->n_units = 3;
    int idx = 1;
    for (int s = 0; s < 6; s++) {
        for (int i = 0; i < stacks[s][3]; i++, idx++)
            make_inverted_residual(&c, &net->block[idx], 8 + s, i, i == 0 ? depth[s + 1] : depth[s + 2],
                                   depth[s + 2], stacks[s][0], i == 0 ? stacks[s][1] : 1, stacks[s][2]);
    }
    b = &net->block[idx];
    make_unit(&c, &b->unit[0], depth[7], 1280, 1, 1, 1, LZ_ACT_RELU, "layers.", 14);
    b->n_units = 1;

    /* nn.Linear with kaiming_uniform_(mode="fan_out", nonlinearity="sigmoid"):
       bound sqrt(3 / out_features), bias 0 */
    if (!c.failed) {
        int64_t classes = m->spec.num_classes, wshape[2] = {classes, 1280}, bshape[1] = {classes};
        net->fc.weight = lz_init_uniform(m->params, &c.rng, "classifier.1.weight", 2, wshape,
                                         (float)sqrt(3.0 / (double)classes));
        net->fc.bias = net->fc.weight
            ? lz_init_const(m->params, "classifier.1.bias", LZ_F32, 1, bshape, 0.0, 1) : NULL;
        if (!net->fc.bias) c.failed = 1;
    }
    return c.failed ? -1 : 0;
}
