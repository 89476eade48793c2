/* Max, average and adaptive-average pooling and their gradients
 * (kernels/k_pool.cu), with the window attributes the CPU's kernels read
 * (backends/cpu/pool_window.h: kernel h, w, stride h, w, padding h, w, ceil
 * mode, count_include_pad). */
#include <stddef.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

static int pool(lz_cu_planner *pl, const lz_instr *s, int kind, int grad)
{
    const lz_program *p = pl->plan->prog;
    /* the pooled input and output: a gradient's output is x's shape, and
       its incoming gradient the pooled output's (last input) */
    const lz_value *x = grad ? &p->values[s->out] : &p->values[s->in[0]];
    const lz_value *y = grad ? &p->values[s->in[s->n_in - 1]] : &p->values[s->out];
    if (x->ndim != 4 || y->ndim != 4) return lz_cu_fail(pl, "4-d NCHW operands only");
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return lz_cu_fail(pl, "float32 operands only");
    lz_cu_pool_args a = {.planes = x->shape[0] * x->shape[1], .H = x->shape[2], .W = x->shape[3],
                         .OH = y->shape[2], .OW = y->shape[3], .kind = kind};
    if (kind != LZ_CU_ADAPTIVE_POOL) {
        a.kh = s->iattr[0];
        a.kw = s->iattr[1];
        a.sh = s->iattr[2];
        a.sw = s->iattr[3];
        a.ph = s->iattr[4];
        a.pw = s->iattr[5];
        a.count_pad = s->iattr[7] != 0;
    }
    const int64_t outs = a.planes * a.OH * a.OW;
    if (grad && lz_cu_add_zero(pl, s->out, 0, p->values[s->out].nbytes)) return -1;
    if (!outs) return 0;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_POOL, grad ? "lz_pool_grad" : "lz_pool", outs, LZ_CU_BLOCK,
                                       &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_pool_args, y), s->out, 0)) return -1;
    if (!grad) return lz_cu_patch(pl, l, offsetof(lz_cu_pool_args, x), s->in[0], 0);
    if (lz_cu_patch(pl, l, offsetof(lz_cu_pool_args, g), s->in[s->n_in - 1], 0)) return -1;
    /* the max's gradient finds the window's max again in x */
    return kind == LZ_CU_MAX_POOL ? lz_cu_patch(pl, l, offsetof(lz_cu_pool_args, x), s->in[0], 0) : 0;
}

int lz_cu_plan_pool(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    switch ((lz_op)s->op) {
    case LZ_OP_MAX_POOL2D: *rc = pool(pl, s, LZ_CU_MAX_POOL, 0); return 1;
    case LZ_OP_MAX_POOL2D_GRAD: *rc = pool(pl, s, LZ_CU_MAX_POOL, 1); return 1;
    case LZ_OP_AVG_POOL2D: *rc = pool(pl, s, LZ_CU_AVG_POOL, 0); return 1;
    case LZ_OP_AVG_POOL2D_GRAD: *rc = pool(pl, s, LZ_CU_AVG_POOL, 1); return 1;
    case LZ_OP_ADAPTIVE_AVG_POOL2D: *rc = pool(pl, s, LZ_CU_ADAPTIVE_POOL, 0); return 1;
    case LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD: *rc = pool(pl, s, LZ_CU_ADAPTIVE_POOL, 1); return 1;
    default: return 0;
    }
}
