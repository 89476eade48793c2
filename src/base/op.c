#include "base/op.h"

uint64_t lz_hash_mix(uint64_t h, uint64_t v)
{
    /* splitmix64 finaliser over the running hash */
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27; h *= 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

uint64_t lz_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int lz_op_is_elementwise(lz_op op)
{
    switch (op) {
    case LZ_OP_NEG: case LZ_OP_EXP: case LZ_OP_LOG: case LZ_OP_SQRT: case LZ_OP_RSQRT:
    case LZ_OP_TANH: case LZ_OP_SIGMOID: case LZ_OP_RELU: case LZ_OP_GELU: case LZ_OP_POW:
    case LZ_OP_SCALE: case LZ_OP_CAST:
    case LZ_OP_ADD: case LZ_OP_SUB: case LZ_OP_MUL: case LZ_OP_DIV: case LZ_OP_MAXIMUM:
    case LZ_OP_GT: case LZ_OP_LT: case LZ_OP_GE: case LZ_OP_LE: case LZ_OP_EQ:
    case LZ_OP_WHERE: case LZ_OP_RELU_GRAD: case LZ_OP_GELU_GRAD:
    case LZ_OP_SILU: case LZ_OP_SILU_GRAD: case LZ_OP_SIN: case LZ_OP_COS: case LZ_OP_NE:
    case LZ_OP_MINIMUM: case LZ_OP_CLIP_COEF:
        return 1;
    default:
        return 0;
    }
}

const char *lz_op_name(lz_op op)
{
    static const char *const names[LZ_OP_COUNT] = {
        [LZ_OP_LEAF] = "leaf", [LZ_OP_FILL] = "fill",
        [LZ_OP_NEG] = "neg", [LZ_OP_EXP] = "exp", [LZ_OP_LOG] = "log", [LZ_OP_SQRT] = "sqrt",
        [LZ_OP_RSQRT] = "rsqrt", [LZ_OP_TANH] = "tanh", [LZ_OP_SIGMOID] = "sigmoid",
        [LZ_OP_RELU] = "relu", [LZ_OP_GELU] = "gelu", [LZ_OP_POW] = "pow", [LZ_OP_SCALE] = "scale",
        [LZ_OP_CAST] = "cast", [LZ_OP_COPY] = "copy",
        [LZ_OP_ADD] = "add", [LZ_OP_SUB] = "sub", [LZ_OP_MUL] = "mul", [LZ_OP_DIV] = "div",
        [LZ_OP_MAXIMUM] = "maximum", [LZ_OP_GT] = "gt", [LZ_OP_LT] = "lt", [LZ_OP_GE] = "ge",
        [LZ_OP_LE] = "le", [LZ_OP_EQ] = "eq", [LZ_OP_WHERE] = "where",
        [LZ_OP_RELU_GRAD] = "relu_grad", [LZ_OP_GELU_GRAD] = "gelu_grad",
        [LZ_OP_SUM] = "sum", [LZ_OP_MEAN] = "mean", [LZ_OP_MAX] = "max",
        [LZ_OP_RESHAPE] = "reshape", [LZ_OP_PERMUTE] = "permute", [LZ_OP_EXPAND] = "expand",
        [LZ_OP_SLICE] = "slice", [LZ_OP_SLICE_GRAD] = "slice_grad", [LZ_OP_CAT] = "cat",
        [LZ_OP_MATMUL] = "matmul", [LZ_OP_SOFTMAX] = "softmax", [LZ_OP_LOG_SOFTMAX] = "log_softmax",
        [LZ_OP_SOFTMAX_GRAD] = "softmax_grad", [LZ_OP_LOG_SOFTMAX_GRAD] = "log_softmax_grad",
        [LZ_OP_CROSS_ENTROPY] = "cross_entropy", [LZ_OP_CROSS_ENTROPY_GRAD] = "cross_entropy_grad",
        [LZ_OP_HARDTANH] = "hardtanh", [LZ_OP_HARDTANH_GRAD] = "hardtanh_grad",
        [LZ_OP_LAYER_NORM] = "layer_norm", [LZ_OP_LAYER_NORM_GRAD] = "layer_norm_grad",
        [LZ_OP_EMBEDDING] = "embedding", [LZ_OP_EMBEDDING_GRAD] = "embedding_grad",
        [LZ_OP_DROPOUT_MASK] = "dropout_mask", [LZ_OP_RNG_ADVANCE] = "rng_advance",
        [LZ_OP_RAND] = "rand",
        [LZ_OP_CONV2D] = "conv2d", [LZ_OP_CONV2D_GRAD_INPUT] = "conv2d_grad_input",
        [LZ_OP_CONV2D_GRAD_WEIGHT] = "conv2d_grad_weight",
        [LZ_OP_MAX_POOL2D] = "max_pool2d", [LZ_OP_MAX_POOL2D_GRAD] = "max_pool2d_grad",
        [LZ_OP_AVG_POOL2D] = "avg_pool2d", [LZ_OP_AVG_POOL2D_GRAD] = "avg_pool2d_grad",
        [LZ_OP_ADAPTIVE_AVG_POOL2D] = "adaptive_avg_pool2d",
        [LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD] = "adaptive_avg_pool2d_grad",
        [LZ_OP_BATCH_NORM_STATS] = "batch_norm_stats", [LZ_OP_BATCH_NORM] = "batch_norm",
        [LZ_OP_BATCH_NORM_GRAD_STATS] = "batch_norm_grad_stats",
        [LZ_OP_BATCH_NORM_GRAD] = "batch_norm_grad",
        [LZ_OP_TEST_GATE] = "test_gate",
        [LZ_OP_ALLREDUCE_START] = "allreduce_start", [LZ_OP_ALLREDUCE_WAIT] = "allreduce_wait",
        [LZ_OP_FUSED_ELEMENTWISE] = "fused_elementwise",
        [LZ_OP_SILU] = "silu", [LZ_OP_SILU_GRAD] = "silu_grad", [LZ_OP_SIN] = "sin",
        [LZ_OP_COS] = "cos", [LZ_OP_NE] = "ne", [LZ_OP_MINIMUM] = "minimum",
        [LZ_OP_CLIP_COEF] = "clip_coef", [LZ_OP_CE_ROWS] = "ce_rows",
        [LZ_OP_CE_ROWS_GRAD] = "ce_rows_grad", [LZ_OP_CE_ROW_WEIGHT] = "ce_row_weight",
        [LZ_OP_TRI_MASK] = "tri_mask", [LZ_OP_CUMSUM] = "cumsum", [LZ_OP_GATHER] = "gather",
        [LZ_OP_SCATTER_ADD] = "scatter_add", [LZ_OP_ARGMAX] = "argmax",
    };
    return op < LZ_OP_COUNT && names[op] ? names[op] : "unknown";
}
