/* Row functions of the element-wise ops added for models from PyTorch:
 * silu and its gradient (Llama's and EfficientNet's activation), sin and
 * cos (rotary position embeddings), ne, minimum, and clip_coef (the
 * coefficient of gradient clipping). k_elementwise.c's driver and the
 * fused kernel run them like its own rows, so they fuse into chains. */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_templates.h"
#include "backends/cpu/vec_math.h"

/* torch computes silu as x / (1 + exp(-x)) and its gradient as
   g * s * (1 + x * (1 - s)) with s = sigmoid(x) */
static inline float silu_1(float x) { return x / (1.0f + vexp_f32(-x)); }
static inline float silu_grad_1(float x, float g)
{
    float s = 1.0f / (1.0f + vexp_f32(-x));
    return g * s * (1.0f + x * (1.0f - s));
}

LZ_MATH_CLONES ROW1(silu_f32, float, float, silu_1(x))
LZ_MATH_CLONES ROW2(silu_grad_f32, float, float, silu_grad_1(a, b))
ROW1(sin_f32, float, float, sinf(x))
ROW1(cos_f32, float, float, cosf(x))
/* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped at 1; a NaN
   norm gives a NaN coefficient, as torch's does */
ROW1(clip_coef_f32, float, float, x != x ? x : fminf(fa[0] / (x + 1e-6f), 1.0f))

ROW2(ne_f32, float, float, a != b)
ROW2(ne_i64, float, int64_t, a != b)
ROW2(ne_i32, float, int32_t, a != b)
/* NaN in either operand wins, as in torch.minimum (a != a tests for NaN) */
ROW2(minimum_f32, float, float, (a != a || a < b) ? a : b)
ROW2(minimum_i64, int64_t, int64_t, a < b ? a : b)
ROW2(minimum_i32, int32_t, int32_t, a < b ? a : b)

lz_cpu_row_fn lz_cpu_elementwise_ext_row(int op, int ti)
{
    if (ti != LZ_F32 && ti != LZ_I64 && ti != LZ_I32) return NULL;
    const int f32 = ti == LZ_F32;
    switch ((lz_op)op) {
    case LZ_OP_SILU: return f32 ? silu_f32 : NULL;
    case LZ_OP_SILU_GRAD: return f32 ? silu_grad_f32 : NULL;
    case LZ_OP_SIN: return f32 ? sin_f32 : NULL;
    case LZ_OP_COS: return f32 ? cos_f32 : NULL;
    case LZ_OP_CLIP_COEF: return f32 ? clip_coef_f32 : NULL;
    case LZ_OP_NE: return f32 ? ne_f32 : ti == LZ_I64 ? ne_i64 : ne_i32;
    case LZ_OP_MINIMUM: return f32 ? minimum_f32 : ti == LZ_I64 ? minimum_i64 : minimum_i32;
    default: return NULL;
    }
}
