/* The registry: model names in the reference table's order, each with the
 * builder of its architecture, and what every model shares (the loss,
 * dropout switch, image input conventions). */
#include "zoo_internal.h"
#include "layers.h"

#include <stdlib.h>
#include <string.h>

static const struct zoo_entry {
    const char *name;
    lz_model_builder build;
} zoo[] = {
    { "resnet50",                lz_zoo_build_resnet },
    { "resnet18",                lz_zoo_build_resnet },
    { "BERT_pytorch",            lz_zoo_build_bert },
    { "resnext50_32x4d",         lz_zoo_build_resnet },
    { "alexnet",                 lz_zoo_build_alexnet },
    { "mobilenet_v2",            lz_zoo_build_mobilenet },
    { "mnasnet1_0",              lz_zoo_build_mnasnet },
    { "vgg16",                   lz_zoo_build_vgg },
    { "timm_vision_transformer", lz_zoo_build_vit },
    { "squeezenet1_1",           lz_zoo_build_squeezenet },
};
#define ZOO_N ((int)(sizeof zoo / sizeof zoo[0]))

/* Models for `lazyc train`: made by lz_model_new, not in the reference list. */
static const struct zoo_entry extra[] = {
    { "cnn", lz_zoo_build_cnn },
    { "resnet18_fmnist", lz_zoo_build_resnet },   /* 1x28x28 ResNet-18 (resnet.c) */
};

const char *const *lz_model_names(void)
{
    static const char *names[ZOO_N + 1];
    if (!names[0])
        for (int i = 0; i < ZOO_N; i++) names[i] = zoo[i].name;
    return names;
}

void lz_zoo_image_spec(lz_model_spec *s, const char *name, int bench_size, int64_t classes)
{
    /* gpu (2): a batch that fills one GPU, at ImageNet's 224 px */
    int64_t batch = bench_size == 2 ? 64 : bench_size ? 8 : 2;
    int64_t side = bench_size == 2 ? 224 : bench_size ? 128 : 64;
    *s = (lz_model_spec){
        .name = name,
        .input_ndim = 4, .input_shape = { batch, 3, side, side }, .input_dtype = LZ_F32,
        .target_ndim = 1, .target_shape = { batch },
        .num_classes = classes,
    };
}

lz_model *lz_model_new(const char *name, const char *size, uint64_t seed)
{
    lz_clear_error();
    const struct zoo_entry *e = NULL;
    for (int i = 0; name && i < ZOO_N; i++)
        if (!strcmp(zoo[i].name, name)) e = &zoo[i];
    for (size_t i = 0; name && i < sizeof extra / sizeof extra[0]; i++)
        if (!strcmp(extra[i].name, name)) e = &extra[i];
    int bench;
    if (size && !strcmp(size, "gpu")) bench = 2;
    else if (size && !strcmp(size, "bench")) bench = 1;
    else if (size && !strcmp(size, "smoke")) bench = 0;
    else bench = -1;
    if (!e || bench < 0) {
        lz_set_error(!e ? "lz_model_new: unknown model \"%s\" (see lz_model_names)"
                            : "lz_model_new: unknown size \"%s\" (smoke, bench or gpu)",
                         !e ? (name ? name : "(null)") : (size ? size : "(null)"));
        return NULL;
    }
    lz_model *m = calloc(1, sizeof *m);
    lz_params *own = lz_params_new();
    if (!m || !own) {
        free(m);
        lz_params_free(own);
        lz_set_error("lz_model_new: out of memory building %s", name);
        return NULL;
    }
    m->params = own;
    m->dropout = 1;
    if (e->build(m, e->name, bench, seed) != 0) {
        if (!lz_last_error()) lz_set_error("lz_model_new: building %s failed", name);
        lz_model_free(m);
        return NULL;
    }
    m->spec.name = e->name;
    return m;
}

void lz_model_free(lz_model *m)
{
    if (!m) return;
    if (m->free_impl && m->impl) m->free_impl(m->impl);
    lz_params_free(m->params);
    free(m);
}

const lz_model_spec *lz_model_get_spec(const lz_model *m)
{
    return m ? &m->spec : NULL;
}

lz_params *lz_model_params(lz_model *m)
{
    return m ? m->params : NULL;
}

lz_tensor *lz_model_forward(lz_model *m, lz_tensor *x, int training)
{
    if (!m || !m->forward) {
        lz_set_error("lz_model_forward: %s", m ? "model has no forward" : "model is NULL");
        return NULL;
    }
    if (!x) {
        if (!lz_last_error()) lz_set_error("lz_model_forward(%s): input is NULL", m->spec.name);
        return NULL;
    }
    return m->forward(m, x, training);
}

lz_tensor *lz_model_loss(lz_model *m, lz_tensor *x, lz_tensor *y, int training)
{
    lz_tensor *logits = lz_model_forward(m, x, training);
    if (!logits) return NULL;
    if (!y) {
        lz_free(logits);
        if (!lz_last_error()) lz_set_error("lz_model_loss(%s): target is NULL", m->spec.name);
        return NULL;
    }
    if (lz_ndim(logits) == 2) {
        lz_tensor *loss = lz_cross_entropy(logits, y);
        lz_free(logits);
        return loss;
    }
    /* token models: every position is one sample, [B, S, V] -> [B*S, V] */
    int64_t v = lz_dim(logits, -1);
    int64_t lshape[2] = { -1, v }, yshape[1] = { -1 };
    lz_tensor *flat = lz_reshape(logits, 2, lshape);
    lz_tensor *yflat = lz_reshape(y, 1, yshape);
    lz_tensor *loss = lz_cross_entropy(flat, yflat);
    lz_free(flat);
    lz_free(yflat);
    lz_free(logits);
    return loss;
}

void lz_model_set_dropout(lz_model *m, int enabled)
{
    if (m) m->dropout = enabled != 0;
}
