/* cnn: the small convolutional net `lazyc train` trains on Fashion-MNIST:
 * conv32-BN-ReLU-maxpool, conv64-BN-ReLU-maxpool, linear to 10 classes,
 * on 1x28x28 images (batch 128). Not one of the ten reference models. */
#include <stdlib.h>

#include "layers.h"
#include "zoo_internal.h"

typedef struct cnn {
    lz_conv_layer conv1, conv2;
    lz_bn_layer bn1, bn2;
    lz_linear_layer fc;
} cnn;

static lz_tensor *block(const lz_conv_layer *c, const lz_bn_layer *bn, lz_tensor *x, int training)
{
    lz_tensor *y = lz_conv_bn_act(c, bn, x, training, LZ_ACT_RELU);
    lz_pool2d_opts pool = {.kernel = {2, 2}};
    return lz_layer_then(y, lz_max_pool2d(y, pool));
}

static lz_tensor *cnn_forward(lz_model *m, lz_tensor *x, int training)
{
    const cnn *n = m->impl;
    lz_tensor *h = block(&n->conv1, &n->bn1, x, training);
    h = lz_layer_then(h, block(&n->conv2, &n->bn2, h, training));
    h = lz_layer_then(h, lz_flatten(h, 1));
    return lz_layer_then(h, lz_linear_forward(&n->fc, h));
}

int lz_zoo_build_cnn(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    (void)bench_size;   /* one size: the data set fixes it */
    cnn *n = calloc(1, sizeof *n);
    if (!n) return -1;
    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    lz_conv_make(&c, &n->conv1, 1, 32, 3, 1, 1, 1, 0, "conv1");
    lz_bn_make(&c, &n->bn1, 32, "bn1");
    lz_conv_make(&c, &n->conv2, 32, 64, 3, 1, 1, 1, 0, "conv2");
    lz_bn_make(&c, &n->bn2, 64, "bn2");
    lz_linear_make(&c, &n->fc, 64 * 7 * 7, 10, 1, "fc");
    m->impl = n;
    m->free_impl = free;
    m->forward = cnn_forward;
    m->spec = (lz_model_spec){
        .name = name, .input_ndim = 4, .input_shape = {128, 1, 28, 28}, .input_dtype = LZ_F32,
        .target_ndim = 1, .target_shape = {128}, .num_classes = 10,
    };
    return c.failed ? -1 : 0;
}
