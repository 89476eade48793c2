/* Cross-entropy with torch's options: ignore_index (HF's -100 padding),
 * class weights, label smoothing and the reduction. One fused op computes
 * each row's loss (and one its gradient); a mean divides their sum by the
 * rows' summed weight, as torch's nll_loss does, so a batch whose targets
 * are all ignored gives 0/0 = NaN like torch. */
#include <math.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

static int rows_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    lz_tensor *logits = ag->in[0];
    if (!lz_needs_grad(logits)) return 0;
    lz_tensor *in[4] = {logits, ag->in[1], g, ag->attrs.iattr[2] ? ag->in[2] : NULL};
    gin[0] = lz_record(LZ_OP_CE_ROWS_GRAD, LZ_F32, 2, lz_t_shape(logits), in[3] ? 4 : 3, in, &ag->attrs);
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_cross_entropy_ex(lz_tensor *logits, lz_tensor *target, const lz_cross_entropy_opts *opts)
{
    static const lz_cross_entropy_opts plain = {0};
    if (!opts) opts = &plain;
    lz_tensor *in[3] = {logits, target, opts->weight};
    if (lz_check_operands("lz_cross_entropy_ex", 2, in)) return NULL;
    if (!lz_require_f32("lz_cross_entropy_ex", logits)) return NULL;
    char sa[96], sb[96];
    const int64_t *sl = lz_t_shape(logits), *st = lz_t_shape(target);
    if (lz_t_ndim(logits) != 2)
        return lz_errorf("lz_cross_entropy_ex: logits must be [N, C], got %s",
                         lz_shape_str(sa, lz_t_ndim(logits), sl));
    if (lz_t_dtype(target) != LZ_I64 && lz_t_dtype(target) != LZ_I32)
        return lz_errorf("lz_cross_entropy_ex: target dtype %s not supported (i64 or i32 class indices)",
                         lz_dtype_name(lz_t_dtype(target)));
    if (lz_t_ndim(target) != 1 || st[0] != sl[0])
        return lz_errorf("lz_cross_entropy_ex: logits %s need target [%lld], got %s",
                         lz_shape_str(sa, 2, sl), (long long)sl[0], lz_shape_str(sb, lz_t_ndim(target), st));
    if (sl[1] == 0) return lz_errorf("lz_cross_entropy_ex: logits %s have no classes", lz_shape_str(sa, 2, sl));
    if (opts->weight) {
        if (!lz_require_f32("lz_cross_entropy_ex (weight)", opts->weight)) return NULL;
        if (lz_t_ndim(opts->weight) != 1 || lz_t_shape(opts->weight)[0] != sl[1])
            return lz_errorf("lz_cross_entropy_ex: weight %s must be [%lld], one per class",
                             lz_shape_str(sa, lz_t_ndim(opts->weight), lz_t_shape(opts->weight)),
                             (long long)sl[1]);
    }
    const float eps = opts->label_smoothing;
    if (!(eps >= 0.0f && eps <= 1.0f))
        return lz_errorf("lz_cross_entropy_ex: label_smoothing %g is not in [0, 1]", (double)eps);
    if (opts->reduction < LZ_REDUCTION_MEAN || opts->reduction > LZ_REDUCTION_NONE)
        return lz_errorf("lz_cross_entropy_ex: unknown reduction %d", (int)opts->reduction);

    const int has_w = opts->weight != NULL;
    lz_attrs a = {.n_iattr = 4,
                  .iattr = {opts->ignore_index, opts->use_ignore_index != 0, has_w, sl[1]},
                  .n_fattr = 1, .fattr = {eps}};
    lz_scope_begin();
    lz_tensor *rows = lz_record(LZ_OP_CE_ROWS, LZ_F32, 1, st, has_w ? 3 : 2, in, &a);
    /* the weight is a constant of the loss: no gradient goes to it */
    lz_ag_attach(rows, "lz_cross_entropy_ex", rows_backward, has_w ? 3 : 2, in, &a);
    lz_tensor *out = rows;
    if (opts->reduction != LZ_REDUCTION_NONE) out = lz_sum(rows);
    if (opts->reduction == LZ_REDUCTION_MEAN) {
        lz_tensor *win[2] = {target, opts->weight};
        lz_tensor *w = lz_record(LZ_OP_CE_ROW_WEIGHT, LZ_F32, 1, st, has_w ? 2 : 1, win, &a);
        out = lz_div(out, lz_sum(w));
    }
    lz_keep(out);
    lz_scope_end();
    return out;
}
