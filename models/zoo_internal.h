/* What every model file shares: the model struct and the builders the
 * registry (registry.c) dispatches to. Public API only. */
#ifndef LZ_ZOO_INTERNAL_H
#define LZ_ZOO_INTERNAL_H

#include "lazyc_nn.h"

struct lz_model {
    lz_model_spec spec;
    lz_params *params;       /* parameters and buffers, state_dict names */
    int dropout;             /* 1 unless lz_model_set_dropout(m, 0) */
    void *impl;              /* the architecture's own settings */
    lz_tensor *(*forward)(lz_model *m, lz_tensor *x, int training);
    void (*free_impl)(void *impl);
};

/* A builder fills spec, params, forward (and impl/free_impl) for one
   architecture at a size (bench_size 0 "smoke", 1 "bench", 2 "gpu": a
   builder that tests it as a flag gives gpu its bench configuration); 0,
   or -1 with the error set.
   name selects the variant where one builder serves several models. */
typedef int (*lz_model_builder)(lz_model *m, const char *name, int bench_size, uint64_t seed);

int lz_zoo_build_resnet(lz_model *m, const char *name, int bench_size, uint64_t seed);     /* resnet18/50, resnext50_32x4d, resnet18_fmnist */
int lz_zoo_build_alexnet(lz_model *m, const char *name, int bench_size, uint64_t seed);
int lz_zoo_build_vgg(lz_model *m, const char *name, int bench_size, uint64_t seed);        /* vgg16 */
int lz_zoo_build_mobilenet(lz_model *m, const char *name, int bench_size, uint64_t seed);  /* mobilenet_v2 */
int lz_zoo_build_mnasnet(lz_model *m, const char *name, int bench_size, uint64_t seed);    /* mnasnet1_0 */
int lz_zoo_build_squeezenet(lz_model *m, const char *name, int bench_size, uint64_t seed); /* squeezenet1_1 */
int lz_zoo_build_vit(lz_model *m, const char *name, int bench_size, uint64_t seed);        /* timm_vision_transformer */
int lz_zoo_build_bert(lz_model *m, const char *name, int bench_size, uint64_t seed);       /* BERT_pytorch */
/* Training models beyond the reference ten (lz_model_new knows them;
   lz_model_names does not list them). */
int lz_zoo_build_cnn(lz_model *m, const char *name, int bench_size, uint64_t seed);        /* cnn: 1x28x28 */
/* resnet18_fmnist: lz_zoo_build_resnet's 1x28x28 ResNet-18 */

/* Image models share their input conventions: batch 8 at 128x128 for the
   bench size, batch 2 at 64x64 for smoke (alexnet needs at least 63). */
void lz_zoo_image_spec(lz_model_spec *s, const char *name, int bench_size, int64_t classes);

#endif
