/* Layers shared by the model files: makers that add a layer's parameters
 * (named like the PyTorch module's state_dict keys) to a model's set and
 * keep borrowed pointers to them, and forward helpers that record the
 * layer's ops. Public API only.
 *
 * A builder makes one lz_layer_ctx, calls the makers (each takes a
 * printf-style name prefix, e.g. "layer%d.%d.conv1"), then checks
 * ctx.failed once: the first failing maker keeps its error set and later
 * makers do nothing.
 *
 * Forward helpers free the intermediates they make themselves, so they
 * need no scope; they return NULL (error set) when an operand is NULL. */
#ifndef LZ_LAYERS_H
#define LZ_LAYERS_H

#include "lazyc.h"
#include "init.h"

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
void lz_layer_ctx_init(lz_layer_ctx *c, lz_params *p, uint64_t seed);

/* ---- parameter makers: 0, or -1 (error set, ctx->failed = 1) --------- */

typedef struct lz_conv_layer {
    lz_tensor *weight, *bias;    /* borrowed from the params; bias may be NULL */
    lz_conv2d_opts opts;
} lz_conv_layer;
/* nn.Conv2d(in, out, k, stride, pad, groups=groups, bias=bias): weight
   [out, in/groups, k, k] under "<name>.weight", bias [out] "<name>.bias". */
int lz_conv_make(lz_layer_ctx *c, lz_conv_layer *l, int64_t in, int64_t out,
                 int k, int stride, int pad, int groups, int bias,
                 const char *name_fmt, ...) __attribute__((format(printf, 10, 11)));

typedef struct lz_bn_layer {
    lz_tensor *weight, *bias, *running_mean, *running_var;   /* borrowed */
    float eps, momentum;         /* 1e-5 and 0.1 unless the caller changes them */
} lz_bn_layer;
/* nn.BatchNorm2d(ch): weight 1, bias 0 (trainable), running_mean 0,
   running_var 1 and num_batches_tracked (i64 0-d, 0) as buffers. */
int lz_bn_make(lz_layer_ctx *c, lz_bn_layer *l, int64_t ch,
               const char *name_fmt, ...) __attribute__((format(printf, 4, 5)));

typedef struct lz_linear_layer {
    lz_tensor *weight, *bias;    /* weight [out, in]; bias [out] or NULL */
} lz_linear_layer;
int lz_linear_make(lz_layer_ctx *c, lz_linear_layer *l, int64_t in, int64_t out, int bias,
                   const char *name_fmt, ...) __attribute__((format(printf, 6, 7)));

typedef struct lz_ln_layer {
    lz_tensor *weight, *bias;    /* [dim] each: 1 and 0 */
    float eps;                   /* 1e-5 unless the caller changes it (ViT: 1e-6) */
} lz_ln_layer;
/* nn.LayerNorm(dim). */
int lz_ln_make(lz_layer_ctx *c, lz_ln_layer *l, int64_t dim,
               const char *name_fmt, ...) __attribute__((format(printf, 4, 5)));

/* nn.Embedding(num, dim): weight [num, dim] ~ normal(0, 1). */
int lz_embedding_make(lz_layer_ctx *c, lz_tensor **weight, int64_t num, int64_t dim,
                      const char *name_fmt, ...) __attribute__((format(printf, 5, 6)));

/* Any other tensor: a trainable parameter drawn like init (DEFAULT is read
   as uniform(+-1/sqrt(shape[last])), ZEROS as zeros, NORMAL_001 as
   normal(0, 0.01)), or a normal(0, std) when std > 0. */
lz_tensor *lz_param_make(lz_layer_ctx *c, int ndim, const int64_t *shape, float std,
                         const char *name_fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- forward helpers ------------------------------------------------- */

typedef enum { LZ_ACT_NONE = 0, LZ_ACT_RELU, LZ_ACT_RELU6 } lz_act;

lz_tensor *lz_conv_forward(const lz_conv_layer *l, lz_tensor *x);
lz_tensor *lz_bn_forward(const lz_bn_layer *l, lz_tensor *x, int training);
/* act(bn(conv(x))): the conv-bn(-relu) unit most CNNs repeat. */
lz_tensor *lz_conv_bn_act(const lz_conv_layer *conv, const lz_bn_layer *bn, lz_tensor *x,
                          int training, lz_act act);
lz_tensor *lz_act_forward(lz_tensor *x, lz_act act);
/* x [..., in] -> x W^T + b [..., out]. */
lz_tensor *lz_linear_forward(const lz_linear_layer *l, lz_tensor *x);
lz_tensor *lz_ln_forward(const lz_ln_layer *l, lz_tensor *x);

/* Frees a and returns b: for chains that replace an intermediate
   (x = lz_layer_then(x, lz_relu(x)) drops the old x after using it). */
static inline lz_tensor *lz_layer_then(lz_tensor *old, lz_tensor *next)
{
    lz_free(old);
    return next;
}

#endif
