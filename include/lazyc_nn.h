/* lazyc_nn: models and layers built on lazyc.h's ops.
 *
 * Three parts, all built on lazyc.h alone (their sources are models/):
 *  - initialisers: parameters drawn like PyTorch's default initialisers
 *    from a seeded host generator (the values differ from torch's, the
 *    distributions match);
 *  - layers: makers that add a layer's parameters to an lz_params set under
 *    PyTorch's state_dict names, and forward helpers that record its ops;
 *  - the model zoo: the ten reference models and small training models,
 *    by name, ready to train or to load a PyTorch checkpoint into.
 * Random tensors drawn in the graph (lz_rand, lz_randn) are in lazyc.h. */
#ifndef LAZYC_NN_H
#define LAZYC_NN_H

#include "lazyc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- initialisers ------------------------------------------------------ */

typedef struct lz_init_rng { uint64_t s; } lz_init_rng;

/* uniform(-bound, bound), added to p under name as a trainable parameter;
   returns the tensor (borrowed from p), NULL + error on failure. */
LZ_API lz_tensor *lz_init_uniform(lz_params *p, lz_init_rng *r, const char *name,
                                  int ndim, const int64_t *shape, float bound);
/* normal(0, std) (Box-Muller), trainable. */
LZ_API lz_tensor *lz_init_normal(lz_params *p, lz_init_rng *r, const char *name,
                                 int ndim, const int64_t *shape, float std);
/* A constant tensor (ones for norm weights, zeros for biases and running
   means, ones for running vars): trainable or a buffer. */
LZ_API lz_tensor *lz_init_const(lz_params *p, const char *name, lz_dtype dtype,
                                int ndim, const int64_t *shape, double value, int trainable);
/* kaiming_uniform(a=sqrt(5)) as nn.Linear/nn.Conv2d use: bound 1/sqrt(fan_in). */
LZ_API float lz_init_default_bound(int64_t fan_in);   /* 0 when fan_in <= 0 */

/* ---- layers ------------------------------------------------------------ */

/* A builder makes one lz_layer_ctx, calls the makers (each takes a
   printf-style name prefix, e.g. "layer%d.%d.conv1"), then checks
   ctx.failed once: the first failing maker keeps its error set and later
   makers do nothing. Forward helpers free the intermediates they make
   themselves, so they need no scope; they return NULL (error set) when an
   operand is NULL. */

/* How a maker draws weights (biases follow the module's own rule). */
typedef enum {
    LZ_INIT_TORCH_DEFAULT = 0,   /* nn.Conv2d/nn.Linear reset_parameters:
                                    kaiming_uniform(a=sqrt(5)), bias U(+-1/sqrt(fan_in)) */
    LZ_INIT_KAIMING_FAN_OUT,     /* kaiming_normal_(mode="fan_out", relu), bias 0
                                    (torchvision resnet/vgg/mobilenet convs) */
    LZ_INIT_NORMAL_001,          /* normal(0, 0.01), bias 0 (vgg/mobilenet classifiers) */
    LZ_INIT_ZEROS                /* weight 0, bias 0 (ViT head) */
} lz_layer_init;

typedef struct lz_layer_ctx {
    lz_params    *params;
    lz_init_rng   rng;
    lz_layer_init conv_init;     /* for lz_conv_make */
    lz_layer_init linear_init;   /* for lz_linear_make */
    int           failed;        /* set by the first maker that fails */
} lz_layer_ctx;

/* Torch-default init for both kinds; seed 0 is replaced by a fixed value. */
LZ_API void lz_layer_ctx_init(lz_layer_ctx *c, lz_params *p, uint64_t seed);

/* ---- parameter makers: 0, or -1 (error set, ctx->failed = 1) --------- */

typedef struct lz_conv_layer {
    lz_tensor *weight, *bias;    /* borrowed from the params; bias may be NULL */
    lz_conv2d_opts opts;
} lz_conv_layer;
/* nn.Conv2d(in, out, k, stride, pad, groups=groups, bias=bias): weight
   [out, in/groups, k, k] under "<name>.weight", bias [out] "<name>.bias". */
LZ_API int lz_conv_make(lz_layer_ctx *c, lz_conv_layer *l, int64_t in, int64_t out,
                        int k, int stride, int pad, int groups, int bias,
                        const char *name_fmt, ...) LZ_PRINTF_FORMAT(10, 11);

typedef struct lz_bn_layer {
    lz_tensor *weight, *bias, *running_mean, *running_var;   /* borrowed */
    float eps, momentum;         /* 1e-5 and 0.1 unless the caller changes them */
} lz_bn_layer;
/* nn.BatchNorm2d(ch): weight 1, bias 0 (trainable), running_mean 0,
   running_var 1 and num_batches_tracked (i64 0-d, 0) as buffers. */
LZ_API int lz_bn_make(lz_layer_ctx *c, lz_bn_layer *l, int64_t ch,
                      const char *name_fmt, ...) LZ_PRINTF_FORMAT(4, 5);

typedef struct lz_linear_layer {
    lz_tensor *weight, *bias;    /* weight [out, in]; bias [out] or NULL */
} lz_linear_layer;
/* nn.Linear(in, out, bias=bias): "<name>.weight" [out, in], "<name>.bias" [out]. */
LZ_API int lz_linear_make(lz_layer_ctx *c, lz_linear_layer *l, int64_t in, int64_t out, int bias,
                          const char *name_fmt, ...) LZ_PRINTF_FORMAT(6, 7);

typedef struct lz_ln_layer {
    lz_tensor *weight, *bias;    /* [dim] each: 1 and 0 */
    float eps;                   /* 1e-5 unless the caller changes it (ViT: 1e-6) */
} lz_ln_layer;
/* nn.LayerNorm(dim). */
LZ_API int lz_ln_make(lz_layer_ctx *c, lz_ln_layer *l, int64_t dim,
                      const char *name_fmt, ...) LZ_PRINTF_FORMAT(4, 5);

/* nn.Embedding(num, dim): weight [num, dim] ~ normal(0, 1). */
LZ_API int lz_embedding_make(lz_layer_ctx *c, lz_tensor **weight, int64_t num, int64_t dim,
                             const char *name_fmt, ...) LZ_PRINTF_FORMAT(5, 6);

/* Any other tensor: a trainable parameter drawn like init (DEFAULT is read
   as uniform(+-1/sqrt(shape[last])), ZEROS as zeros, NORMAL_001 as
   normal(0, 0.01)), or a normal(0, std) when std > 0. */
LZ_API lz_tensor *lz_param_make(lz_layer_ctx *c, int ndim, const int64_t *shape, float std,
                                const char *name_fmt, ...) LZ_PRINTF_FORMAT(5, 6);

/* ---- forward helpers ------------------------------------------------- */

typedef enum { LZ_ACT_NONE = 0, LZ_ACT_RELU, LZ_ACT_RELU6 } lz_act;

/* conv2d(x) with the layer's weight, bias and options. */
LZ_API lz_tensor *lz_conv_forward(const lz_conv_layer *l, lz_tensor *x);
/* Batch norm with the layer's statistics (updated when training). */
LZ_API lz_tensor *lz_bn_forward(const lz_bn_layer *l, lz_tensor *x, int training);
/* act(bn(conv(x))): the conv-bn(-relu) unit most CNNs repeat. */
LZ_API lz_tensor *lz_conv_bn_act(const lz_conv_layer *conv, const lz_bn_layer *bn, lz_tensor *x,
                                 int training, lz_act act);
/* act(x); LZ_ACT_NONE gives a new handle of x, so the caller frees either. */
LZ_API lz_tensor *lz_act_forward(lz_tensor *x, lz_act act);
/* x [..., in] -> x W^T + b [..., out]. */
LZ_API lz_tensor *lz_linear_forward(const lz_linear_layer *l, lz_tensor *x);
/* Layer norm over the last axis with the layer's weight, bias and eps. */
LZ_API lz_tensor *lz_ln_forward(const lz_ln_layer *l, lz_tensor *x);

/* Frees old and returns next: for chains that replace an intermediate
   (x = lz_layer_then(x, lz_relu(x)) drops the old x after using it). */
static inline lz_tensor *lz_layer_then(lz_tensor *old, lz_tensor *next)
{
    lz_free(old);
    return next;
}

/* ---- the model zoo ----------------------------------------------------- */

/* Parameter names equal the PyTorch definitions' state_dict keys, so a
   checkpoint written by PyTorch loads into lazyc and back. */

typedef struct lz_model lz_model;

/* What a model takes and predicts at a size. */
typedef struct lz_model_spec {
    const char *name;        /* as in the reference table, e.g. "resnet50" */
    int      input_ndim;
    int64_t  input_shape[4]; /* images [B, 3, H, W] f32; BERT tokens [B, S] i64 */
    lz_dtype input_dtype;
    int      target_ndim;    /* classes [B]; BERT: token labels [B, S] */
    int64_t  target_shape[2];
    int64_t  num_classes;    /* logits width (vocabulary for BERT) */
} lz_model_spec;

/* Names of the ten reference models, NULL-terminated, in the reference
   table's order (lz_model_new also builds "cnn" and "resnet18_fmnist",
   small models for 1x28x28 images). */
LZ_API const char *const *lz_model_names(void);
/* size: "smoke", "bench" or "gpu" (a batch that fills one GPU: images
   batch 64 at 224 px, BERT 16 x 128 tokens). Parameters are initialised from seed like
   PyTorch's default initialisers (values differ; distributions match).
   NULL + error for an unknown name or size. */
LZ_API lz_model  *lz_model_new(const char *name, const char *size, uint64_t seed);
LZ_API void       lz_model_free(lz_model *m);                 /* frees its parameters too */
/* Input and target shapes and dtypes at the size it was built for. */
LZ_API const lz_model_spec *lz_model_get_spec(const lz_model *m);
LZ_API lz_params *lz_model_params(lz_model *m);          /* borrowed */
/* Records the forward pass: logits [B, classes] ([B, S, vocab] for BERT).
   training selects batch-norm statistics and dropout. */
LZ_API lz_tensor *lz_model_forward(lz_model *m, lz_tensor *x, int training);
/* Cross-entropy of the forward pass against y (mean over all targets). */
LZ_API lz_tensor *lz_model_loss(lz_model *m, lz_tensor *x, lz_tensor *y, int training);
/* Dropout off for parity runs (train-mode batch norm stays). */
LZ_API void       lz_model_set_dropout(lz_model *m, int enabled);

#ifdef __cplusplus
}
#endif
#endif
