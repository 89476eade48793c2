/* The registry: model names in the reference table's order, each with the
 * builder of its architecture; lz_model_new builds one by name. */
#include "zoo_internal.h"

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
