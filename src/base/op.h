/* The op table: every operation the IR records, by number, with its name.
 * On the ground floor because counters, the kernel profile and every floor
 * above name ops; the IR nodes that use it are one floor up (ir/ir.h). */
#ifndef LZ_OP_H
#define LZ_OP_H

#include <stdint.h>

/* Integer and float attributes an op may carry (lz_node, lz_instr). */
#define LZ_MAX_IATTR 16
#define LZ_MAX_FATTR 4

typedef enum lz_op {
    LZ_OP_LEAF = 0,     /* data: hashed by shape and dtype only */
    LZ_OP_FILL,         /* constant 0 or 1 (the only baked constants) fattr[0] */
    /* unary, same shape */
    LZ_OP_NEG, LZ_OP_EXP, LZ_OP_LOG, LZ_OP_SQRT, LZ_OP_RSQRT, LZ_OP_TANH,
    LZ_OP_SIGMOID, LZ_OP_RELU, LZ_OP_GELU,
    LZ_OP_POW,          /* fattr[0] exponent */
    LZ_OP_SCALE,        /* x * fattr[0]; only for constants derived from shapes (1/n) */
    LZ_OP_CAST,         /* to node dtype */
    LZ_OP_COPY,         /* identity (reshape lowers to it) */
    /* binary, numpy broadcasting to the node shape */
    LZ_OP_ADD, LZ_OP_SUB, LZ_OP_MUL, LZ_OP_DIV, LZ_OP_MAXIMUM,
    LZ_OP_GT, LZ_OP_LT, LZ_OP_GE, LZ_OP_LE, LZ_OP_EQ,
    LZ_OP_WHERE,        /* (cond, a, b), broadcasting */
    LZ_OP_RELU_GRAD,    /* (x, g) -> g * (x > 0), same shape */
    LZ_OP_GELU_GRAD,    /* (x, g) -> g * gelu'(x), same shape */
    /* reductions: iattr[0] = bitmask of reduced axes of the source,
       iattr[1] = keepdim */
    LZ_OP_SUM, LZ_OP_MEAN, LZ_OP_MAX,
    /* shape */
    LZ_OP_RESHAPE,      /* a copy into the node shape */
    LZ_OP_PERMUTE,      /* iattr[0..ndim) = perm */
    LZ_OP_EXPAND,       /* broadcast the source to the node shape */
    LZ_OP_SLICE,        /* iattr[0] axis, iattr[1] start */
    LZ_OP_SLICE_GRAD,   /* inverse of SLICE: zeros with the source at
                           iattr[1] along axis iattr[0] */
    LZ_OP_CAT,          /* iattr[0] axis; n_src inputs */
    /* linear algebra and losses */
    LZ_OP_MATMUL,       /* (a, b): a [..., M, K], b [..., K, N], batch dims
                           broadcast; both at least 2-d after lowering.
                           iattr[0] / iattr[1]: a / b is stored transposed
                           ([..., K, M] / [..., N, K]), so a gradient needs
                           no transposing copy */
    LZ_OP_SOFTMAX,      /* iattr[0] axis */
    LZ_OP_LOG_SOFTMAX,  /* iattr[0] axis */
    LZ_OP_SOFTMAX_GRAD, /* (y, g), iattr[0] axis: y * (g - sum(g*y)) */
    LZ_OP_LOG_SOFTMAX_GRAD, /* (y, g), iattr[0] axis: g - exp(y) * sum(g) */
    LZ_OP_CROSS_ENTROPY,    /* (logits [N,C], target [N] int) -> 0-d mean */
    LZ_OP_CROSS_ENTROPY_GRAD, /* (logits, target, g 0-d) -> [N,C] */
    /* neural-network ops (NCHW) */
    LZ_OP_HARDTANH,     /* fattr[0] min, fattr[1] max */
    LZ_OP_HARDTANH_GRAD,/* (x, g), same attrs */
    LZ_OP_EMBEDDING,    /* (weight [V, D], idx int) -> [..., D] */
    LZ_OP_EMBEDDING_GRAD, /* (g [..., D], idx) -> [V, D] (node shape) */
    LZ_OP_DROPOUT_MASK, /* (seed i64 0-d, counter i64 0-d) -> f32 of 0 and
                           1/(1-p), fattr[0] = p; element i draws from
                           (seed, counter + i) */
    LZ_OP_RNG_ADVANCE,  /* (counter i64 0-d) -> counter + iattr[0] */
    LZ_OP_RAND,         /* (seed i64 0-d, counter i64 0-d) -> f32; iattr[0] 0:
                           uniform [0, 1), 1: normal(0, 1); element i draws
                           from (seed, counter + i) */
    LZ_OP_CONV2D,       /* (x, w); iattr: stride h,w, padding h,w, dilation h,w, groups */
    LZ_OP_CONV2D_GRAD_INPUT,  /* (g, w) -> x shape (node shape), same iattr */
    LZ_OP_CONV2D_GRAD_WEIGHT, /* (x, g) -> w shape (node shape), same iattr */
    LZ_OP_MAX_POOL2D,   /* (x); iattr: kernel h,w, stride h,w, padding h,w, ceil_mode */
    LZ_OP_MAX_POOL2D_GRAD,    /* (x, g) -> x shape, same iattr */
    LZ_OP_AVG_POOL2D,   /* (x); iattr as max pool + [7] count_include_pad */
    LZ_OP_AVG_POOL2D_GRAD,    /* (g) -> x shape (node shape), same iattr */
    LZ_OP_ADAPTIVE_AVG_POOL2D,      /* (x) -> [N, C, oh, ow] (node shape) */
    LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD, /* (g) -> x shape (node shape) */
    /* training-mode batch norm over axis 1 of x [N, C, ...], fused */
    LZ_OP_BATCH_NORM_STATS,     /* (x) -> [2, C]: mean, biased variance */
    LZ_OP_BATCH_NORM,           /* (x, stats, eps 0-d[, weight][, bias]); iattr[0] has
                                   weight, iattr[1] has bias -> x shape; iattr[2] an
                                   activation applied on the way out (LZ_BN_ACT_*, set
                                   by the compiler only: compile/fuse_bn_act.c), with
                                   fattr[0..1] hardtanh's bounds */
    LZ_OP_BATCH_NORM_GRAD_STATS,/* (x, stats, eps, g) -> [2, C]: sum g, sum g * xhat */
    LZ_OP_BATCH_NORM_GRAD,      /* (x, stats, eps, g, gstats[, weight]); iattr[0] has
                                   weight -> dx, the gradient through the batch stats too.
                                   Both gradients: iattr[2] a folded activation's
                                   gradient applied to g first (LZ_BN_ACT_*, compiler
                                   only), at y recomputed with the forward's weight and
                                   bias, then the last inputs (iattr[3], iattr[4]: there) */
    /* layer norm without its affine part (ops/layer_norm.c adds weight and
       bias as element-wise steps): each row of iattr[0] elements (the
       normalised axes, flattened) */
    LZ_OP_LAYER_NORM,           /* (x) -> (x - mean) * rsqrt(var + fattr[0]), biased var */
    LZ_OP_LAYER_NORM_GRAD,      /* (x, g) -> dx, the moments recomputed from x; same attrs */
    LZ_OP_TEST_GATE,    /* identity that blocks until lz_test_gate_open */
    /* data-parallel sum over the ranks of a job (src/comm), split in two so
       the compiler can start it as soon as its inputs exist and wait for it
       only where its result is read (compile/schedule_comm.c) */
    LZ_OP_ALLREDUCE_START, /* (x0, x1, ...) -> [total] f32: the inputs packed
                           flat, their sum over the ranks started in place;
                           iattr[0] the graph's hash, iattr[1] the collective's
                           place in it (set by the compiler) */
    LZ_OP_ALLREDUCE_WAIT,  /* (started) -> same shape: waits for the sum;
                           iattr[0] mean (divides by the rank count) */
    LZ_OP_FUSED_ELEMENTWISE, /* made by the compiler only (compile/fuse.c): a chain of
                           element-wise steps run as one pass (lz_instr.fused) */
    /* ---- added for models from PyTorch (ops/activation_ext.c, index.c,
       loss_ext.c; kernels backends/cpu/k_elementwise_ext.c, k_index.c,
       k_loss_ext.c) ---- */
    LZ_OP_SILU,         /* x * sigmoid(x) */
    LZ_OP_SILU_GRAD,    /* (x, g) -> g * silu'(x) */
    LZ_OP_SIN, LZ_OP_COS,
    LZ_OP_NE,           /* a != b -> f32 0/1, like the other comparisons */
    LZ_OP_MINIMUM,      /* NaN in either operand wins, as torch.minimum */
    LZ_OP_CLIP_COEF,    /* total norm -> min(fattr[0] / (x + 1e-6), 1): torch's
                           clip_grad_norm_ coefficient */
    LZ_OP_CE_ROWS,      /* (logits [N,C], target [N] int[, weight [C]]) -> [N]
                           per-row loss; iattr[0] ignore_index, iattr[1] uses it,
                           iattr[2] has weight; fattr[0] label smoothing */
    LZ_OP_CE_ROWS_GRAD, /* (logits, target, g [N][, weight]) -> [N,C]; same attrs */
    LZ_OP_CE_ROW_WEIGHT,/* (target[, weight]) -> [N] f32: the row's weight in a
                           mean (weight[t] or 1, 0 when ignored); same attrs */
    LZ_OP_TRI_MASK,     /* over the last two axes: elements with j - i > iattr[0]
                           (iattr[1] == 0, tril) or j - i < iattr[0] (iattr[1] == 1,
                           triu) become fattr[0] */
    LZ_OP_CUMSUM,       /* iattr[0] axis, iattr[1] reverse (from the end) */
    LZ_OP_GATHER,       /* (x, idx) -> idx shape: x[.., idx[..], ..] along iattr[0] */
    LZ_OP_SCATTER_ADD,  /* (src, idx) -> node shape: zeros, src added at idx along
                           iattr[0] (gather's gradient) */
    LZ_OP_ARGMAX,       /* i64 index of the first maximum along iattr[0]; iattr[1]
                           keepdim; NaN counts as the maximum, as in torch */
    LZ_OP_COUNT
} lz_op;

enum { LZ_BN_ACT_NONE, LZ_BN_ACT_RELU, LZ_BN_ACT_HARDTANH };

const char *lz_op_name(lz_op op);
/* 1 if op computes each output element from the same element of its
   (broadcast) operands by one formula: what an element-wise kernel runs and
   what the compiler may fuse. */
int lz_op_is_elementwise(lz_op op);
/* Mixes v into the running structural hash h (splitmix64's finaliser). */
uint64_t lz_hash_mix(uint64_t h, uint64_t v);
/* A string's 64-bit FNV-1a hash (stable across processes and builds: the
   convolution choices' file name is made from it). */
uint64_t lz_hash_str(const char *s);

#endif
