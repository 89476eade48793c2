/* squeezenet1_1 as torchvision 0.14 defines it: a 3x3 stride-2 conv, eight
 * Fire modules (1x1 squeeze, then 1x1 and 3x3 expands concatenated on the
 * channel axis) between three ceil-mode 3x3 max pools, and a classifier
 * of dropout(0.5), a 1x1 conv to the classes, ReLU and global average
 * pooling. Public API only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "zoo_internal.h"

enum { SQ_FIRES = 8 };

typedef struct sq_fire {
    lz_conv_layer squeeze, expand1x1, expand3x3;
    int pool_before;         /* a max pool precedes this module */
} sq_fire;

typedef struct squeezenet {
    lz_conv_layer stem, final_conv;
    sq_fire fire[SQ_FIRES];
    float dropout_p;
} squeezenet;

/* nn.Conv2d with torchvision's squeezenet init: kaiming_uniform_ (gain
   sqrt(2), fan_in): bound sqrt(6 / fan_in); bias 0. */
static void make_conv(lz_layer_ctx *c, lz_conv_layer *l, int64_t in, int64_t out, int k,
                      int stride, int pad, const char *prefix)
{
    *l = (lz_conv_layer){0};
    if (c->failed) return;
    char name[96];
    int64_t wshape[4] = {out, in, k, k}, bshape[1] = {out};
    snprintf(name, sizeof name, "%s.weight", prefix);
    l->weight = lz_init_uniform(c->params, &c->rng, name, 4, wshape,
                                (float)sqrt(6.0 / (double)(in * k * k)));
    snprintf(name, sizeof name, "%s.bias", prefix);
    l->bias = l->weight ? lz_init_const(c->params, name, LZ_F32, 1, bshape, 0.0, 1) : NULL;
    if (!l->bias) c->failed = 1;
    l->opts = (lz_conv2d_opts){.stride = {stride, stride}, .padding = {pad, pad},
                               .dilation = {1, 1}, .groups = 1};
}

static lz_tensor *max_pool(lz_tensor *x)
{
    return lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = 1});
}

static lz_tensor *conv_relu(const lz_conv_layer *l, lz_tensor *x)
{
    return lz_relu(lz_conv_forward(l, x));
}

static lz_tensor *squeezenet_forward(lz_model *m, lz_tensor *x, int training)
{
    const squeezenet *net = m->impl;
    lz_scope_begin();
    lz_tensor *h = conv_relu(&net->stem, x);
    for (int i = 0; i < SQ_FIRES && h; i++) {
        const sq_fire *f = &net->fire[i];
        if (f->pool_before) h = max_pool(h);
        lz_tensor *s = conv_relu(&f->squeeze, h);
        lz_tensor *e[2] = {conv_relu(&f->expand1x1, s), conv_relu(&f->expand3x3, s)};
        h = lz_cat(e, 2, 1);
    }
    if (training && m->dropout) h = lz_dropout(h, net->dropout_p, 1);
    h = lz_adaptive_avg_pool2d(conv_relu(&net->final_conv, h), 1, 1);
    lz_tensor *out = lz_flatten(h, 1);
    lz_keep(out);
    lz_scope_end();
    return out;
}

int lz_zoo_build_squeezenet(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    (void)name;
    /* Fire(inplanes, squeeze, expand1x1, expand3x3) at features.<index> */
    static const struct { int index; int64_t in, sq, e1, e3; int pool_before; } fires[SQ_FIRES] = {
        {3, 64, 16, 64, 64, 1},     {4, 128, 16, 64, 64, 0},
        {6, 128, 32, 128, 128, 1},  {7, 256, 32, 128, 128, 0},
        {9, 256, 48, 192, 192, 1},  {10, 384, 48, 192, 192, 0},
        {11, 384, 64, 256, 256, 0}, {12, 512, 64, 256, 256, 0},
    };
    lz_zoo_image_spec(&m->spec, "squeezenet1_1", bench_size, bench_size ? 1000 : 10);
    squeezenet *net = calloc(1, sizeof *net);
    if (!net) {
        free(net);
        return -1;
    }
    net->dropout_p = 0.5f;
    m->impl = net;
    m->free_impl = free;
    m->forward = squeezenet_forward;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    make_conv(&c, &net->stem, 3, 64, 3, 2, 0, "features.0");
    for (int i = 0; i < SQ_FIRES; i++) {
        char prefix[64];
        sq_fire *f = &net->fire[i];
        f->pool_before = fires[i].pool_before;
        snprintf(prefix, sizeof prefix, "features.%d.squeeze", fires[i].index);
        make_conv(&c, &f->squeeze, fires[i].in, fires[i].sq, 1, 1, 0, prefix);
        snprintf(prefix, sizeof prefix, "features.%d.expand1x1", fires[i].index);
        make_conv(&c, &f->expand1x1, fires[i].sq, fires[i].e1, 1, 1, 0, prefix);
        snprintf(prefix, sizeof prefix, "features.%d.expand3x3", fires[i].index);
        make_conv(&c, &f->expand3x3, fires[i].sq, fires[i].e3, 3, 1, 1, prefix);
    }
    /* the final conv is drawn apart: normal(0, 0.01), bias 0 */
    c.conv_init = LZ_INIT_NORMAL_001;
    lz_conv_make(&c, &net->final_conv, 512, m->spec.num_classes, 1, 1, 0, 1, 1, "classifier.1");
    return c.failed ? -1 : 0;
}
