/* mobilenet_v2 as torchvision 0.14 defines it (MobileNetV2, width 1.0):
 * a stem conv, 17 inverted residual blocks (pointwise expansion, depthwise
 * 3x3, linear pointwise projection), a 1x1 conv to 1280 channels, global
 * average pooling and a dropout(0.2) + linear classifier. Every activation
 * is ReLU6. Public API only. */
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "zoo_internal.h"

enum { MB_MAX_UNITS = 3, MB_BLOCKS = 19 };   /* stem + 17 inverted residuals + last conv */

/* conv -> batch norm -> activation */
typedef struct mb_unit {
    lz_conv_layer conv;
    lz_bn_layer bn;
    lz_act act;
} mb_unit;

typedef struct mb_block {
    mb_unit unit[MB_MAX_UNITS];
    int n_units;
    int residual;            /* stride 1 and equal channels: x + block(x) */
} mb_block;

typedef struct mobilenet {
    mb_block block[MB_BLOCKS];
    lz_linear_layer fc;
    float dropout_p;
} mobilenet;

/* One unit; a non-empty bn_fmt names the batch norm apart from the conv
   (the pw-linear projection is a bare nn.Conv2d followed by the norm). */
static void make_unit(lz_layer_ctx *c, mb_unit *u, int64_t in, int64_t out, int k, int stride,
                      int groups, lz_act act, const char *conv_name, const char *bn_name)
{
    lz_conv_make(c, &u->conv, in, out, k, stride, (k - 1) / 2, groups, 0, "%s", conv_name);
    lz_bn_make(c, &u->bn, out, "%s", bn_name);
    u->act = act;
}

/* torchvision's InvertedResidual(inp, oup, stride, expand_ratio) at
   features.<idx>: conv.0 (expansion, absent when t == 1), the depthwise
   Conv2dNormActivation, then conv.<k> + conv.<k+1> for the projection. */
static void make_inverted_residual(lz_layer_ctx *c, mb_block *b, int idx, int64_t inp,
                                   int64_t oup, int stride, int t)
{
    int64_t hidden = inp * t;
    char cn[96], bn[96];
    int seq = 0;
    b->n_units = 0;
    if (t != 1) {
        snprintf(cn, sizeof cn, "features.%d.conv.%d.0", idx, seq);
        snprintf(bn, sizeof bn, "features.%d.conv.%d.1", idx, seq);
        make_unit(c, &b->unit[b->n_units++], inp, hidden, 1, 1, 1, LZ_ACT_RELU6, cn, bn);
        seq++;
    }
    snprintf(cn, sizeof cn, "features.%d.conv.%d.0", idx, seq);
    snprintf(bn, sizeof bn, "features.%d.conv.%d.1", idx, seq);
    make_unit(c, &b->unit[b->n_units++], hidden, hidden, 3, stride, (int)hidden, LZ_ACT_RELU6, cn, bn);
    seq++;
    snprintf(cn, sizeof cn, "features.%d.conv.%d", idx, seq);
    snprintf(bn, sizeof bn, "features.%d.conv.%d", idx, seq + 1);
    make_unit(c, &b->unit[b->n_units++], hidden, oup, 1, 1, 1, LZ_ACT_NONE, cn, bn);
    b->residual = stride == 1 && inp == oup;
}

static lz_tensor *mobilenet_forward(lz_model *m, lz_tensor *x, int training)
{
    const mobilenet *net = m->impl;
    lz_scope_begin();
    lz_tensor *h = x;
    for (int i = 0; i < MB_BLOCKS && h; i++) {
        const mb_block *b = &net->block[i];
        lz_tensor *y = h;
        for (int u = 0; u < b->n_units && y; u++)
            y = lz_conv_bn_act(&b->unit[u].conv, &b->unit[u].bn, y, training, b->unit[u].act);
        h = b->residual ? lz_add(h, y) : y;
    }
    /* adaptive_avg_pool2d(x, (1, 1)) + flatten(x, 1), as the definition does */
    h = lz_flatten(lz_adaptive_avg_pool2d(h, 1, 1), 1);
    if (training && m->dropout) h = lz_dropout(h, net->dropout_p, 1);
    lz_tensor *out = lz_linear_forward(&net->fc, h);
    lz_keep(out);
    lz_scope_end();
    return out;
}

int lz_zoo_build_mobilenet(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    (void)name;
    /* t (expansion), c (channels), n (repeats), s (first stride) */
    static const int setting[7][4] = {
        {1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
        {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
    };
    lz_zoo_image_spec(&m->spec, "mobilenet_v2", bench_size, bench_size ? 1000 : 10);
    mobilenet *net = calloc(1, sizeof *net);
    if (!net) {
        free(net);
        return -1;
    }
    net->dropout_p = 0.2f;
    m->impl = net;
    m->free_impl = free;
    m->forward = mobilenet_forward;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    c.conv_init = LZ_INIT_KAIMING_FAN_OUT;     /* kaiming_normal_(mode="fan_out") */
    c.linear_init = LZ_INIT_NORMAL_001;        /* normal_(0, 0.01), bias 0 */

    int idx = 0;
    mb_block *b = &net->block[idx];
    make_unit(&c, &b->unit[0], 3, 32, 3, 2, 1, LZ_ACT_RELU6, "features.0.0", "features.0.1");
    b->n_units = 1;
    idx++;
    int64_t in = 32;
    for (int g = 0; g < 7; g++) {
        for (int i = 0; i < setting[g][2]; i++) {
            make_inverted_residual(&c, &net->block[idx], idx, in, setting[g][1],
                                   i == 0 ? setting[g][3] : 1, setting[g][0]);
            in = setting[g][1];
            idx++;
        }
    }
    char cn[32], bn[32];
    snprintf(cn, sizeof cn, "features.%d.0", idx);
    snprintf(bn, sizeof bn, "features.%d.1", idx);
    b = &net->block[idx];
    make_unit(&c, &b->unit[0], in, 1280, 1, 1, 1, LZ_ACT_RELU6, cn, bn);
    b->n_units = 1;
    lz_linear_make(&c, &net->fc, 1280, m->spec.num_classes, 1, "classifier.1");
    return c.failed ? -1 : 0;
}
