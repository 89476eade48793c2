/* lz_all_finite: sum(x - x) is 0 when every element is finite and NaN
 * otherwise (Inf - Inf and NaN - NaN are NaN), and a NaN is the one value
 * not equal to itself. Built from existing ops, so it fuses with the
 * graph that computes x and needs no kernel of its own, and no constant
 * (inside a captured step it bakes no host value). */
#include "base/error.h"
#include "ops/ops_util.h"

lz_tensor *lz_all_finite(lz_tensor *x)
{
    if (!x) return lz_errorf("lz_all_finite: x is NULL");
    lz_no_grad_begin();
    lz_scope_begin();
    if (lz_t_dtype(x) == LZ_BF16) x = lz_cast(x, LZ_F32);   /* exact: bf16 is f32's top half */
    lz_tensor *s = x ? lz_sum(lz_sub(x, x)) : NULL;
    lz_tensor *r = s ? lz_eq(s, s) : NULL;
    if (r) lz_keep(r);
    lz_scope_end();
    lz_no_grad_end();
    return r;
}
