/* CPU kernels for element-wise ops (unary, binary with broadcasting, where,
 * cast, and the relu/gelu gradient ops).
 *
 * One driver serves them all: it folds the output shape and each input's
 * broadcast strides into as few dimensions as possible, then cuts the work
 * into rows along the last folded dimension. A "row function" per op and
 * dtype handles one row; it has separate loops for contiguous operands and
 * for a broadcast scalar operand, which the compiler vectorises, and a
 * strided loop for everything else. Same-shape operands fold to a single
 * contiguous row, so that common case needs no index arithmetic.
 */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/activation.h"
#include "base/bf16.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/row_templates.h"
#include "backends/cpu/vec_math.h"

/* below this many elements OpenMP's fork costs more than it saves */
#define PAR_MIN 32768
/* rows are cut into pieces of at most this many elements so that a long
   row (the same-shape case) still spreads over threads */
#define CHUNK 8192
#define MAX_IN 3

typedef lz_cpu_row_fn row_fn;

static const char *run_rows(const lz_program *p, const lz_instr *s, void *const *ptrs, row_fn row)
{
    const lz_value *ov = &p->values[s->out];
    int n_in = s->n_in;
    if (n_in < 1 || n_in > MAX_IN) return "elementwise kernel: bad operand count";
    if (ov->numel == 0) return NULL;

    int64_t full[MAX_IN][LZ_MAX_DIMS + 1], st[MAX_IN][LZ_MAX_DIMS + 1], shp[LZ_MAX_DIMS + 1];
    int64_t axes[LZ_MAX_DIMS + 1];   /* of the output's element order, plain or blocked */
    const char *base[MAX_IN];
    size_t isz[MAX_IN];
    int n_axes = 0;
    for (int k = 0; k < n_in; k++) {
        const lz_value *iv = &p->values[s->in[k]];
        n_axes = lz_order_strides(iv, ov, axes, full[k]);
        base[k] = ptrs[s->in[k]];
        isz[k] = lz_dtype_size((lz_dtype)iv->dtype);
    }
    /* fold: drop size-1 dims; merge a dim into the previous one when every
       operand walks both as one (stride_prev == stride * size) */
    int nd = 0;
    for (int d = 0; d < n_axes; d++) {
        int64_t n = axes[d];
        if (n == 1) continue;
        int merge = nd > 0;
        for (int k = 0; k < n_in && merge; k++) merge = st[k][nd - 1] == full[k][d] * n;
        if (merge) {
            shp[nd - 1] *= n;
            for (int k = 0; k < n_in; k++) st[k][nd - 1] = full[k][d];
        } else {
            shp[nd] = n;
            for (int k = 0; k < n_in; k++) st[k][nd] = full[k][d];
            nd++;
        }
    }
    if (nd == 0) {
        shp[0] = 1;
        for (int k = 0; k < n_in; k++) st[k][0] = 0;
        nd = 1;
    }
    int64_t inner = shp[nd - 1], rows = ov->numel / inner;
    int64_t nchunks = (inner + CHUNK - 1) / CHUNK, items = rows * nchunks;
    int64_t ist[MAX_IN];
    for (int k = 0; k < n_in; k++) ist[k] = st[k][nd - 1];
    char *out = ptrs[s->out];
    size_t osz = lz_dtype_size((lz_dtype)ov->dtype);

    LZ_PAR_FOR(ov->numel > PAR_MIN && items > 1, it, items, {
        int64_t r = it / nchunks, c0 = (it % nchunks) * CHUNK;
        int64_t len = inner - c0 < CHUNK ? inner - c0 : CHUNK;
        const void *src[MAX_IN];
        for (int k = 0; k < n_in; k++) {
            int64_t off = c0 * ist[k], rem = r;
            for (int d = nd - 2; d >= 0; d--) {
                off += rem % shp[d] * st[k][d];
                rem /= shp[d];
            }
            src[k] = base[k] + (size_t)off * isz[k];
        }
        row(out + (size_t)(r * inner + c0) * osz, src, ist, len, s->fattr);
    });
    return NULL;
}

/* ---- row functions -------------------------------------------------------- */

/* where only moves bits, so values are read as unsigned words of their size */
#define ROW_WHERE(name, TC, TV)                                                           \
    static void name(void *o_, const void *const *in, const int64_t *st, int64_t n,      \
                     const float *fa)                                                     \
    {                                                                                     \
        TV *o = o_;                                                              \
        const TC *pc = in[0];                                                    \
        const TV *pa = in[1], *pb = in[2];                              \
        (void)fa;                                                                         \
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {                                     \
            for (int64_t i = 0; i < n; i++) o[i] = pc[i] != 0 ? pa[i] : pb[i];            \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++)                                               \
                o[i] = pc[i * st[0]] != 0 ? pa[i * st[1]] : pb[i * st[2]];                \
        }                                                                                 \
    }

#define SQRT1_2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* gelu and its gradient are hot in transformer training, and libm's erff
   and expf are calls that keep these loops scalar. The helpers below are
   branch-free so that the loops vectorise. Phi is built from erfc beyond
   the small-argument range, so that its left tail keeps its relative
   accuracy instead of cancelling in 1 + erf. */

/* exp(-x*x/2), NaN for NaN */
static inline float gauss_f32(float x)
{
    /* x*x rounded would cost up to x*x/2 * 2^-24 of absolute error in the
       exponent, so x = xh + xl with xh holding 12 bits: -xh*xh/2 is exact
       and the small rest, -xl*(x+xh)/2, joins the reduced argument */
    float xh = f32_from_bits(f32_bits(x) & 0xfffff000u);
    float xl = x - xh;
    float yh = -0.5f * xh * xh, yl = -0.5f * xl * (x + xh);
    return vexp_f32_2(yh, yl);
}

/* Phi(x), the standard normal cdf, given e = exp(-x*x/2) */
static inline float norm_cdf_f32(float x, float e)
{
    float z = fabsf(x) * SQRT1_2;
    /* |z| < 0.75: erf(z) = z P(z^2) */
    float z2 = z * z;
    float erf_small =
        z * (1.128379165e+00f +
             z2 * (-3.761261876e-01f +
                   z2 * (1.128337660e-01f +
                         z2 * (-2.683462571e-02f + z2 * (5.114347503e-03f + z2 * -6.749525373e-04f)))));
    float phi_small = 0.5f + 0.5f * select_f32(x < 0, -erf_small, erf_small);
    /* beyond: erfc(z) = exp(-z^2) t Q(t), t = 1 / (z + 2); z is capped where
       exp(-z^2) has long underflowed, so Q stays finite for infinite x */
    float zc = select_f32(z < 10.0f, z, 10.0f);
    float t = 1.0f / (zc + 2.0f);
    float erfc_big =
        e * t *
        (5.641602330e-01f +
         t * (1.129942525e+00f +
              t * (1.939000051e+00f +
                   t * (3.276926205e+00f +
                        t * (-8.999363954e-01f +
                             t * (1.737263405e+01f +
                                  t * (-6.003961479e+01f +
                                       t * (6.825922255e+01f + t * -2.692354345e+01f))))))));
    float phi_big = select_f32(x < 0, 0.5f * erfc_big, 1.0f - 0.5f * erfc_big);
    return select_f32(z < 0.75f, phi_small, phi_big);
}

static inline float gelu_f32_1(float x)
{
    return x * norm_cdf_f32(x, gauss_f32(x));
}

/* gelu'(x) = Phi(x) + x phi(x) */
static inline float gelu_grad_f32_1(float x)
{
    float e = gauss_f32(x);
    return norm_cdf_f32(x, e) + x * INV_SQRT_2PI * e;
}

ROW1(neg_f32, float, float, -x)
/* Integer arithmetic wraps around, as in torch; signed overflow in C is
   undefined, so it is done on unsigned words. */
ROW1(neg_i64, int64_t, int64_t, 0 - (uint64_t)x)
ROW1(neg_i32, int32_t, int32_t, 0 - (uint32_t)x)
LZ_MATH_CLONES ROW1(exp_f32, float, float, vexp_f32(x))
ROW1(log_f32, float, float, logf(x))
ROW1(sqrt_f32, float, float, sqrtf(x))
ROW1(rsqrt_f32, float, float, 1.0f / sqrtf(x))
ROW1(tanh_f32, float, float, tanhf(x))
LZ_MATH_CLONES ROW1(sigmoid_f32, float, float, 1.0f / (1.0f + vexp_f32(-x)))
ROW1(relu_f32, float, float, relu_1(x))
LZ_MATH_CLONES ROW1(gelu_f32, float, float, gelu_f32_1(x))
ROW1(scale_f32, float, float, x * fa[0])
ROW1(pow_f32, float, float, powf(x, fa[0]))
ROW1(pow2_f32, float, float, x * x)
ROW1(pow3_f32, float, float, x * x * x)
ROW1(powhalf_f32, float, float, sqrtf(x))
ROW1(powm1_f32, float, float, 1.0f / x)
/* torch computes these exponents as 1/sqrt and 1/(x*x) too, so -0.0 gives
   its -inf (powf(-0.0, -0.5) is +inf) */
ROW1(powmhalf_f32, float, float, 1.0f / sqrtf(x))
ROW1(powm2_f32, float, float, 1.0f / (x * x))
ROW1(pow1_f32, float, float, x)
ROW1(pow0_f32, float, float, ((void)x, 1.0f))

ROW1(cast_f32_f32, float, float, x)
/* NaN and out-of-range values give the minimum, as x86's conversion (so
   torch there) does; converting them in C is undefined. */
ROW1(cast_f32_i64, int64_t, float, x >= -0x1p63f && x < 0x1p63f ? (int64_t)x : INT64_MIN)
ROW1(cast_f32_i32, int32_t, float, x >= -0x1p31f && x < 0x1p31f ? (int32_t)x : INT32_MIN)
ROW1(cast_i64_f32, float, int64_t, x)
ROW1(cast_i64_i64, int64_t, int64_t, x)
ROW1(cast_i64_i32, int32_t, int64_t, x)
ROW1(cast_i32_f32, float, int32_t, x)
ROW1(cast_i32_i64, int64_t, int32_t, x)
ROW1(cast_i32_i32, int32_t, int32_t, x)
/* bf16: only to and from f32 (what autocast and lz_cast need); the
   rounding is base/bf16.h's */
ROW1(cast_f32_bf16, uint16_t, float, lz_f32_to_bf16(x))
ROW1(cast_bf16_f32, float, uint16_t, lz_bf16_to_f32(x))
ROW1(cast_bf16_bf16, uint16_t, uint16_t, x)

#define BIN_ALL(op, EXPR)                                                                 \
    ROW2(op##_f32, float, float, EXPR)                                                    \
    ROW2(op##_i64, int64_t, int64_t, EXPR)                                                \
    ROW2(op##_i32, int32_t, int32_t, EXPR)
#define CMP_ALL(op, EXPR)                                                                 \
    ROW2(op##_f32, float, float, EXPR)                                                    \
    ROW2(op##_i64, float, int64_t, EXPR)                                                  \
    ROW2(op##_i32, float, int32_t, EXPR)

#define BIN_WRAP(op, OP)                                                                  \
    ROW2(op##_f32, float, float, a OP b)                                                  \
    ROW2(op##_i64, int64_t, int64_t, (uint64_t)a OP (uint64_t)b)                          \
    ROW2(op##_i32, int32_t, int32_t, (uint32_t)a OP (uint32_t)b)

BIN_WRAP(add, +)
BIN_WRAP(sub, -)
BIN_WRAP(mul, *)
/* NaN in either operand wins, as in torch.maximum (a != a tests for NaN) */
BIN_ALL(maximum, (a != a || a > b) ? a : b)
CMP_ALL(gt, a > b)
CMP_ALL(lt, a < b)
CMP_ALL(ge, a >= b)
CMP_ALL(le, a <= b)
CMP_ALL(eq, a == b)
ROW2(div_f32, float, float, a / b)
ROW2(relu_grad_f32, float, float, relu_grad_1(a, b))
LZ_MATH_CLONES ROW2(gelu_grad_f32, float, float, b * gelu_grad_f32_1(a))

ROW_WHERE(where_f32_w4, float, uint32_t)
ROW_WHERE(where_f32_w8, float, uint64_t)
ROW_WHERE(where_i64_w4, int64_t, uint32_t)
ROW_WHERE(where_i64_w8, int64_t, uint64_t)
ROW_WHERE(where_i32_w4, int32_t, uint32_t)
ROW_WHERE(where_i32_w8, int32_t, uint64_t)

/* ---- dispatch ------------------------------------------------------------- */

/* tables are indexed by lz_dtype: F32, I64, I32 */
#define BY_DTYPE(op) {op##_f32, op##_i64, op##_i32}

static row_fn pow_row(float e)
{
    if (e == 2.0f) return pow2_f32;
    if (e == 3.0f) return pow3_f32;
    if (e == 0.5f) return powhalf_f32;
    if (e == 1.0f) return pow1_f32;
    if (e == -1.0f) return powm1_f32;
    if (e == -0.5f) return powmhalf_f32;
    if (e == -2.0f) return powm2_f32;
    if (e == 0.0f) return pow0_f32;
    return pow_f32;
}

static row_fn pick_row(const lz_program *p, const lz_instr *s)
{
    static const row_fn neg[3] = BY_DTYPE(neg), add[3] = BY_DTYPE(add), sub[3] = BY_DTYPE(sub),
                        mul[3] = BY_DTYPE(mul), maximum[3] = BY_DTYPE(maximum),
                        gt[3] = BY_DTYPE(gt), lt[3] = BY_DTYPE(lt), ge[3] = BY_DTYPE(ge),
                        le[3] = BY_DTYPE(le), eq[3] = BY_DTYPE(eq);
    static const row_fn cast[3][3] = {
        {cast_f32_f32, cast_f32_i64, cast_f32_i32},
        {cast_i64_f32, cast_i64_i64, cast_i64_i32},
        {cast_i32_f32, cast_i32_i64, cast_i32_i32},
    };
    static const row_fn where[3][2] = {
        {where_f32_w4, where_f32_w8}, {where_i64_w4, where_i64_w8}, {where_i32_w4, where_i32_w8},
    };
    int ti = p->values[s->in[0]].dtype, to = p->values[s->out].dtype;
    if (s->op == LZ_OP_CAST && (ti == LZ_BF16 || to == LZ_BF16))
        return ti == to ? cast_bf16_bf16 : ti == LZ_F32 ? cast_f32_bf16 : to == LZ_F32 ? cast_bf16_f32 : NULL;
    if (ti > LZ_I32 || to > LZ_I32) return NULL;
    int f32 = ti == LZ_F32;
    switch ((lz_op)s->op) {
    case LZ_OP_NEG: return neg[ti];
    case LZ_OP_EXP: return f32 ? exp_f32 : NULL;
    case LZ_OP_LOG: return f32 ? log_f32 : NULL;
    case LZ_OP_SQRT: return f32 ? sqrt_f32 : NULL;
    case LZ_OP_RSQRT: return f32 ? rsqrt_f32 : NULL;
    case LZ_OP_TANH: return f32 ? tanh_f32 : NULL;
    case LZ_OP_SIGMOID: return f32 ? sigmoid_f32 : NULL;
    case LZ_OP_RELU: return f32 ? relu_f32 : NULL;
    case LZ_OP_GELU: return f32 ? gelu_f32 : NULL;
    case LZ_OP_SCALE: return f32 ? scale_f32 : NULL;
    case LZ_OP_POW: return f32 ? pow_row(s->fattr[0]) : NULL;
    case LZ_OP_CAST: return cast[ti][to];
    case LZ_OP_ADD: return add[ti];
    case LZ_OP_SUB: return sub[ti];
    case LZ_OP_MUL: return mul[ti];
    case LZ_OP_DIV: return f32 ? div_f32 : NULL;
    case LZ_OP_MAXIMUM: return maximum[ti];
    case LZ_OP_GT: return gt[ti];
    case LZ_OP_LT: return lt[ti];
    case LZ_OP_GE: return ge[ti];
    case LZ_OP_LE: return le[ti];
    case LZ_OP_EQ: return eq[ti];
    case LZ_OP_RELU_GRAD: return f32 ? relu_grad_f32 : NULL;
    case LZ_OP_GELU_GRAD: return f32 ? gelu_grad_f32 : NULL;
    case LZ_OP_WHERE: return where[ti][lz_dtype_size((lz_dtype)to) == 8];
    default: return lz_cpu_elementwise_ext_row(s->op, ti);
    }
}

lz_cpu_row_fn lz_cpu_elementwise_row(const lz_program *p, const lz_instr *s)
{
    return pick_row(p, s);
}

static const char *k_elementwise(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    row_fn row = pick_row(p, s);
    if (!row) return "elementwise kernel: operand dtype not supported by this op";
    return run_rows(p, s, ptrs, row);
}

lz_kernel lz_cpu_elementwise_kernel(lz_op op)
{
    return lz_op_is_elementwise(op) ? k_elementwise : NULL;
}
