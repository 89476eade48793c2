/* Element-wise ops added for models from PyTorch: silu (Llama,
 * EfficientNet), sin and cos (rotary position embeddings), ne and minimum.
 * Each is one element-wise op (so the compiler fuses it into chains) with
 * its gradient recorded from other ops. */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static lz_tensor *unary(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    if (!lz_require_f32(name, x)) return NULL;
    lz_tensor *t = lz_record(op, LZ_F32, lz_t_ndim(x), lz_t_shape(x), 1, &x, NULL);
    lz_ag_attach(t, name, bw, 1, &x, NULL);
    return t;
}

static int silu_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return lz_grad_of_x_g(LZ_OP_SILU_GRAD, ag, g, gin, NULL);
}

static int sin_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_mul(g, lz_cos(ag->in[0]));
    return gin[0] ? 0 : -1;
}

static int cos_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    gin[0] = lz_neg(lz_mul(g, lz_sin(ag->in[0])));
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_silu(lz_tensor *x) { return unary("lz_silu", LZ_OP_SILU, silu_backward, x); }
lz_tensor *lz_sin(lz_tensor *x) { return unary("lz_sin", LZ_OP_SIN, sin_backward, x); }
lz_tensor *lz_cos(lz_tensor *x) { return unary("lz_cos", LZ_OP_COS, cos_backward, x); }

/* Two operands of one dtype broadcast; shape into nd/shape. 0 or -1. */
static int binary_shape(const char *name, lz_tensor *a, lz_tensor *b, int floats_only, int *nd,
                        int64_t *shape)
{
    lz_tensor *in[2] = {a, b};
    if (lz_check_operands(name, 2, in)) return -1;
    lz_dtype da = lz_t_dtype(a), db = lz_t_dtype(b);
    if (da != db)
        return lz_errorf_int("%s: dtypes %s and %s differ (convert one with lz_cast)", name,
                             lz_dtype_name(da), lz_dtype_name(db));
    if (da == LZ_BF16 || (floats_only && da != LZ_F32))
        return lz_errorf_int("%s: dtype %s not supported", name, lz_dtype_name(da));
    return lz_broadcast_shape(name, lz_t_ndim(a), lz_t_shape(a), lz_t_ndim(b), lz_t_shape(b), nd, shape);
}

lz_tensor *lz_ne(lz_tensor *a, lz_tensor *b)
{
    int nd;
    int64_t shape[LZ_MAX_DIMS];
    if (binary_shape("lz_ne", a, b, 0, &nd, shape)) return NULL;
    lz_tensor *in[2] = {a, b};
    return lz_record(LZ_OP_NE, LZ_F32, nd, shape, 2, in, NULL);
}

/* torch.minimum's gradient: 1 where a < b, 1/2 on ties, 0 above, i.e.
   (le + lt) / 2 for a and (ge + gt) / 2 for b */
static int minimum_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *a = ag->in[0], *b = ag->in[1];
    for (int i = 0; i < 2; i++) {
        if (!lz_needs_grad(ag->in[i])) continue;
        lz_tensor *m = i == 0 ? lz_scale(lz_add(lz_le(a, b), lz_lt(a, b)), 0.5f)
                              : lz_scale(lz_add(lz_ge(a, b), lz_gt(a, b)), 0.5f);
        lz_tensor *gi = lz_mul(g, m);
        gin[i] = gi ? lz_reduce_to_like(gi, ag->in[i]) : NULL;
        if (!gin[i]) return -1;
    }
    return 0;
}

lz_tensor *lz_minimum(lz_tensor *a, lz_tensor *b)
{
    int nd;
    int64_t shape[LZ_MAX_DIMS];
    if (binary_shape("lz_minimum", a, b, 0, &nd, shape)) return NULL;
    lz_tensor *in[2] = {a, b};
    lz_tensor *t = lz_record(LZ_OP_MINIMUM, lz_t_dtype(a), nd, shape, 2, in, NULL);
    if (lz_t_dtype(a) == LZ_F32) lz_ag_attach(t, "lz_minimum", minimum_backward, 2, in, NULL);
    return t;
}
