/* Casts between dtypes, and their backward rule: a cast back to float32,
 * so a cast needs nothing but itself. The reductions (reduce.c) and the
 * element-wise ops both use it. */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static int cast_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    /* gradients stay f32 (also those of bf16 values: autocast's products
       give f32), so a cast between f32 and bf16 passes g on as it is */
    gin[0] = lz_t_dtype(g) == LZ_F32 && ag->attrs.iattr[0] ? lz_same_value(g) : lz_cast(g, LZ_F32);
    return gin[0] ? 0 : -1;
}

static int is_float(lz_dtype d) { return d == LZ_F32 || d == LZ_BF16; }

lz_tensor *lz_cast_from(lz_tensor *x, lz_tensor *value)
{
    lz_tensor *t = lz_same_value(value);
    lz_attrs at = {.n_iattr = 1, .iattr = {lz_t_dtype(value) != lz_t_dtype(x)}};
    if (t) lz_ag_attach(t, "lz_cast", cast_backward, 1, &x, &at);
    return t;
}

lz_tensor *lz_cast(lz_tensor *x, lz_dtype dtype)
{
    if (lz_check_operands("lz_cast", 1, &x)) return NULL;
    if (dtype != LZ_F32 && dtype != LZ_I64 && dtype != LZ_I32 && dtype != LZ_BF16)
        return lz_errorf("lz_cast: unknown dtype %d", (int)dtype);
    lz_dtype from = lz_t_dtype(x);
    if ((dtype == LZ_BF16 && from != LZ_F32 && from != LZ_BF16) ||
        (from == LZ_BF16 && dtype != LZ_F32 && dtype != LZ_BF16))
        return lz_errorf("lz_cast: %s to %s not supported (bf16 casts to and from f32 only)",
                         lz_dtype_name(from), lz_dtype_name(dtype));
    /* a new node even for the same dtype: the result is a distinct tensor
       that lz_assign may overwrite without touching x */
    lz_tensor *t = lz_record(LZ_OP_CAST, dtype, lz_t_ndim(x), lz_t_shape(x), 1, &x, NULL);
    /* a gradient only flows between float tensors */
    lz_attrs at = {.n_iattr = 1, .iattr = {dtype != from}};
    if (is_float(dtype) && is_float(from))
        lz_ag_attach(t, "lz_cast", cast_backward, 1, &x, &at);
    return t;
}
