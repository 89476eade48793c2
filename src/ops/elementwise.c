/* Element-wise ops: shape and dtype inference and their backward rules.
 * Every rule records its gradient with other ops, so backward stays lazy
 * and lands in the same graph as the forward. */

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

/* ---- helpers ------------------------------------------------------------ */

static lz_tensor *record_unary(const char *name, lz_op op, lz_tensor *x, const lz_attrs *attrs,
                               lz_backward_fn bw)
{
    lz_tensor *t = lz_record(op, lz_t_dtype(x), lz_t_ndim(x), lz_t_shape(x), 1, &x, attrs);
    if (bw) lz_ag_attach(t, name, bw, 1, &x, attrs);
    return t;
}

static int scale_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_scale(g, ag->attrs.fattr[0]);
    return gin[0] ? 0 : -1;
}

/* A constant of the model (attention's 1/sqrt(d), a gradient's factor)
   as an op attribute: no host data for a capture to freeze, and another
   factor is another graph, as lz_pow's exponent. */
lz_tensor *lz_scale(lz_tensor *x, float factor)
{
    if (lz_check_operands("lz_scale", 1, &x)) return NULL;
    if (!lz_require_f32("lz_scale", x)) return NULL;
    lz_attrs a = {.n_fattr = 1, .fattr = {factor}};
    return record_unary("lz_scale", LZ_OP_SCALE, x, &a, scale_backward);
}

/* A constant 0 of t's shape: FILL, so no buffer is allocated for it. */
static lz_tensor *zeros_like(lz_tensor *t)
{
    lz_attrs a = {.n_fattr = 1, .fattr = {0.0f}};
    return lz_record(LZ_OP_FILL, lz_t_dtype(t), lz_t_ndim(t), lz_t_shape(t), 0, NULL, &a);
}

/* Stores g reduced to like's shape in *slot; g NULL means a failed op. */
static int put_grad(lz_tensor **slot, lz_tensor *g, const lz_tensor *like)
{
    if (!g) return -1;
    *slot = lz_reduce_to_like(g, like);
    return *slot ? 0 : -1;
}

/* ---- binary ops --------------------------------------------------------- */

enum { INTS_OK = 1, COMPARE = 2 };

static lz_tensor *binary(const char *name, lz_op op, int flags, lz_backward_fn bw,
                         lz_tensor *a, lz_tensor *b)
{
    lz_tensor *in[2] = {a, b};
    if (lz_check_operands(name, 2, in)) return NULL;
    lz_dtype da = lz_t_dtype(a), db = lz_t_dtype(b);
    if (da != db)
        return lz_errorf("%s: dtypes %s and %s differ (convert one with lz_cast)", name,
                         lz_dtype_name(da), lz_dtype_name(db));
    if (da != LZ_F32 && !(flags & INTS_OK))
        return lz_errorf("%s: dtype %s not supported (f32 only)", name, lz_dtype_name(da));
    if (!lz_refuse_bf16(name, a)) return NULL;
    int nd;
    int64_t shape[LZ_MAX_DIMS];
    if (lz_broadcast_shape(name, lz_t_ndim(a), lz_t_shape(a), lz_t_ndim(b), lz_t_shape(b),
                           &nd, shape) != 0)
        return NULL;
    lz_tensor *t = lz_record(op, (flags & COMPARE) ? LZ_F32 : da, nd, shape, 2, in, NULL);
    /* integer results carry no gradient */
    if (bw && da == LZ_F32) lz_ag_attach(t, name, bw, 2, in, NULL);
    return t;
}

static int add_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    for (int i = 0; i < 2; i++)
        if (lz_needs_grad(ag->in[i]) && put_grad(&gin[i], g, ag->in[i])) return -1;
    return 0;
}

static int sub_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (lz_needs_grad(ag->in[0]) && put_grad(&gin[0], g, ag->in[0])) return -1;
    if (lz_needs_grad(ag->in[1]) && put_grad(&gin[1], lz_neg(g), ag->in[1])) return -1;
    return 0;
}

static int mul_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *a = ag->in[0], *b = ag->in[1];
    if (lz_needs_grad(a) && put_grad(&gin[0], lz_mul(g, b), a)) return -1;
    if (lz_needs_grad(b) && put_grad(&gin[1], lz_mul(g, a), b)) return -1;
    return 0;
}

/* d(a/b)/db = -a/b^2 = -out/b, which reuses the forward's output. */
static int div_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    lz_tensor *a = ag->in[0], *b = ag->in[1];
    if (lz_needs_grad(a) && put_grad(&gin[0], lz_div(g, b), a)) return -1;
    if (lz_needs_grad(b) && put_grad(&gin[1], lz_neg(lz_div(lz_mul(g, out), b)), b)) return -1;
    return 0;
}

/* Like torch.maximum: where a == b each side gets half the gradient. The
   mask for a is (ge + gt) / 2: 1 where a > b, 1/2 on ties, 0 below. */
static int maximum_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *a = ag->in[0], *b = ag->in[1];
    if (lz_needs_grad(a)) {
        lz_tensor *m = lz_scale(lz_add(lz_ge(a, b), lz_gt(a, b)), 0.5f);
        if (put_grad(&gin[0], lz_mul(g, m), a)) return -1;
    }
    if (lz_needs_grad(b)) {
        lz_tensor *m = lz_scale(lz_add(lz_le(a, b), lz_lt(a, b)), 0.5f);
        if (put_grad(&gin[1], lz_mul(g, m), b)) return -1;
    }
    return 0;
}

lz_tensor *lz_add(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_add", LZ_OP_ADD, INTS_OK, add_backward, a, b);
}
lz_tensor *lz_sub(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_sub", LZ_OP_SUB, INTS_OK, sub_backward, a, b);
}
lz_tensor *lz_mul(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_mul", LZ_OP_MUL, INTS_OK, mul_backward, a, b);
}
/* Integer division has two conventions (C truncates, torch floors): leave
   it out rather than pick one silently. */
lz_tensor *lz_div(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_div", LZ_OP_DIV, 0, div_backward, a, b);
}
lz_tensor *lz_maximum(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_maximum", LZ_OP_MAXIMUM, INTS_OK, maximum_backward, a, b);
}
lz_tensor *lz_gt(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_gt", LZ_OP_GT, INTS_OK | COMPARE, NULL, a, b);
}
lz_tensor *lz_lt(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_lt", LZ_OP_LT, INTS_OK | COMPARE, NULL, a, b);
}
lz_tensor *lz_ge(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_ge", LZ_OP_GE, INTS_OK | COMPARE, NULL, a, b);
}
lz_tensor *lz_le(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_le", LZ_OP_LE, INTS_OK | COMPARE, NULL, a, b);
}
lz_tensor *lz_eq(lz_tensor *a, lz_tensor *b)
{
    return binary("lz_eq", LZ_OP_EQ, INTS_OK | COMPARE, NULL, a, b);
}

/* ---- unary ops ---------------------------------------------------------- */

static lz_tensor *unary_f32(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    if (!lz_require_f32(name, x)) return NULL;
    return record_unary(name, op, x, NULL, bw);
}

static int neg_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_neg(g);
    return gin[0] ? 0 : -1;
}

static int exp_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_mul(g, out);
    return gin[0] ? 0 : -1;
}

static int log_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_div(g, ag->in[0]);
    return gin[0] ? 0 : -1;
}

/* d sqrt(x) = 1 / (2 sqrt(x)) = 0.5 / out */
static int sqrt_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_div(lz_scale(g, 0.5f), out);
    return gin[0] ? 0 : -1;
}

/* d x^(-1/2) = -0.5 x^(-3/2) = -0.5 out^3 */
static int rsqrt_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_scale(lz_mul(g, lz_mul(out, lz_mul(out, out))), -0.5f);
    return gin[0] ? 0 : -1;
}

/* d x^p = p x^(p-1); p is part of the op, so baking it adds no new key.
   As in PyTorch: p = 0 has gradient 0 everywhere (not 0 * x^-1, NaN at
   x = 0), and x^-0.5 is 1/sqrt(x), so -0.0 gives -inf as torch's does. */
static int pow_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    float p = ag->attrs.fattr[0];
    if (p == 0.0f) gin[0] = zeros_like(x);
    else gin[0] = lz_scale(lz_mul(g, p == 0.5f ? lz_rsqrt(x) : lz_pow(x, p - 1.0f)), p);
    return gin[0] ? 0 : -1;
}

/* d tanh = 1 - out^2, written g - g*out^2 so no constant 1 is needed. */
static int tanh_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_sub(g, lz_mul(g, lz_mul(out, out)));
    return gin[0] ? 0 : -1;
}

/* d sigmoid = out (1 - out) = out - out^2 */
static int sigmoid_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_mul(g, lz_sub(out, lz_mul(out, out)));
    return gin[0] ? 0 : -1;
}

/* (x, g) -> one fused step instead of a mask and a product. */
static int relu_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return lz_grad_of_x_g(LZ_OP_RELU_GRAD, ag, g, gin, NULL);
}

static int gelu_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return lz_grad_of_x_g(LZ_OP_GELU_GRAD, ag, g, gin, NULL);
}

lz_tensor *lz_neg(lz_tensor *x)
{
    if (lz_check_operands("lz_neg", 1, &x)) return NULL;
    if (!lz_refuse_bf16("lz_neg", x)) return NULL;
    return record_unary("lz_neg", LZ_OP_NEG, x, NULL,
                        lz_t_dtype(x) == LZ_F32 ? neg_backward : NULL);
}
lz_tensor *lz_exp(lz_tensor *x) { return unary_f32("lz_exp", LZ_OP_EXP, exp_backward, x); }
lz_tensor *lz_log(lz_tensor *x) { return unary_f32("lz_log", LZ_OP_LOG, log_backward, x); }
lz_tensor *lz_sqrt(lz_tensor *x) { return unary_f32("lz_sqrt", LZ_OP_SQRT, sqrt_backward, x); }
lz_tensor *lz_rsqrt(lz_tensor *x)
{
    return unary_f32("lz_rsqrt", LZ_OP_RSQRT, rsqrt_backward, x);
}
lz_tensor *lz_tanh(lz_tensor *x) { return unary_f32("lz_tanh", LZ_OP_TANH, tanh_backward, x); }
lz_tensor *lz_sigmoid(lz_tensor *x)
{
    return unary_f32("lz_sigmoid", LZ_OP_SIGMOID, sigmoid_backward, x);
}
lz_tensor *lz_relu(lz_tensor *x) { return unary_f32("lz_relu", LZ_OP_RELU, relu_backward, x); }
lz_tensor *lz_gelu(lz_tensor *x) { return unary_f32("lz_gelu", LZ_OP_GELU, gelu_backward, x); }

lz_tensor *lz_pow(lz_tensor *x, float exponent)
{
    if (lz_check_operands("lz_pow", 1, &x)) return NULL;
    if (!lz_require_f32("lz_pow", x)) return NULL;
    lz_attrs a = {.n_fattr = 1, .fattr = {exponent}};
    return record_unary("lz_pow", LZ_OP_POW, x, &a, pow_backward);
}

/* ---- where ---------------------------------------------------------------- */

static int where_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *c = ag->in[0];
    for (int i = 1; i < 3; i++) {
        if (!lz_needs_grad(ag->in[i])) continue;
        lz_tensor *z = zeros_like(g);
        lz_tensor *gi = i == 1 ? lz_where(c, g, z) : lz_where(c, z, g);
        if (put_grad(&gin[i], gi, ag->in[i])) return -1;
    }
    return 0;
}

lz_tensor *lz_where(lz_tensor *cond, lz_tensor *a, lz_tensor *b)
{
    lz_tensor *in[3] = {cond, a, b};
    if (lz_check_operands("lz_where", 3, in)) return NULL;
    if (!lz_refuse_bf16("lz_where", cond) || !lz_refuse_bf16("lz_where", a)) return NULL;
    lz_dtype da = lz_t_dtype(a), db = lz_t_dtype(b);
    if (da != db)
        return lz_errorf("lz_where: dtypes %s and %s of the two branches differ",
                         lz_dtype_name(da), lz_dtype_name(db));
    int nab, nd;
    int64_t sab[LZ_MAX_DIMS], shape[LZ_MAX_DIMS];
    if (lz_broadcast_shape("lz_where", lz_t_ndim(a), lz_t_shape(a), lz_t_ndim(b), lz_t_shape(b),
                           &nab, sab) != 0)
        return NULL;
    if (lz_broadcast_shape("lz_where", lz_t_ndim(cond), lz_t_shape(cond), nab, sab, &nd, shape))
        return NULL;
    lz_tensor *t = lz_record(LZ_OP_WHERE, da, nd, shape, 3, in, NULL);
    if (da == LZ_F32) lz_ag_attach(t, "lz_where", where_backward, 3, in, NULL);
    return t;
}
