/* ResNet-18, ResNet-50 and ResNeXt-50 32x4d as torchvision 0.14 defines
 * them (torchvision/models/resnet.py): the same modules, names, strides
 * (on the 3x3 conv of a bottleneck) and initialisation.
 *
 * resnet18_fmnist (`lazyc train --model resnet18`) is ResNet-18 for 1x28x28
 * Fashion-MNIST images and 10 classes, adapted as CIFAR ResNets are: the
 * ImageNet stem (7x7 stride-2 conv, then a stride-2 max-pool) would shrink
 * 28x28 to 7x7 before the first stage and 1x1 by the last, so the stem is a
 * 3x3 stride-1 conv from 1 channel to 64 and there is no max-pool; the four
 * stages then run at 28, 14, 7 and 4 pixels. The state_dict is torchvision's
 * resnet18(num_classes=10) with conv1 = Conv2d(1, 64, 3, 1, 1, bias=False)
 * and maxpool = Identity (which has no parameters), so the names match 1:1. */
#include "layers.h"
#include "zoo_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct block {
    lz_conv_layer conv1, conv2, conv3;     /* conv3 only in bottlenecks */
    lz_bn_layer   bn1, bn2, bn3;
    int has_down;
    lz_conv_layer down_conv;               /* downsample.0 */
    lz_bn_layer   down_bn;                 /* downsample.1 */
} block;

typedef struct resnet {
    int bottleneck;
    int small_input;                       /* 3x3 stride-1 stem, no max-pool */
    lz_conv_layer conv1;
    lz_bn_layer bn1;
    block *blocks;
    int n_blocks;
    lz_linear_layer fc;
} resnet;

static void resnet_free(void *impl)
{
    resnet *r = impl;
    free(r->blocks);
    free(r);
}

static lz_tensor *block_forward(const resnet *r, const block *b, lz_tensor *x, int training)
{
    lz_tensor *out = lz_conv_bn_act(&b->conv1, &b->bn1, x, training, LZ_ACT_RELU);
    if (r->bottleneck) {
        out = lz_layer_then(out, lz_conv_bn_act(&b->conv2, &b->bn2, out, training, LZ_ACT_RELU));
        out = lz_layer_then(out, lz_conv_bn_act(&b->conv3, &b->bn3, out, training, LZ_ACT_NONE));
    } else {
        out = lz_layer_then(out, lz_conv_bn_act(&b->conv2, &b->bn2, out, training, LZ_ACT_NONE));
    }
    lz_tensor *identity = b->has_down
        ? lz_conv_bn_act(&b->down_conv, &b->down_bn, x, training, LZ_ACT_NONE) : NULL;
    out = lz_layer_then(out, lz_add(out, identity ? identity : x));
    lz_free(identity);
    return lz_layer_then(out, lz_relu(out));
}

static lz_tensor *resnet_forward(lz_model *m, lz_tensor *x, int training)
{
    const resnet *r = m->impl;
    lz_tensor *h = lz_conv_bn_act(&r->conv1, &r->bn1, x, training, LZ_ACT_RELU);
    if (!r->small_input) {
        lz_pool2d_opts mp = { .kernel = { 3, 3 }, .stride = { 2, 2 }, .padding = { 1, 1 } };
        h = lz_layer_then(h, lz_max_pool2d(h, mp));
    }
    for (int i = 0; i < r->n_blocks; i++)
        h = lz_layer_then(h, block_forward(r, &r->blocks[i], h, training));
    h = lz_layer_then(h, lz_adaptive_avg_pool2d(h, 1, 1));
    h = lz_layer_then(h, lz_flatten(h, 1));
    return lz_layer_then(h, lz_linear_forward(&r->fc, h));
}

int lz_zoo_build_resnet(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    static const int depth18[4] = { 2, 2, 2, 2 }, depth50[4] = { 3, 4, 6, 3 };
    const int *layers;
    int bottleneck, groups = 1, width_per_group = 64, small_input = 0;
    if (!strcmp(name, "resnet18")) {
        layers = depth18; bottleneck = 0;
    } else if (!strcmp(name, "resnet18_fmnist")) {
        layers = depth18; bottleneck = 0; small_input = 1;
    } else if (!strcmp(name, "resnet50")) {
        layers = depth50; bottleneck = 1;
    } else if (!strcmp(name, "resnext50_32x4d")) {
        layers = depth50; bottleneck = 1; groups = 32; width_per_group = 4;
    } else {
        lz_set_error("lz_zoo_build_resnet: unknown variant \"%s\"", name);
        return -1;
    }
    int64_t classes = bench_size && !small_input ? 1000 : 10;
    if (small_input) {
        /* batch 2 to check it (smoke), the training batch for bench */
        int64_t batch = bench_size ? 128 : 2;
        m->spec = (lz_model_spec){
            .name = name, .input_ndim = 4, .input_shape = { batch, 1, 28, 28 }, .input_dtype = LZ_F32,
            .target_ndim = 1, .target_shape = { batch }, .num_classes = classes,
        };
    } else {
        lz_zoo_image_spec(&m->spec, name, bench_size, classes);
    }

    resnet *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->bottleneck = bottleneck;
    r->small_input = small_input;
    r->n_blocks = layers[0] + layers[1] + layers[2] + layers[3];
    r->blocks = calloc((size_t)r->n_blocks, sizeof *r->blocks);
    m->impl = r;
    m->free_impl = resnet_free;
    m->forward = resnet_forward;
    if (!r->blocks) return -1;

    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, seed);
    c.conv_init = LZ_INIT_KAIMING_FAN_OUT;   /* ResNet.__init__ re-inits every conv */
    const int expansion = bottleneck ? 4 : 1;
    int64_t inplanes = 64;
    if (small_input)
        lz_conv_make(&c, &r->conv1, 1, 64, 3, 1, 1, 1, 0, "conv1");
    else
        lz_conv_make(&c, &r->conv1, 3, 64, 7, 2, 3, 1, 0, "conv1");
    lz_bn_make(&c, &r->bn1, 64, "bn1");
    int bi = 0;
    for (int l = 0; l < 4; l++) {
        int64_t planes = 64 << l;
        for (int j = 0; j < layers[l]; j++, bi++) {
            block *b = &r->blocks[bi];
            int stride = (l > 0 && j == 0) ? 2 : 1;
            int64_t out = planes * expansion;
            if (bottleneck) {
                int64_t width = planes * width_per_group / 64 * groups;
                lz_conv_make(&c, &b->conv1, inplanes, width, 1, 1, 0, 1, 0, "layer%d.%d.conv1", l + 1, j);
                lz_bn_make(&c, &b->bn1, width, "layer%d.%d.bn1", l + 1, j);
                lz_conv_make(&c, &b->conv2, width, width, 3, stride, 1, groups, 0, "layer%d.%d.conv2", l + 1, j);
                lz_bn_make(&c, &b->bn2, width, "layer%d.%d.bn2", l + 1, j);
                lz_conv_make(&c, &b->conv3, width, out, 1, 1, 0, 1, 0, "layer%d.%d.conv3", l + 1, j);
                lz_bn_make(&c, &b->bn3, out, "layer%d.%d.bn3", l + 1, j);
            } else {
                lz_conv_make(&c, &b->conv1, inplanes, planes, 3, stride, 1, 1, 0, "layer%d.%d.conv1", l + 1, j);
                lz_bn_make(&c, &b->bn1, planes, "layer%d.%d.bn1", l + 1, j);
                lz_conv_make(&c, &b->conv2, planes, planes, 3, 1, 1, 1, 0, "layer%d.%d.conv2", l + 1, j);
                lz_bn_make(&c, &b->bn2, planes, "layer%d.%d.bn2", l + 1, j);
            }
            if (stride != 1 || inplanes != out) {
                b->has_down = 1;
                lz_conv_make(&c, &b->down_conv, inplanes, out, 1, stride, 0, 1, 0, "layer%d.%d.downsample.0", l + 1, j);
                lz_bn_make(&c, &b->down_bn, out, "layer%d.%d.downsample.1", l + 1, j);
            }
            inplanes = out;
        }
    }
    lz_linear_make(&c, &r->fc, 512 * expansion, classes, 1, "fc");
    return c.failed ? -1 : 0;
}
