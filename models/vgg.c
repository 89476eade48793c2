/* VGG-16 (configuration "D", no batch norm) as torchvision 0.14 defines it:
 * features.N numbered like the nn.Sequential (a conv and its ReLU take two
 * slots, a max pool one), adaptive average pool to 7x7, and a classifier
 * of three linear layers with ReLU and dropout between them. */
#include "layers.h"
#include "zoo_internal.h"

#include <stdlib.h>
#include <string.h>

#define VGG_POOL 0   /* 'M' in torchvision's cfgs */
static const int vgg16_cfg[] = { 64, 64, VGG_POOL, 128, 128, VGG_POOL, 256, 256, 256, VGG_POOL,
                                 512, 512, 512, VGG_POOL, 512, 512, 512, VGG_POOL };
#define VGG16_N ((int)(sizeof vgg16_cfg / sizeof vgg16_cfg[0]))

typedef struct vgg {
    lz_conv_layer convs[VGG16_N];     /* only the conv entries of cfg are set */
    lz_linear_layer fc[3];            /* classifier.0, .3, .6 */
} vgg;

static lz_tensor *vgg_forward(lz_model *m, lz_tensor *x, int training)
{
    const vgg *v = m->impl;
    lz_pool2d_opts pool = { .kernel = { 2, 2 }, .stride = { 2, 2 } };
    lz_tensor *h = NULL;
    for (int i = 0; i < VGG16_N; i++) {
        lz_tensor *in = h ? h : x;
        lz_tensor *next;
        if (vgg16_cfg[i] == VGG_POOL) {
            next = lz_max_pool2d(in, pool);
        } else {
            next = lz_conv_forward(&v->convs[i], in);
            if (next) next = lz_layer_then(next, lz_relu(next));
        }
        lz_free(h);
        h = next;
    }
    h = lz_layer_then(h, lz_adaptive_avg_pool2d(h, 7, 7));
    h = lz_layer_then(h, lz_flatten(h, 1));
    const int drop = training && m->dropout;
    for (int j = 0; j < 3; j++) {
        h = lz_layer_then(h, lz_linear_forward(&v->fc[j], h));
        if (j == 2) break;
        h = lz_layer_then(h, lz_relu(h));
        h = lz_layer_then(h, lz_dropout(h, 0.5f, drop));
    }
    return h;
}

static void vgg_free(void *impl) { free(impl); }

int lz_zoo_build_vgg(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    if (strcmp(name, "vgg16") != 0) {
        lz_set_error("lz_zoo_build_vgg: unknown variant \"%s\"", name);
        return -1;
    }
    int64_t classes = bench_size ? 1000 : 10;
    lz_zoo_image_spec(&m->spec, name, bench_size, classes);
    vgg *v = calloc(1, sizeof *v);
    if (!v) return -1;
    m->impl = v;
    m->free_impl = vgg_free;
    m->forward = vgg_forward;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    /* VGG.__init__: kaiming_normal_(fan_out) convs, normal(0, 0.01) linears, zero biases */
    c.conv_init = LZ_INIT_KAIMING_FAN_OUT;
    c.linear_init = LZ_INIT_NORMAL_001;
    int64_t in = 3;
    int slot = 0;
    for (int i = 0; i < VGG16_N; i++) {
        if (vgg16_cfg[i] == VGG_POOL) { slot += 1; continue; }
        lz_conv_make(&c, &v->convs[i], in, vgg16_cfg[i], 3, 1, 1, 1, 1, "features.%d", slot);
        in = vgg16_cfg[i];
        slot += 2;
    }
    lz_linear_make(&c, &v->fc[0], 512 * 7 * 7, 4096, 1, "classifier.0");
    lz_linear_make(&c, &v->fc[1], 4096, 4096, 1, "classifier.3");
    lz_linear_make(&c, &v->fc[2], 4096, classes, 1, "classifier.6");
    return c.failed ? -1 : 0;
}
