/* Autocast's operand casts for the products (matmul, linear, conv2d and
 * so attention): inside a bf16 region they take bf16 operands and give
 * float32 (oneDNN accumulates in float32), unless the backend runs the
 * product's shape faster in float32 (lz_product_choice); every other op
 * keeps float32, as on PyTorch's CPU autocast lists. A parameter is cast once per region
 * (engine/autocast.c keeps the cast), so every use, and the backward
 * products, read the same bf16 copy; and once a parameter's optimizer
 * update has written that copy for the next step (lz_autocast_refresh),
 * the step reads it instead of casting: the same bits, without a pass over
 * the float32 parameter. */
#include "backend/backend.h"
#include "base/error.h"
#include "base/switches.h"
#include "engine/autocast.h"
#include "ops/ops_util.h"

int lz_require_float(const char *op, const lz_tensor *t)
{
    if (lz_t_dtype(t) == LZ_F32 || lz_t_dtype(t) == LZ_BF16) return 1;
    lz_errorf("%s: dtype %s not supported (f32 or bf16 only)", op, lz_dtype_name(lz_t_dtype(t)));
    return 0;
}

lz_dtype lz_product_dtype(const lz_tensor *a, const lz_tensor *b)
{
    if (lz_autocast_dtype() == LZ_BF16) return LZ_BF16;
    return lz_t_dtype(a) == LZ_BF16 || (b && lz_t_dtype(b) == LZ_BF16) ? LZ_BF16 : LZ_F32;
}

/* Keeping a product float32 is always allowed (more exact): where bf16
   is slower on this backend, autocast would only lose time. */
lz_dtype lz_product_choice(const lz_tensor *a, const lz_tensor *b, int op, int n,
                           const int64_t *dims)
{
    const lz_dtype pd = lz_product_dtype(a, b);
    if (pd != LZ_BF16 || lz_t_dtype(a) != LZ_F32 || (b && lz_t_dtype(b) != LZ_F32)) return pd;
    const int mode = lz_autocast_products();
    if (mode == LZ_PRODUCTS_F32) return LZ_F32;
    if (mode == LZ_PRODUCTS_BF16) return LZ_BF16;
    const lz_backend *be = lz_backend_current();
    return be && be->product_f32_faster && be->product_f32_faster(op, n, dims) ? LZ_F32 : LZ_BF16;
}

lz_tensor *lz_product_operand(lz_tensor *x, lz_dtype dt)
{
    if (!x) return NULL;
    if (lz_t_dtype(x) == dt) return lz_retain(x);
    lz_tensor *c = lz_autocast_cached(x);
    if (c) return lz_retain(c);
    const int param = dt == LZ_BF16 && lz_autocast_dtype() == LZ_BF16 && lz_autocast_cacheable(x);
    lz_tensor *copy = param ? lz_autocast_copy_for(x) : NULL;
    c = copy ? lz_cast_from(x, copy) : lz_cast(x, dt);
    /* the cache keeps the creation handle, the caller gets another */
    if (c && param && lz_autocast_cache_put(x, c) == 0) return lz_retain(c);
    return c;
}

int lz_autocast_refresh(lz_tensor *w)
{
    if (!lz_autocast_take_wanted(w)) {
        lz_autocast_copy_drop(w);
        return 0;
    }
    lz_no_grad_begin();
    lz_tensor *c = lz_cast(w, LZ_BF16);
    lz_no_grad_end();
    const int rc = c ? lz_autocast_copy_store(w, c) : -1;
    lz_free(c);
    return rc;
}
