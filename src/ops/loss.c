/* Cross-entropy over class logits: one fused op forward and one backward, so
 * the log-sum-exp never lands in memory as a [N, C] intermediate. Class
 * indices are data, so an out-of-range one is found by the kernel, which
 * fails the execution with a message instead of reading out of bounds. */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static int cross_entropy_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    lz_tensor *logits = ag->in[0];
    if (!lz_needs_grad(logits)) return 0;
    lz_tensor *in[3] = {logits, ag->in[1], gout};
    gin[0] = lz_record(LZ_OP_CROSS_ENTROPY_GRAD, LZ_F32, 2, lz_t_shape(logits), 3, in, NULL);
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_cross_entropy(lz_tensor *logits, lz_tensor *target)
{
    lz_tensor *in[2] = {logits, target};
    if (lz_check_operands("lz_cross_entropy", 2, in)) return NULL;
    if (!lz_require_f32("lz_cross_entropy", logits)) return NULL;
    char sa[96], sb[96];
    const int64_t *sl = lz_t_shape(logits), *st = lz_t_shape(target);
    if (lz_t_ndim(logits) != 2)
        return lz_errorf("lz_cross_entropy: logits must be [N, C], got %s",
                         lz_shape_str(sa, lz_t_ndim(logits), sl));
    if (lz_t_dtype(target) != LZ_I64 && lz_t_dtype(target) != LZ_I32)
        return lz_errorf("lz_cross_entropy: target dtype %s not supported (i64 or i32 class indices)",
                         lz_dtype_name(lz_t_dtype(target)));
    if (lz_t_ndim(target) != 1 || st[0] != sl[0])
        return lz_errorf("lz_cross_entropy: logits %s need target [%lld], got %s",
                         lz_shape_str(sa, 2, sl), (long long)sl[0],
                         lz_shape_str(sb, lz_t_ndim(target), st));
    if (sl[0] == 0 || sl[1] == 0)
        return lz_errorf("lz_cross_entropy: logits %s are empty", lz_shape_str(sa, 2, sl));
    const int64_t scalar_shape[1] = {1};     /* unused: the loss is 0-d */
    lz_tensor *t = lz_record(LZ_OP_CROSS_ENTROPY, LZ_F32, 0, scalar_shape, 2, in, NULL);
    lz_ag_attach(t, "lz_cross_entropy", cross_entropy_backward, 2, in, NULL);
    return t;
}
