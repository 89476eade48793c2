/* AlexNet as torchvision 0.14 defines it: features.N numbered like its
 * nn.Sequential, adaptive average pool to 6x6, and a classifier with
 * dropout before each of the first two linear layers. torchvision keeps
 * the modules' default initialisation. */
#include "layers.h"
#include "zoo_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct alexnet {
    lz_conv_layer conv[5];       /* features.0, 3, 6, 8, 10 */
    lz_linear_layer fc[3];       /* classifier.1, 4, 6 */
} alexnet;

/* after which convs a 3x3/2 max pool follows */
static const int pool_after[5] = { 1, 1, 0, 0, 1 };

static lz_tensor *alexnet_forward(lz_model *m, lz_tensor *x, int training)
{
    const alexnet *a = m->impl;
    lz_pool2d_opts pool = { .kernel = { 3, 3 }, .stride = { 2, 2 } };
    lz_tensor *h = lz_conv_forward(&a->conv[0], x);
    for (int i = 0; i < 5; i++) {
        if (i > 0) h = lz_layer_then(h, lz_conv_forward(&a->conv[i], h));
        h = lz_layer_then(h, lz_relu(h));
        if (pool_after[i]) h = lz_layer_then(h, lz_max_pool2d(h, pool));
    }
    h = lz_layer_then(h, lz_adaptive_avg_pool2d(h, 6, 6));
    h = lz_layer_then(h, lz_flatten(h, 1));
    const int drop = training && m->dropout;
    for (int j = 0; j < 3; j++) {
        if (j < 2) h = lz_layer_then(h, lz_dropout(h, 0.5f, drop));
        h = lz_layer_then(h, lz_linear_forward(&a->fc[j], h));
        if (j < 2) h = lz_layer_then(h, lz_relu(h));
    }
    return h;
}

static void alexnet_free(void *impl) { free(impl); }

int lz_zoo_build_alexnet(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    if (strcmp(name, "alexnet") != 0) {
        lz_set_error("lz_zoo_build_alexnet: unknown variant \"%s\"", name);
        return -1;
    }
    int64_t classes = bench_size ? 1000 : 10;
    lz_zoo_image_spec(&m->spec, name, bench_size, classes);
    alexnet *a = calloc(1, sizeof *a);
    if (!a) return -1;
    m->impl = a;
    m->free_impl = alexnet_free;
    m->forward = alexnet_forward;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    static const struct { int in, out, k, stride, pad, slot; } cv[5] = {
        { 3, 64, 11, 4, 2, 0 }, { 64, 192, 5, 1, 2, 3 }, { 192, 384, 3, 1, 1, 6 },
        { 384, 256, 3, 1, 1, 8 }, { 256, 256, 3, 1, 1, 10 },
    };
    for (int i = 0; i < 5; i++)
        lz_conv_make(&c, &a->conv[i], cv[i].in, cv[i].out, cv[i].k, cv[i].stride, cv[i].pad, 1, 1,
                     "features.%d", cv[i].slot);
    lz_linear_make(&c, &a->fc[0], 256 * 6 * 6, 4096, 1, "classifier.1");
    lz_linear_make(&c, &a->fc[1], 4096, 4096, 1, "classifier.4");
    lz_linear_make(&c, &a->fc[2], 4096, classes, 1, "classifier.6");
    return c.failed ? -1 : 0;
}
