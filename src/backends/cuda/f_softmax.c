/* softmax, log_softmax, their gradients and cross-entropy
 * (kernels/k_softmax.cu). */
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

/* rows longer than this get a block each rather than a warp */
#define WARP_ROW_MAX 2048

static int softmax(lz_cu_planner *pl, const lz_instr *s, int kind)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vo = &p->values[s->out];
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return lz_cu_fail(pl, "float32 operands only");
    int axis = (int)s->iattr[0];
    if (vo->ndim == 0) axis = 0;
    lz_cu_softmax_args a = {.outer = 1, .inner = 1, .n = vo->ndim ? vo->shape[axis] : 1, .kind = kind};
    for (int d = 0; d < axis; d++) a.outer *= vo->shape[d];
    for (int d = axis + 1; d < vo->ndim; d++) a.inner *= vo->shape[d];
    if (!vo->numel) return 0;
    lz_cu_launch *l;
    if (a.inner > 1)
        l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_softmax_cols", a.outer * a.inner, LZ_CU_BLOCK, &a, sizeof a);
    else if (a.n <= WARP_ROW_MAX)
        l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_softmax_warp", a.outer * 32, LZ_CU_BLOCK, &a, sizeof a);
    else
        l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_softmax_block", a.outer * 1024, 1024, &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_softmax_args, x), s->in[0], 0) ||
        lz_cu_patch(pl, l, offsetof(lz_cu_softmax_args, y), s->out, 0))
        return -1;
    return s->n_in > 1 ? lz_cu_patch(pl, l, offsetof(lz_cu_softmax_args, g), s->in[1], 0) : 0;
}

static int cross_entropy(lz_cu_planner *pl, const lz_instr *s, int grad)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vl = &p->values[s->in[0]], *vt = &p->values[s->in[1]];
    if (vl->dtype != LZ_F32 || vl->ndim != 2) return lz_cu_fail(pl, "float32 logits [N, C] only");
    if (vt->dtype != LZ_I64 && vt->dtype != LZ_I32) return lz_cu_fail(pl, "integer targets only");
    lz_cu_xent_args a = {.n = vl->shape[0], .c = vl->shape[1], .is64 = vt->dtype == LZ_I64};
    const size_t at_x = offsetof(lz_cu_xent_args, x), at_t = offsetof(lz_cu_xent_args, target);
    const size_t at_out = offsetof(lz_cu_xent_args, out), at_st = offsetof(lz_cu_xent_args, status);
    if (grad) {
        if (!a.n) return 0;
        lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_xent_grad", a.n * 32, LZ_CU_BLOCK, &a, sizeof a);
        if (!l || lz_cu_patch(pl, l, at_x, s->in[0], 0) || lz_cu_patch(pl, l, at_t, s->in[1], 0) ||
            lz_cu_patch(pl, l, offsetof(lz_cu_xent_args, g), s->in[2], 0) || lz_cu_patch(pl, l, at_out, s->out, 0))
            return -1;
        return lz_cu_patch(pl, l, at_st, LZ_CU_REF_STATUS, 0);
    }
    /* the rows' losses in scratch, then their mean (NaN for no rows, as 0/0) */
    const int64_t rows = lz_cu_take_scratch(pl, sizeof(double) * (size_t)(a.n ? a.n : 1));
    if (a.n) {
        lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_xent_rows", a.n * 32, LZ_CU_BLOCK, &a, sizeof a);
        if (!l || lz_cu_patch(pl, l, at_x, s->in[0], 0) || lz_cu_patch(pl, l, at_t, s->in[1], 0) ||
            lz_cu_patch(pl, l, at_out, LZ_CU_REF_SCRATCH, rows) || lz_cu_patch(pl, l, at_st, LZ_CU_REF_STATUS, 0))
            return -1;
    }
    lz_cu_launch *m = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, "lz_xent_mean", 1024, 1024, &a, sizeof a);
    if (!m || lz_cu_patch(pl, m, at_out, LZ_CU_REF_SCRATCH, rows)) return -1;
    return lz_cu_patch(pl, m, offsetof(lz_cu_xent_args, loss), s->out, 0);
}

/* cross-entropy with torch's options: CE_ROWS (logits, target[, weight]),
   CE_ROWS_GRAD (logits, target, g[, weight]), CE_ROW_WEIGHT (target[,
   weight]); iattr[0] ignore_index, [1] uses it, [2] has a weight, [3] the
   classes (CE_ROW_WEIGHT); fattr[0] label smoothing */
static int cross_entropy_ex(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const int weight_only = s->op == LZ_OP_CE_ROW_WEIGHT, first = weight_only ? 0 : 1;
    const lz_value *vt = &p->values[s->in[first]];
    if (vt->dtype != LZ_I64 && vt->dtype != LZ_I32) return lz_cu_fail(pl, "integer targets only");
    lz_cu_ce_args a = {.n = vt->numel, .ignore = s->iattr[0], .use_ignore = (int)s->iattr[1],
                       .eps = s->fattr[0], .is64 = vt->dtype == LZ_I64};
    if (!weight_only) {
        const lz_value *vl = &p->values[s->in[0]];
        if (vl->dtype != LZ_F32 || vl->ndim != 2) return lz_cu_fail(pl, "float32 logits [N, C] only");
        a.c = vl->shape[1];
    }
    a.classes = weight_only ? s->iattr[3] : a.c;
    const int has_w = s->iattr[2] != 0;
    const int w_at = s->op == LZ_OP_CE_ROWS ? 2 : s->op == LZ_OP_CE_ROWS_GRAD ? 3 : 1;
    if (!a.n) return 0;
    const char *kernel = s->op == LZ_OP_CE_ROWS ? "lz_ce_rows" : s->op == LZ_OP_CE_ROWS_GRAD ? "lz_ce_rows_grad"
                                                                                          : "lz_ce_row_weight";
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_SOFTMAX, kernel, weight_only ? a.n : a.n * 32, LZ_CU_BLOCK,
                                       &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, target), s->in[first], 0) ||
        lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, y), s->out, 0) ||
        lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, status), LZ_CU_REF_STATUS, 0) ||
        (!weight_only && lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, x), s->in[0], 0)) ||
        (s->op == LZ_OP_CE_ROWS_GRAD && lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, g), s->in[2], 0)))
        return -1;
    return has_w ? lz_cu_patch(pl, l, offsetof(lz_cu_ce_args, w), s->in[w_at], 0) : 0;
}

int lz_cu_plan_softmax(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    switch ((lz_op)s->op) {
    case LZ_OP_SOFTMAX: *rc = softmax(pl, s, LZ_CU_SOFTMAX); return 1;
    case LZ_OP_LOG_SOFTMAX: *rc = softmax(pl, s, LZ_CU_LOG_SOFTMAX); return 1;
    case LZ_OP_SOFTMAX_GRAD: *rc = softmax(pl, s, LZ_CU_SOFTMAX_GRAD); return 1;
    case LZ_OP_LOG_SOFTMAX_GRAD: *rc = softmax(pl, s, LZ_CU_LOG_SOFTMAX_GRAD); return 1;
    case LZ_OP_CROSS_ENTROPY: *rc = cross_entropy(pl, s, 0); return 1;
    case LZ_OP_CROSS_ENTROPY_GRAD: *rc = cross_entropy(pl, s, 1); return 1;
    case LZ_OP_CE_ROWS:
    case LZ_OP_CE_ROWS_GRAD:
    case LZ_OP_CE_ROW_WEIGHT: *rc = cross_entropy_ex(pl, s); return 1;
    default: return 0;
    }
}
