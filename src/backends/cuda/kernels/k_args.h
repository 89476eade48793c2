/* The arguments of the CUDA backend's built-in kernels: one struct per
 * kernel, passed by value as its only parameter. Compiled twice, by the C
 * compiler for the host code that fills them (backends/cuda/f_*.c) and by
 * NVRTC for the kernels (kernels/k_*.cu), so both sides agree on every
 * offset: only fixed-size members (64-bit pointers and integers, 32-bit
 * int and float), each struct's pointers first. tests/test_cuda_codegen.c
 * checks the sizes match on both sides. */
#ifndef LZ_CU_K_ARGS_H
#define LZ_CU_K_ARGS_H

#define LZ_CU_MAX_DIMS 8
/* threads per block of the element-wise and most other kernels */
#define LZ_CU_BLOCK 256

/* Where a kernel reports bad data it found (an index out of range): the
   first report wins, the backend reads it at its next synchronisation and
   fails that call with the message (cu_status.c). */
typedef struct lz_cu_status {
    int code;                 /* 0 none, else LZ_CU_BAD_* */
    int pad;
    long long what, value, limit;
} lz_cu_status;
enum {
    LZ_CU_BAD_NONE, LZ_CU_BAD_TARGET, LZ_CU_BAD_EMBEDDING, LZ_CU_BAD_EMBEDDING_GRAD, LZ_CU_BAD_TARGET_EX,
    LZ_CU_BAD_TARGET_EX_IGNORE, LZ_CU_BAD_GATHER, LZ_CU_BAD_SCATTER,
};

/* ---- k_misc.cu ---- */
typedef struct lz_cu_fill_args {          /* dst = n words of `width` bytes, each `value` */
    void *dst;
    long long n;
    unsigned long long value;
    int width, pad;
} lz_cu_fill_args;

typedef struct lz_cu_convert_args {       /* to_bf16: f32 -> bf16; widen: bf16 -> f32 */
    const void *src;
    void *dst;
    long long n;
} lz_cu_convert_args;

/* dst (dense, numel elements) = src read through strides: permute and
   expand, folded to nd axes; esize 2, 4 or 8, or to_bf16 (f32 -> bf16) */
typedef struct lz_cu_gather_args {
    const void *src;
    void *dst;
    long long numel;
    long long size[LZ_CU_MAX_DIMS], stride[LZ_CU_MAX_DIMS];
    int nd, esize, to_bf16, pad;
} lz_cu_gather_args;

typedef struct lz_cu_hardtanh_args {      /* y = hardtanh(x), or dx = its gradient of g */
    const float *x, *g;
    float *y;
    long long n;
    float lo, hi;
} lz_cu_hardtanh_args;

typedef struct lz_cu_embedding_args {     /* y[i] = w[idx[i]] (d floats); or dw[idx[i]] += g[i] */
    const float *w_or_g;
    const void *idx;
    float *out;
    lz_cu_status *status;
    long long n, rows, d;
    int is64, pad;
} lz_cu_embedding_args;

typedef struct lz_cu_rng_advance_args {
    const unsigned long long *in;
    unsigned long long *out;
    unsigned long long add;
} lz_cu_rng_advance_args;

/* ---- k_random.cu (compiled with --fmad=false: base/rng.h's bits) ---- */
typedef struct lz_cu_fill_random_args {
    float *dst;
    long long n;
    unsigned long long key;   /* lz_rng_key(seed) */
    float a, b;
    int dist, pad;
} lz_cu_fill_random_args;

typedef struct lz_cu_random_op_args {     /* dropout mask and LZ_OP_RAND, (seed, counter) on the device */
    const unsigned long long *seed, *counter;
    float *out;
    long long n;
    unsigned long long thresh;   /* dropout: lz_rng_dropout_threshold(p) */
    float keep;                  /* dropout: 1 / (1 - p) */
    int normal;                  /* rand: 1 normal, 0 uniform */
} lz_cu_random_op_args;

/* ---- k_reduce.cu ---- */
enum { LZ_CU_RED_SUM, LZ_CU_RED_MEAN, LZ_CU_RED_MAX };
/* Output element j (kept index) reads the source at kept_offset(j) +
   red_offset(r) for r < R; both decomposed row-major over their folded
   axes. split s of `splits` folds r in [s * chunk, (s + 1) * chunk). */
typedef struct lz_cu_reduce_args {
    const void *x;
    void *y;
    double *partial;             /* [splits][K] when splits > 1 */
    long long K, R, chunk;
    long long ksize[LZ_CU_MAX_DIMS], kstride[LZ_CU_MAX_DIMS];
    long long rsize[LZ_CU_MAX_DIMS], rstride[LZ_CU_MAX_DIMS];
    double scale;                /* 1 / R for a mean */
    int nk, nr, op, dtype;       /* dtype: lz_dtype (F32 0, I64 1, I32 2) */
    int splits, pad;
} lz_cu_reduce_args;

/* ---- k_softmax.cu ---- */
enum { LZ_CU_SOFTMAX, LZ_CU_LOG_SOFTMAX, LZ_CU_SOFTMAX_GRAD, LZ_CU_LOG_SOFTMAX_GRAD };
/* vectors of n elements, element i of vector (o, c) at (o * n + i) * inner + c */
typedef struct lz_cu_softmax_args {
    const float *x, *g;          /* g: the gradients' incoming gradient, else NULL */
    float *y;
    long long outer, n, inner;
    int kind, pad;
} lz_cu_softmax_args;

typedef struct lz_cu_xent_args {          /* cross-entropy over logits [n, c] */
    const float *x;
    const void *target;
    const float *g;              /* the gradient's incoming (0-d), else NULL */
    void *out;                   /* loss rows (double, scratch) or dx (float) */
    float *loss;                 /* the mean, written by lz_xent_mean */
    lz_cu_status *status;
    long long n, c;
    int is64, pad;
} lz_cu_xent_args;

/* cross-entropy with torch's options (LZ_OP_CE_ROWS, _GRAD, _ROW_WEIGHT):
   per-row losses with ignore_index, class weights, label smoothing eps */
typedef struct lz_cu_ce_args {
    const float *x, *w, *g;      /* logits [n, c]; weights [c] or NULL; the gradient's g [n] */
    const void *target;
    void *y;                     /* losses [n], dx [n, c] or row weights [n] */
    lz_cu_status *status;
    long long n, c, ignore, classes;
    float eps;
    int is64, use_ignore;
} lz_cu_ce_args;

/* ---- k_norm.cu ---- */
/* Batch norm over axis 1 of x [N, C, S]. The statistics' partial sums go
   per (channel, split) to `partial` (double [2][splits][C]); the finishing
   kernel writes stats [2, C] (mean, biased variance) or, for the
   gradient's, gstats [2, C] (sum g, sum g * xhat). */
typedef struct lz_cu_bn_args {
    const float *x, *stats, *eps, *g, *gstats, *w, *b;
    const float *fw, *fb;        /* a folded activation's forward weight and bias (gradients) */
    void *y;                     /* stats, y (f32 or bf16), gstats or dx */
    double *partial;
    long long N, C, S, chunk;    /* chunk: elements of a channel's N * S per split */
    float lo, hi;                /* hardtanh's bounds */
    int act, out_bf16, splits, pad;
} lz_cu_bn_args;

typedef struct lz_cu_ln_args {            /* rows of d elements */
    const float *x, *g;
    float *y;
    long long rows, d;
    float eps;
    int pad;
} lz_cu_ln_args;

/* ---- k_index.cu: the triangular mask, cumsum, gather, scatter-add, argmax ---- */
typedef struct lz_cu_index_args {
    const void *x, *idx;
    void *y;
    lz_cu_status *status;
    long long outer, n, inner, numel, rows, cols, k;
    long long ishape[LZ_CU_MAX_DIMS], fshape[LZ_CU_MAX_DIMS];   /* gather: the indices' and the full shape */
    float fill;
    int dtype, is64, axis, ndim, upper, rev;
} lz_cu_index_args;

/* ---- k_pool.cu ---- */
enum { LZ_CU_MAX_POOL, LZ_CU_AVG_POOL, LZ_CU_ADAPTIVE_POOL };
typedef struct lz_cu_pool_args {
    const float *x, *g;          /* g: the gradients' incoming */
    float *y;                    /* y, or dx (zeroed before) */
    long long planes, H, W, OH, OW;
    long long kh, kw, sh, sw, ph, pw;
    int kind, count_pad;
} lz_cu_pool_args;

#endif
