/* lazyc: a lazy-tensor training runtime.
 *
 * Every op records an IR node instead of computing. A step barrier
 * (lz_mark_step) cuts all pending IR into one graph, hashes it, finds or
 * compiles an executable and runs it asynchronously on the executor thread.
 * Reading a value on the host is the only call that waits.
 *
 * Conventions:
 *  - a function returning lz_tensor* returns a new handle the caller owns
 *    (drop it with lz_free, or let the enclosing scope drop it);
 *  - on error an op returns NULL and lz_last_error() says why; a NULL operand
 *    gives NULL, so a chain of ops can be checked once at its end;
 *  - functions returning int return 0 on success and -1 on error.
 */
#ifndef LAZYC_H
#define LAZYC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version; CMake's project version is read from these lines.
   lz_version() gives the version of the library actually loaded. */
#define LZ_VERSION_MAJOR 0
#define LZ_VERSION_MINOR 1
#define LZ_VERSION_PATCH 0
#define LZ_VERSION_STRING "0.1.0"

/* LZ_API marks the library's public functions: liblazyc.so is built with
   hidden visibility and exports exactly the functions so marked in the
   installed headers (lazyc.h, lazyc_nn.h, lazyc_optim.h). */
#if defined(_WIN32) && defined(LZ_SHARED)
#  ifdef LZ_BUILD
#    define LZ_API __declspec(dllexport)
#  else
#    define LZ_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define LZ_API __attribute__((visibility("default")))
#else
#  define LZ_API
#endif

/* printf-style argument checking where the compiler has it: fmt is the
   format's argument number, first the first checked argument's. */
#if defined(__GNUC__) || defined(__clang__)
#  define LZ_PRINTF_FORMAT(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#  define LZ_PRINTF_FORMAT(fmt, first)
#endif

#define LZ_MAX_DIMS 8

typedef struct lz_tensor lz_tensor; /* opaque handle */
typedef struct lz_fn     lz_fn;     /* a captured step function */
typedef struct lz_params lz_params; /* named tensors: a model's parameters and buffers */
/* LZ_BF16: bfloat16 storage (2 bytes, float32's exponent range). Ops
   compute in float32; bf16 tensors come from lz_cast (round to nearest
   even), from the host, from safetensors, or from an autocast region. */
typedef enum { LZ_F32, LZ_I64, LZ_I32, LZ_BF16 } lz_dtype;

/* ---- device: where tensors live (before the first tensor) ------------ */

/* Makes name the device every tensor lives on: "cpu" (built in), or NAME
   for the backend in liblazyc_NAME.so, loaded now from beside the library
   (or the program) or where the dynamic loader looks. Call it before the
   first tensor (LZ_DEVICE chooses otherwise; "cpu" by default). 0, or -1
   and an error naming why: unknown name, lazyc built without it, no
   device present, tensors already made on another device. The device
   stays for the process (lz_shutdown keeps it). */
LZ_API int         lz_device_use(const char *name);
/* The device tensors live on, or (before the first tensor) will. */
LZ_API const char *lz_device_name(void);

/* ---- tensors -------------------------------------------------------- */

/* Copies data (row-major) to a new device buffer: a data leaf. */
LZ_API lz_tensor *lz_from_host(const void *data, lz_dtype dtype, int ndim, const int64_t *shape);
LZ_API lz_tensor *lz_zeros(lz_dtype dtype, int ndim, const int64_t *shape);
/* lz_from_random's distributions (the int it takes). */
typedef enum { LZ_RANDOM_UNIFORM = 0, LZ_RANDOM_NORMAL = 1 } lz_random_dist;
/* f32 data drawn on the device (on the CPU in parallel) from a
   counter-based generator: element i depends on (seed, i) alone, never on
   the thread count or the device. dist LZ_RANDOM_UNIFORM: uniform in
   [a, b) (24 random bits; f32 rounding may give b); LZ_RANDOM_NORMAL:
   normal with mean a and standard deviation b (|x - a| <= 5.77 b). The
   initialisers of lazyc_nn.h use it; lz_rand draws in the graph instead. */
LZ_API lz_tensor *lz_from_random(uint64_t seed, int dist, float a, float b, int ndim,
                                 const int64_t *shape);
/* lz_from_random's fill with named fields. Zero fields are torch's
   defaults; LZ_OPT_ZERO gives an exact 0. A field of the other
   distribution is an error, not ignored. */
typedef struct lz_random_opts {
    uint64_t       seed;
    lz_random_dist dist;        /* 0: LZ_RANDOM_UNIFORM */
    float          low, high;   /* uniform in [low, high); high 0: 1 (torch.rand's [0, 1)),
                                   LZ_OPT_ZERO: 0; finite, low <= high */
    float          mean, std;   /* normal; std 0: 1 (torch.randn's), LZ_OPT_ZERO: 0;
                                   finite, std >= 0 */
} lz_random_opts;
/* The same values to the bit as lz_from_random with those numbers;
   errors name lz_from_random_opt. */
LZ_API lz_tensor *lz_from_random_opt(int ndim, const int64_t *shape, lz_random_opts opts);
/* A tensor filled with value, as data (never a constant in the graph). */
LZ_API lz_tensor *lz_full(lz_dtype dtype, int ndim, const int64_t *shape, double value);
/* 0-d f32 data: a new value never recompiles a lazy step. Made inside a
   captured step function, it is frozen: every replay reuses the value it
   had when traced (so is any data made there from host memory: lz_from_host,
   lz_full, lz_zeros); the trace names each in a warning. */
LZ_API lz_tensor *lz_scalar(float value);
/* A new, distinct handle to the same tensor (same value, gradient and
   requires-grad; lz_assign through either changes both), owned by the
   caller in or out of a scope: lz_free it once. Freeing t's own handle (or
   its scope ending) leaves the tensor alive for this one. NULL when out of
   memory. */
LZ_API lz_tensor *lz_retain(lz_tensor *t);
LZ_API void       lz_free(lz_tensor *t);
LZ_API int        lz_ndim(const lz_tensor *t);
LZ_API int64_t    lz_dim(const lz_tensor *t, int axis);   /* negative axis counts from the end */
LZ_API int64_t    lz_numel(const lz_tensor *t);
LZ_API lz_dtype   lz_tensor_dtype(const lz_tensor *t);
LZ_API size_t     lz_dtype_size(lz_dtype dtype);
/* 1 if the tensor has pending IR, 0 if it is data. */
LZ_API int        lz_is_pending(const lz_tensor *t);
/* Waits for the tensor's value (syncing it alone if pending) and copies it;
   nbytes must equal numel * dtype size. */
LZ_API int        lz_to_host(lz_tensor *t, void *dst, size_t nbytes);
/* Value of a 1-element tensor as float; NAN + error on failure. */
LZ_API float      lz_item(lz_tensor *t);
/* Overwrites a data tensor's buffer from the host (same shape and dtype);
   a pending tensor gets a fresh buffer. Used to feed a new batch. */
LZ_API int        lz_copy_from_host(lz_tensor *t, const void *data, size_t nbytes);

/* ---- scopes: free every handle made inside except the kept ones ------ */

LZ_API void       lz_scope_begin(void);
/* Drops every handle created since the matching lz_scope_begin that was not
   kept; kept handles move to the enclosing scope (or to the caller). */
LZ_API void       lz_scope_end(void);
/* Marks t to outlive the innermost scope; returns t. */
LZ_API lz_tensor *lz_keep(lz_tensor *t);

/* ---- element-wise ops (numpy broadcasting, f32 unless said) ---------- */

LZ_API lz_tensor *lz_add(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_sub(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_mul(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_div(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_maximum(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_neg(lz_tensor *x);
LZ_API lz_tensor *lz_exp(lz_tensor *x);
LZ_API lz_tensor *lz_log(lz_tensor *x);
LZ_API lz_tensor *lz_sqrt(lz_tensor *x);
LZ_API lz_tensor *lz_rsqrt(lz_tensor *x);
LZ_API lz_tensor *lz_pow(lz_tensor *x, float exponent);   /* exponent is part of the op */
LZ_API lz_tensor *lz_scale(lz_tensor *x, float factor);   /* x * factor; a model's constant, part of the op */
LZ_API lz_tensor *lz_tanh(lz_tensor *x);
LZ_API lz_tensor *lz_sigmoid(lz_tensor *x);
LZ_API lz_tensor *lz_relu(lz_tensor *x);
LZ_API lz_tensor *lz_gelu(lz_tensor *x);                  /* erf form, like torch's default */
/* Comparisons give an f32 tensor of 0 and 1 and carry no gradient. */
LZ_API lz_tensor *lz_gt(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_lt(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_ge(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_le(lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_eq(lz_tensor *a, lz_tensor *b);
/* cond != 0 ? a : b, broadcasting all three. */
LZ_API lz_tensor *lz_where(lz_tensor *cond, lz_tensor *a, lz_tensor *b);
LZ_API lz_tensor *lz_cast(lz_tensor *x, lz_dtype dtype);

/* ---- mixed precision ---------------------------------------------------- */

/* Opens an autocast region (PyTorch's torch.autocast("cpu", bfloat16)):
   until the matching lz_autocast_end, lz_matmul, lz_linear, lz_conv2d and
   lz_attention's products (forward and backward) cast their f32 operands
   to bf16 and accumulate and return f32 (but a product the backend runs
   faster in f32 stays f32: LZ_AUTOCAST_PRODUCTS, docs/api.md); every other op (norms, softmax,
   losses, reductions, optimizers) stays f32, as do parameters and
   gradients. A parameter is cast once per region, however often it is
   used. dtype LZ_BF16, or LZ_F32 for a nested region without autocast.
   Regions nest (16 deep). The casts are ops of the graph, so a captured
   step keeps them; a region opened around lz_call is part of the trace's
   key. 0, or -1 and an error. */
LZ_API int lz_autocast_begin(lz_dtype dtype);
/* Closes the innermost autocast region (the outermost drops its casts). */
LZ_API int lz_autocast_end(void);
/* What autocast does with products on this CPU (`lazyc env` prints it):
   the two peaks its rule compares (measured again by this call; the cache
   file keeps, of each, the best rate seen on this machine, since load only
   lowers a rate), how oneDNN runs bf16 here, and the product shapes
   measured on this machine so far. */
typedef struct lz_autocast_probe {
    double f32_gflops, bf16_gflops;   /* sgemm and bf16 matmul, 2048^3; 0: none */
    int native_bf16, amx;             /* AVX512_BF16 (as oneDNN sees it), AMX tiles */
    const char *mode;                 /* LZ_AUTOCAST_PRODUCTS: measure, rule, bf16 or f32 */
    int rule_keeps_f32;               /* the rule keeps every product float32 here */
    double rule_min_ratio;            /* ... when bf16's peak is below this times float32's */
    double bf16_max_ratio;            /* measured: bf16 where its time is at most this times float32's */
    int measured, measured_f32;       /* product shapes in the file, those kept float32 */
    char file[4096];                  /* the file ("" when none) */
} lz_autocast_probe;
LZ_API int lz_autocast_probe_cpu(lz_autocast_probe *out);

/* ---- reductions ------------------------------------------------------ */

LZ_API lz_tensor *lz_sum(lz_tensor *x);                   /* all elements -> 0-d; i32 sums to i64 (torch) */
LZ_API lz_tensor *lz_mean(lz_tensor *x);                  /* all elements -> 0-d */
/* 0-d f32: 1 when every element of x is finite, 0 when any is NaN or
   +-Inf; no gradient. An op of the graph like any other, so a step that
   also outputs lz_all_finite(loss) or of a gradient costs one pass over x
   and no second execution; lz_mul combines several checks into one. */
LZ_API lz_tensor *lz_all_finite(lz_tensor *x);
/* naxes == 0 reduces over every axis. */
LZ_API lz_tensor *lz_sum_axes(lz_tensor *x, int naxes, const int *axes, int keepdim);
LZ_API lz_tensor *lz_mean_axes(lz_tensor *x, int naxes, const int *axes, int keepdim);
LZ_API lz_tensor *lz_max_axes(lz_tensor *x, int naxes, const int *axes, int keepdim);

/* ---- shape ----------------------------------------------------------- */

/* One entry of shape may be -1 (inferred). */
LZ_API lz_tensor *lz_reshape(lz_tensor *x, int ndim, const int64_t *shape);
LZ_API lz_tensor *lz_permute(lz_tensor *x, const int *perm);
LZ_API lz_tensor *lz_transpose(lz_tensor *x, int axis0, int axis1);
LZ_API lz_tensor *lz_expand(lz_tensor *x, int ndim, const int64_t *shape);
/* Elements [start, end) of axis; negative indices count from the end. */
LZ_API lz_tensor *lz_slice(lz_tensor *x, int axis, int64_t start, int64_t end);
LZ_API lz_tensor *lz_cat(lz_tensor *const *xs, int n, int axis);

/* ---- linear algebra and losses --------------------------------------- */

/* Batched matrix product; batch dimensions broadcast; 1-d operands follow
   numpy's rules. */
LZ_API lz_tensor *lz_matmul(lz_tensor *a, lz_tensor *b);
/* x [..., in] @ weight[out, in]^T (+ bias [out], may be NULL), as torch's
   F.linear. Unlike lz_matmul(x, lz_transpose(w, 0, 1)) it never copies the
   weight or its gradient to transpose them: sgemm reads them transposed. */
LZ_API lz_tensor *lz_linear(lz_tensor *x, lz_tensor *weight, lz_tensor *bias);
LZ_API lz_tensor *lz_softmax(lz_tensor *x, int axis);
LZ_API lz_tensor *lz_log_softmax(lz_tensor *x, int axis);
/* logits [N, C] f32, target [N] i64 or i32 class indices -> 0-d mean loss. */
LZ_API lz_tensor *lz_cross_entropy(lz_tensor *logits, lz_tensor *target);

/* ---- neural-network ops (NCHW layout) --------------------------------- */

typedef struct lz_conv2d_opts {
    int stride[2], padding[2], dilation[2];   /* 0 is read as 1 for stride and dilation */
    int groups;                               /* 0 is read as 1 */
} lz_conv2d_opts;
/* x [N, C, H, W], w [O, C/groups, KH, KW], b [O] or NULL. */
LZ_API lz_tensor *lz_conv2d(lz_tensor *x, lz_tensor *w, lz_tensor *b, lz_conv2d_opts opts);
/* Transposed convolution, as torch.nn.functional.conv_transpose2d: x
   [N, C, H, W], w [C, O/groups, KH, KW], b [O] or NULL; output [N, O, HO,
   WO], HO = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding
   + 1. output_padding may be NULL (0, 0); each must be below its stride
   (torch also takes one below the dilation). The gradient of lz_conv2d's
   input, run forward. */
LZ_API lz_tensor *lz_conv_transpose2d(lz_tensor *x, lz_tensor *w, lz_tensor *b, lz_conv2d_opts opts,
                                      const int *output_padding);

typedef struct lz_pool2d_opts {
    int kernel[2], stride[2], padding[2];     /* stride 0: equal to kernel */
    int ceil_mode;
    int count_include_pad;                    /* avg pool only; torch's default is 1 */
} lz_pool2d_opts;
LZ_API lz_tensor *lz_max_pool2d(lz_tensor *x, lz_pool2d_opts opts);
LZ_API lz_tensor *lz_avg_pool2d(lz_tensor *x, lz_pool2d_opts opts);
LZ_API lz_tensor *lz_adaptive_avg_pool2d(lz_tensor *x, int out_h, int out_w);

/* Batch norm over axis 1 of x [N, C, ...]. In training it normalises with
   the batch statistics and, when running_mean/var are given, updates them
   in the same graph (lz_assign, torch's momentum and unbiased variance);
   in eval it uses the running statistics. weight/bias may be NULL. */
LZ_API lz_tensor *lz_batch_norm(lz_tensor *x, lz_tensor *weight, lz_tensor *bias,
                                lz_tensor *running_mean, lz_tensor *running_var,
                                int training, float momentum, float eps);
/* Batch norm's settings, as the other layers take theirs. Zero fields are
   nn.BatchNorm2d's defaults; LZ_OPT_ZERO gives an exact 0. */
typedef struct lz_batch_norm_opts {
    int   training;   /* 1: batch statistics, running ones updated; 0: eval */
    float momentum;   /* 0: 0.1 (torch's default), LZ_OPT_ZERO: 0; in [0, 1] */
    float eps;        /* 0: 1e-5 (torch's default), LZ_OPT_ZERO: 0; finite, >= 0 */
} lz_batch_norm_opts;
/* lz_batch_norm with an options struct: the same op to the bit; errors
   name lz_batch_norm_opt. */
LZ_API lz_tensor *lz_batch_norm_opt(lz_tensor *x, lz_tensor *weight, lz_tensor *bias,
                                    lz_tensor *running_mean, lz_tensor *running_var,
                                    lz_batch_norm_opts opts);
/* Normalises over the last n_axes axes; weight/bias (that shape) may be NULL. */
LZ_API lz_tensor *lz_layer_norm(lz_tensor *x, int n_axes, lz_tensor *weight, lz_tensor *bias, float eps);
/* weight [V, D], indices i64/i32 of any shape -> [..., D]. */
LZ_API lz_tensor *lz_embedding(lz_tensor *weight, lz_tensor *indices);
LZ_API lz_tensor *lz_hardtanh(lz_tensor *x, float min_val, float max_val);
LZ_API lz_tensor *lz_relu6(lz_tensor *x);
/* Collapses axes [start_axis, end) into one (torch.flatten(x, start_axis)). */
LZ_API lz_tensor *lz_flatten(lz_tensor *x, int start_axis);
/* softmax(q k^T * scale + mask) v over the last two axes; mask (additive,
   broadcastable) may be NULL; scale 0 means 1/sqrt(head dim). */
LZ_API lz_tensor *lz_attention(lz_tensor *q, lz_tensor *k, lz_tensor *v, lz_tensor *mask, float scale);

/* ---- ops added for models from PyTorch (docs/api.md, "PyTorch's ops") -- */

LZ_API lz_tensor *lz_silu(lz_tensor *x);                  /* x * sigmoid(x) (SiLU, swish) */
LZ_API lz_tensor *lz_sin(lz_tensor *x);
LZ_API lz_tensor *lz_cos(lz_tensor *x);
/* a != b as f32 0/1 (any dtype, no gradient), like the other comparisons. */
LZ_API lz_tensor *lz_ne(lz_tensor *a, lz_tensor *b);
/* Like torch.minimum: NaN wins, ties split the gradient in halves. */
LZ_API lz_tensor *lz_minimum(lz_tensor *a, lz_tensor *b);
/* torch.tril (upper 0) / torch.triu (upper 1) over the last two axes with
   diagonal k; the elements cut off become fill (0 for tril/triu, -inf for
   a causal mask). f32, i64 or i32. */
LZ_API lz_tensor *lz_tri_mask(lz_tensor *x, int64_t k, int upper, float fill);
/* Running sum along axis (f32 summed in double, as torch's CPU kernel). */
LZ_API lz_tensor *lz_cumsum(lz_tensor *x, int axis);
/* torch.gather: out has idx's shape (same ndim as x, no larger than x off
   the axis), out[..i..] = x[.., idx[..i..], ..] along axis. idx i64/i32;
   an index out of range fails the execution naming it. */
LZ_API lz_tensor *lz_gather(lz_tensor *x, int axis, lz_tensor *idx);
/* base + src added at idx along axis (torch.scatter_add): src has idx's
   shape; a slot hit twice gets both. f32. */
LZ_API lz_tensor *lz_scatter_add(lz_tensor *base, int axis, lz_tensor *idx, lz_tensor *src);
/* torch.index_select: the entries idx (1-d) of axis, in that order. */
LZ_API lz_tensor *lz_index_select(lz_tensor *x, int axis, lz_tensor *idx);
/* i64 index of the first maximum along axis (NaN counts as the maximum). */
LZ_API lz_tensor *lz_argmax(lz_tensor *x, int axis, int keepdim);

/* Cross-entropy with torch's options. opts may be NULL (mean, no ignored
   index, no weight, no smoothing: lz_cross_entropy's value). */
typedef enum { LZ_REDUCTION_MEAN = 0, LZ_REDUCTION_SUM, LZ_REDUCTION_NONE } lz_reduction;
typedef struct lz_cross_entropy_opts {
    lz_tensor *weight;        /* [C] class weights (no gradient), or NULL */
    int64_t ignore_index;     /* with use_ignore_index: targets equal to it add 0 and weigh 0 */
    int use_ignore_index;     /* torch always uses one (its default is -100) */
    float label_smoothing;    /* in [0, 1] */
    lz_reduction reduction;   /* mean divides by the targets' summed weight, as torch */
} lz_cross_entropy_opts;
/* logits [N, C] f32, target [N] i64/i32 -> 0-d (mean, sum) or [N] (none). */
LZ_API lz_tensor *lz_cross_entropy_ex(lz_tensor *logits, lz_tensor *target,
                                      const lz_cross_entropy_opts *opts);

/* x * rsqrt(mean(x^2 over the last n_axes) + eps) * weight (weight may be
   NULL): torch's nn.RMSNorm, HF's LlamaRMSNorm. */
LZ_API lz_tensor *lz_rms_norm(lz_tensor *x, int n_axes, lz_tensor *weight, float eps);
/* nn.GroupNorm over x [N, C, ...]: groups of C/groups channels normalised
   per sample, then weight/bias [C] (either may be NULL). */
LZ_API lz_tensor *lz_group_norm(lz_tensor *x, int groups, lz_tensor *weight, lz_tensor *bias, float eps);
/* Element-wise losses with torch's reduction (f32, same shapes or broadcast). */
LZ_API lz_tensor *lz_mse_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction);
LZ_API lz_tensor *lz_l1_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction);
LZ_API lz_tensor *lz_smooth_l1_loss(lz_tensor *input, lz_tensor *target, lz_reduction reduction, float beta);
/* torch's binary_cross_entropy_with_logits; weight and pos_weight may be NULL. */
LZ_API lz_tensor *lz_bce_with_logits(lz_tensor *logits, lz_tensor *target, lz_tensor *weight,
                                     lz_tensor *pos_weight, lz_reduction reduction);

/* lz_attention with torch's scaled_dot_product_attention options. */
typedef struct lz_attention_opts {
    lz_tensor *mask;          /* additive and broadcastable, or NULL */
    float scale;              /* 0: 1/sqrt(head dim) */
    int causal;               /* query i sees keys j <= i (torch's is_causal) */
    float dropout_p;          /* dropout on the attention weights, drawn in the graph */
    int enable_gqa;           /* k, v may have fewer heads (axis -3) than q, dividing them */
} lz_attention_opts;
LZ_API lz_tensor *lz_attention_ex(lz_tensor *q, lz_tensor *k, lz_tensor *v, const lz_attention_opts *opts);

/* torch.nn.utils.clip_grad_norm_ in the graph: scales the gradients of
   params[0..n) (those without one are skipped) by min(max_norm / (norm +
   1e-6), 1) and returns the total 2-norm before clipping as a new 0-d
   tensor. Call between lz_backward and the optimizer step. NULL + error
   when no tensor has a gradient or max_norm is not positive. */
LZ_API lz_tensor *lz_clip_grad_norm(lz_tensor *const *params, int n, float max_norm);

/* ---- random numbers -------------------------------------------------- */

/* Seeds the counter-based generator. Its seed and counter are data that
   every random op reads and advances in the graph, so each step and each
   replay of a capture draws new numbers, and equal seeds give equal
   sequences in lazy, eager and captured mode. */
LZ_API void       lz_manual_seed(uint64_t seed);
/* A new f32 tensor of the given shape drawn from the generator: uniform in
   [0, 1) (lz_rand) or standard normal (lz_randn). Drawn in the graph, like
   dropout's masks: after lz_manual_seed(s) the same calls give the same
   numbers, in lazy, eager and captured mode, and each call advances the
   counter by the element count. Carries no gradient (a parameter made from
   one is a leaf). */
LZ_API lz_tensor *lz_rand(int ndim, const int64_t *shape);
LZ_API lz_tensor *lz_randn(int ndim, const int64_t *shape);
/* Zeroes each element with probability p and scales the rest by 1/(1-p)
   when training; identity otherwise. */
LZ_API lz_tensor *lz_dropout(lz_tensor *x, float p, int training);

/* ---- step boundaries ------------------------------------------------- */

/* Cuts every live tensor's pending IR into one graph and enqueues it.
   Returns at once; with nothing pending it touches nothing. */
LZ_API void lz_mark_step(void);
/* Syncs the chosen tensors (one graph); wait != 0 also waits for them. */
LZ_API int  lz_sync(lz_tensor *const *ts, int n, int wait);
/* Waits for every enqueued execution; -1 + error if one of them failed. */
LZ_API int  lz_wait(void);
/* Eager mode: every op executes as soon as it is recorded (same kernels).
   Also switched on by LZ_EAGER=1 in the environment. */
LZ_API void lz_set_eager(int on);
LZ_API int  lz_is_eager(void);

/* ---- autograd and in-place update ------------------------------------ */

LZ_API void       lz_requires_grad(lz_tensor *t, int on);
/* Accumulates d(loss)/d(leaf) into the grad of every leaf that requires
   grad; loss must have one element. Frees the recorded graph. */
LZ_API int        lz_backward(lz_tensor *loss);
LZ_API lz_tensor *lz_grad(lz_tensor *t);                  /* borrowed; NULL if none */
/* A new tensor holding x's current value with no autograd record and no
   requires-grad flag (torch's x.detach()): no gradient flows back through
   it. Shares x's value without a copy; a later lz_assign to x leaves it. */
LZ_API lz_tensor *lz_detach(lz_tensor *x);
/* Drops t's grad, so the next backward starts from zero. */
LZ_API void       lz_zero_grad(lz_tensor *t);
/* dst takes src's value, lazily (same shape and dtype). */
LZ_API int        lz_assign(lz_tensor *dst, lz_tensor *src);
/* Ops recorded between these make no autograd record (optimizer updates). */
LZ_API void       lz_no_grad_begin(void);
LZ_API void       lz_no_grad_end(void);

/* ---- optimizers ------------------------------------------------------ */

/* Each optimizer's own calls. One interface over all of them (a training
   loop that names its optimizer once; a new optimizer in one file) is
   lz_optimizer in lazyc_optim.h, made from these options structs. */

/* Options fields: a zero field means PyTorch's default, named per field
   below. Where 0 is also a value someone may want and differs from the
   default (lr, beta1, beta2, eps, gamma), LZ_OPT_ZERO gives an exact 0.
   Invalid values (negative, non-finite, out of range) are errors naming
   the field. LZ_OPT_ZERO is a value no field accepts otherwise, so a
   mistaken negative (-1) is still an error. */
#define LZ_OPT_ZERO (-1e30f)

typedef struct lz_sgd lz_sgd;
typedef struct lz_sgd_opts {
    float lr;            /* 0: 1e-3 (torch >= 2.0's default), LZ_OPT_ZERO: 0; >= 0 */
    float momentum;      /* 0: none (torch's default); must be >= 0 */
    float dampening;     /* 0: none (torch's default) */
    float weight_decay;  /* 0: none (torch's default); L2 added to the grad; >= 0 */
    int   nesterov;      /* 0: off (torch's default); 1 needs momentum > 0, dampening 0 */
} lz_sgd_opts;
/* SGD as in torch.optim.SGD; lr, momentum and weight decay are 0-d data.
   Every parameter must be f32 and require grad (else NULL and an error
   naming it); one without a grad at a step is skipped, as torch does.
   The optimizer holds its own reference to each parameter (released by
   lz_sgd_free), so the program may free them, or their lz_params set,
   first: the optimizer goes on updating its tensors. */
LZ_API lz_sgd *lz_sgd_new(lz_tensor *const *params, int n, lz_sgd_opts opts);
/* Never recompiles; 0 is 0 here. A negative or non-finite rate is refused
   with an error and the rate stays. */
LZ_API void    lz_sgd_set_lr(lz_sgd *opt, float lr);
LZ_API int     lz_sgd_step(lz_sgd *opt);                  /* records the update */
LZ_API void    lz_sgd_zero_grad(lz_sgd *opt);
LZ_API void    lz_sgd_free(lz_sgd *opt);

typedef struct lz_adamw lz_adamw;
typedef struct lz_adamw_opts {
    float lr;            /* 0: 1e-3 (torch's default), LZ_OPT_ZERO: 0; >= 0 */
    float beta1;         /* 0: 0.9 (torch's default), LZ_OPT_ZERO: 0; in [0, 1) */
    float beta2;         /* 0: 0.999 (torch's default), LZ_OPT_ZERO: 0; in [0, 1) */
    float eps;           /* 0: 1e-8 (torch's default), LZ_OPT_ZERO: 0; must be >= 0 */
    float weight_decay;  /* 0: none; >= 0. torch.optim.Adam's default is 0, but
                            torch.optim.AdamW's is 1e-2: pass it to match AdamW */
    int   decoupled;     /* 1: AdamW (decoupled decay); 0: Adam (L2 in the grad) */
} lz_adamw_opts;
/* torch.optim.Adam / AdamW. The step count and bias corrections are data
   advanced inside the graph, so a captured step replays correctly. Every
   parameter must be f32 and require grad (else NULL and an error naming it).
   Holds its own references to the parameters, as lz_sgd_new does. */
LZ_API lz_adamw *lz_adamw_new(lz_tensor *const *params, int n, lz_adamw_opts opts);
LZ_API void      lz_adamw_set_lr(lz_adamw *opt, float lr);  /* as lz_sgd_set_lr */
LZ_API int       lz_adamw_step(lz_adamw *opt);
LZ_API void      lz_adamw_zero_grad(lz_adamw *opt);
LZ_API void      lz_adamw_free(lz_adamw *opt);

/* Checkpoint support: adds new handles of the optimizer's state tensors
   (momentum buffers, moments, step count) to `into`, named prefix.NAME
   (non-trainable). Loading values into them restores the optimizer. */
LZ_API int lz_sgd_state(lz_sgd *opt, lz_params *into, const char *prefix);
LZ_API int lz_adamw_state(lz_adamw *opt, lz_params *into, const char *prefix);
/* The same for the random generator's seed and counter. */
LZ_API int lz_rng_state(lz_params *into, const char *prefix);

/* Learning-rate schedules: the rate for a step, to pass to *_set_lr
   between steps (torch's StepLR and CosineAnnealingLR). gamma 0 is torch's
   default 0.1 (LZ_OPT_ZERO: 0); eta_min 0 is 0, torch's default; step_size
   and t_max have no default and must be positive. An invalid argument
   gives NAN and an error naming it. */
LZ_API float lz_lr_step(float base_lr, int step, int step_size, float gamma);
LZ_API float lz_lr_cosine(float base_lr, int step, int t_max, float eta_min);

/* ---- named parameters and checkpoints ---------------------------------- */

/* lz_params: an ordered set of named tensors, a model's parameters
   (trainable) and buffers (running statistics), named like PyTorch's
   state_dict keys. */
LZ_API lz_params  *lz_params_new(void);
LZ_API void        lz_params_free(lz_params *p);         /* frees the tensors too */
/* Adds t under name (the set takes over the caller's handle); trainable
   tensors get requires_grad. Returns t, or NULL on a duplicate name. */
LZ_API lz_tensor  *lz_params_add(lz_params *p, const char *name, lz_tensor *t, int trainable);
LZ_API int         lz_params_count(const lz_params *p);
LZ_API const char *lz_params_name(const lz_params *p, int i);
LZ_API lz_tensor  *lz_params_at(const lz_params *p, int i);          /* borrowed */
LZ_API int         lz_params_trainable(const lz_params *p, int i);
LZ_API lz_tensor  *lz_params_find(const lz_params *p, const char *name); /* borrowed */
/* The trainable tensors in order, into out (capacity cap); returns the count. */
LZ_API int         lz_params_trainable_list(const lz_params *p, lz_tensor **out, int cap);
LZ_API int64_t     lz_params_numel(const lz_params *p, int trainable_only);

/* safetensors files (header JSON + raw little-endian data). Saving writes
   like lz_write_file: a crash or a failed write (full disk) leaves the
   previous file whole. */
LZ_API int  lz_safetensors_save(const char *path, const lz_params *p);
/* Loads every tensor of p from path by name: f32, i64 and bf16 on disk
   (bf16 widened to f32 into an f32 tensor, copied as it is into a bf16
   one). strict: a missing, extra or mis-shaped tensor is an error naming
   it. Saving writes a bf16 tensor as BF16. */
LZ_API int  lz_safetensors_load(const char *path, lz_params *p, int strict);
/* Reads every tensor in a file into a new set (none trainable); BF16 and
   F16 widen to f32. */
LZ_API lz_params *lz_safetensors_read(const char *path);
/* Like lz_safetensors_read, but BF16 tensors stay LZ_BF16 (no widening). */
LZ_API lz_params *lz_safetensors_read_bf16(const char *path);
/* Like lz_safetensors_save, also writing n_meta string pairs into the
   header's __metadata__ (a checkpoint's epoch and step, for instance). */
LZ_API int   lz_safetensors_save_meta(const char *path, const lz_params *p, int n_meta,
                                      const char *const *keys, const char *const *values);
/* The __metadata__ value of key in path as a new string (caller frees);
   NULL + error when the file is bad or has no such key. */
LZ_API char *lz_safetensors_read_meta(const char *path, const char *key);

/* Replaces path with nbytes of data durably: written to "<path>.tmp<pid>"
   beside it, fsync'd, renamed over path, and the directory fsync'd, so
   path always holds the old contents or the new whole. Temporary files of
   path left by dead processes are removed; a path that is a device or FIFO
   (/dev/stdout, /dev/full) is written in place. 0, or -1 with an error
   naming path and the failing step (no space left, permission denied). */
LZ_API int   lz_write_file(const char *path, const void *data, size_t nbytes);

/* ---- data sets ---------------------------------------------------------- */

/* Images and labels in host memory, read from IDX files (gzip or plain):
   images u8 [N, H, W], labels u8 [N]. */
typedef struct lz_dataset lz_dataset;
/* Reads an image file and a label file; a missing, truncated or corrupt
   file (bad magic, dimensions, sizes, count mismatch) gives NULL and an
   error naming the file and what is wrong. */
LZ_API lz_dataset *lz_dataset_idx(const char *images_path, const char *labels_path);
/* dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (Debian's
   dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist). */
LZ_API lz_dataset *lz_dataset_fashion_mnist(const char *dir, int train);
LZ_API int64_t     lz_dataset_size(const lz_dataset *ds);
/* Image shape [1, H, W] (channels first). */
LZ_API void        lz_dataset_image_shape(const lz_dataset *ds, int64_t shape[3]);
/* Keeps the first n examples (n <= size): quick runs and tests. */
LZ_API int         lz_dataset_truncate(lz_dataset *ds, int64_t n);
LZ_API void        lz_dataset_free(lz_dataset *ds);

/* Batches of a data set: shuffled per epoch from a seed, normalised
   ((pixel/255 - mean) / std), the next batch prepared on a background
   thread while the current step runs. The last partial batch is dropped
   when drop_last, else returned smaller (a captured step then traces once
   more for that shape). */
typedef struct lz_loader lz_loader;
typedef struct lz_loader_opts {
    int64_t  batch;            /* required, > 0: 0 is an error, not torch's 1 */
    int      shuffle;          /* 0: in order (torch's default) */
    int      drop_last;        /* 0: keep the last partial batch (torch's default) */
    uint64_t seed;             /* 0 is a seed like any other */
    float    mean, std;        /* mean 0: none; std 0 is read as 1; both finite */
} lz_loader_opts;
LZ_API lz_loader *lz_loader_new(const lz_dataset *ds, lz_loader_opts opts);   /* ds must outlive it */
LZ_API int64_t    lz_loader_batches(const lz_loader *l);                      /* per epoch */
/* Starts an epoch: its order is a function of (seed, epoch) alone, so a
   resumed run sees the same batches. */
LZ_API int        lz_loader_start_epoch(lz_loader *l, int epoch);
/* Skips n batches of the current epoch (resuming mid-epoch). */
LZ_API int        lz_loader_skip(lz_loader *l, int64_t n);
/* Next batch as new tensors x [B, 1, H, W] f32 and y [B] i64: 1, or 0 at
   the end of the epoch, or -1 with an error. */
LZ_API int        lz_loader_next(lz_loader *l, lz_tensor **x, lz_tensor **y);
LZ_API void       lz_loader_free(lz_loader *l);

/* ---- capture: trace a step once, replay it ---------------------------- */

/* fn records ops on in[0..n_in) and stores n_out tensors in out */
typedef int (*lz_step_fn)(void *ctx, lz_tensor *const *in, lz_tensor **out);
LZ_API lz_fn *lz_capture(lz_step_fn fn, void *ctx, int n_in, int n_out);
/* Calls fn: traces it, or replays a capture whose guard holds (the inputs'
   shapes, dtypes and aliasing, which leaves have a gradient, every bound
   tensor still held by the program and unchanged requires-grad flags),
   computing what a direct call would. A replay reuses what the trace froze:
   the ops recorded and host data made inside fn (pass changing values as
   inputs or keep them in tensors updated with lz_assign); LZ_CAPTURE_CHECK=N
   traces every N-th call again and fails it on a difference. Not seen
   without it: a ctx pointer re-pointed to another existing tensor that
   does not require grad (docs/design.md, capture). out gets what
   a direct call gives: new handles for tensors fn made (owned by the
   caller's scope if one is open, or kept past it by fn's lz_keep), the
   same handle for a tensor fn was given or holds (with a reference only if
   fn took one). -1 with fn's own error, or the first unchecked op error. */
LZ_API int    lz_call(lz_fn *f, lz_tensor *const *in, lz_tensor **out);
LZ_API void   lz_fn_free(lz_fn *f);

/* ---- data-parallel training over MPI ---------------------------------- */

/* Every rank (process of an mpirun job) holds the whole model, trains on
   its share of each global batch, and the gradients are averaged across
   ranks every step, inside the step's one execution. Needs lazyc built
   with MPI (libopenmpi-dev); without it every call below that communicates
   is an error saying so, and rank/size give 0 and 1. */

/* Joins the MPI job this process was launched in (mpirun); a process started
   alone is rank 0 of 1 (and starts no MPI). Idempotent; 0 or -1 + error. */
LZ_API int  lz_dist_init(void);
LZ_API int  lz_dist_rank(void);   /* this process's rank; 0 before lz_dist_init */
LZ_API int  lz_dist_size(void);   /* the number of ranks; 1 before lz_dist_init */
/* Records a sum (mean != 0: mean) of x (f32) over all ranks as an op of the
   graph: it runs inside the step's execution, like any other op. Carries no
   gradient. Every rank must record the same graph: a rank whose graph
   differs fails the step with an error naming both signatures. */
LZ_API lz_tensor *lz_dist_all_reduce(lz_tensor *x, int mean);
/* Records the mean over ranks of every listed tensor's gradient (call between
   lz_backward and the optimizer step): bucketed (LZ_DIST_BUCKET_KIB), each
   bucket's sum started as soon as backward has made its gradients and
   waited for only where the optimizer reads them. Tensors without a
   gradient are skipped. */
LZ_API int  lz_dist_average_grads(lz_tensor *const *params, int n);
/* Makes every rank's tensors equal rank 0's (at start, after loading):
   waits for pending executions, then copies through the host. */
LZ_API int  lz_dist_broadcast(lz_tensor *const *ts, int n);
/* Waits for pending executions and leaves the job (MPI_Finalize); after a
   failed collective it leaves MPI to mpirun, which ends the job. */
LZ_API void lz_dist_finalize(void);
/* Communication counters since the last reset, updated by executions
   (read them after lz_wait): sums run, bytes summed, time from each sum's
   start to its completion (comm_ms) and the part of it the step spent
   blocked waiting (wait_ms): comm_ms - wait_ms ran under other kernels;
   overlapped_kernels: kernels that ran while a sum was in flight. */
typedef struct lz_dist_stats {
    int64_t all_reduces, bytes;
    double  comm_ms, wait_ms;
    int64_t overlapped_kernels;
} lz_dist_stats;
LZ_API lz_dist_stats lz_dist_stats_get(void);
LZ_API void          lz_dist_stats_reset(void);

/* ---- metrics: counters since the last reset -------------------------- */

typedef struct lz_metrics {
    int64_t mark_steps, graphs, executions, compiles, cache_hits;
    int64_t ir_nodes, transfers_to_device, transfers_from_device, host_waits;
    int64_t capture_replays, capture_fallbacks, peak_bytes;
    double  trace_ms, compile_ms, execute_ms, wait_ms;
    double  flops;           /* conv and matmul work of the executions enqueued */
    int64_t kernels;         /* kernel launches (program steps) of the executions enqueued */
    int64_t in_place_writes; /* results written over the buffer of the value they replace
                                (a parameter, optimizer state, a remade gradient) */
    /* bytes moved between host and device memory, each way: tensors made
       from host data and read back, the library's own reads (a capture's
       constants); not fills (lz_zeros, lz_full, lz_from_random run on the
       device) */
    int64_t bytes_to_device, bytes_from_device;
    /* what the device launched for the executions that have run (counted
       as the executor runs them: lz_wait first for a step's): CUDA graphs,
       each a whole execution, and kernels or library calls launched one by
       one (on the CPU, every kernel). A captured step on the CUDA device is
       1 graph launch and 0 kernel launches from its third call on. */
    int64_t graph_launches, kernel_launches;
} lz_metrics;
LZ_API lz_metrics lz_metrics_get(void);
LZ_API void       lz_metrics_reset(void);
LZ_API char      *lz_metrics_report(void);               /* text; caller frees */

/* ---- profile: kernel time by op -------------------------------------- */

/* Off by default. While on, the backend times every kernel it runs and adds
   the time to its op's entry (wall time on the executor thread, the
   kernel's parallel region included); lz_profile_reset empties the table. */
typedef struct lz_profile_entry {
    const char *op;          /* the IR op's name: "conv2d", "fused_elementwise" */
    int library;             /* 1: a library primitive (oneDNN) ran it, 0: lazyc's kernel */
    int64_t calls;           /* kernels run */
    double ms;               /* their total time */
} lz_profile_entry;
/* on: 0 off, 1 by op, 2 by op and by step shape (lz_profile_read_steps). */
LZ_API void lz_profile_enable(int on);
LZ_API void lz_profile_reset(void);
/* Copies up to max entries, the slowest first, into out; returns how many
   (op, library) pairs ran since the last reset. */
LZ_API int  lz_profile_read(lz_profile_entry *out, int max);
/* The same times by step shape (lz_profile_enable(2)): one entry per op,
   library and operands, where operands reads like
   "bf16[8, 64, 32, 32]/16 bf16[256, 64, 1, 1] -> f32[8, 256, 32, 32]/16": each
   input's dtype and shape, /b for a channel-blocked one, then the result
   (text past its size is cut). flops: what one call computes, 2 x the
   multiply-adds of a convolution (either direction) or matmul, 0 for other
   ops. It keeps 1024 shapes; later ones count under "(other shapes)" of
   their op and library. Copies up to max entries, the slowest first;
   returns how many there are (-1 with an error set when out of memory). */
#define LZ_PROFILE_OPERANDS 160
typedef struct lz_profile_step_entry {
    const char *op;
    int library;
    char operands[LZ_PROFILE_OPERANDS];
    int64_t calls;
    double ms;
    double flops;
} lz_profile_step_entry;
LZ_API int  lz_profile_read_steps(lz_profile_step_entry *out, int max);

/* ---- settings: the LZ_* environment variables ------------------------ */

/* One entry of the table of every LZ_* variable lazyc reads (`lazyc env`
   prints it). A variable is read once, when first needed; a value it does
   not accept is not used: a warning on stderr names it and the default
   applies. */
typedef struct lz_setting_info {
    const char *name;           /* "LZ_EAGER" */
    const char *kind;           /* "bool" (0 or 1), "int", "choice" or "text" */
    const char *default_value;
    const char *help;           /* what it changes */
    const char *choices;        /* choice: "0|1|2|tune"; NULL otherwise */
    int64_t     min, max;       /* int: the accepted range */
    const char *env;            /* the environment's value now; NULL when unset or empty */
    const char *value;          /* the value that applies: env when valid, else the default */
    int         valid;          /* 0: env is set to a value the variable does not accept */
    int         read;           /* 1 once the library has read the variable */
} lz_setting_info;
LZ_API int         lz_settings_count(void);
/* Entry i (0 <= i < lz_settings_count()) into out; 0, or -1 + error. */
LZ_API int         lz_settings_get(int i, lz_setting_info *out);
/* The value that applies to the variable called name (read now if not yet,
   warning once if invalid); NULL + error when lazyc has no such variable. */
LZ_API const char *lz_setting(const char *name);

/* ---- version ----------------------------------------------------------- */

/* The loaded library's LZ_VERSION_STRING, e.g. "0.1.0". */
LZ_API const char *lz_version(void);

/* ---- errors ---------------------------------------------------------- */

LZ_API const char *lz_last_error(void);                   /* NULL when none */
/* Sets the error message (printf-style), for code built on the API (model
   zoos, step functions) that finds a problem of its own. */
LZ_API void        lz_set_error(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);
LZ_API void        lz_clear_error(void);

/* ---- shutdown -------------------------------------------------------- */

/* Releases everything the library holds itself: waits for every enqueued
   execution (an error that no lz_wait reported is dropped), stops the
   executor thread, frees the executable cache (captured executables too:
   a live lz_fn keeps its own), the device memory cached for reuse, the
   shared scalars and the random generator's state (the default seed
   again), ends open scopes (as lz_scope_end) and no-grad sections, and
   resets the metrics (and turns the profile off and empties it),
   lz_set_eager and the calling thread's error.
   Handles the caller holds (tensors, lz_fn, optimizers, parameter sets,
   data sets, loaders) are not freed: they stay valid and stay the
   caller's to free; a program that frees them all first and then calls
   lz_shutdown leaves nothing allocated. The next call starts the library
   afresh (a new thread, an empty cache: the first step compiles again).
   Call it from the thread that records ops, with no other thread using
   the library; from inside a step function being traced it only sets an
   error. */
LZ_API void        lz_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
