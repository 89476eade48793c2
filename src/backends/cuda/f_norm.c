/* Training batch norm (statistics, normalisation, and their gradients,
 * with the activation and the bf16 cast the compiler may fold into them)
 * and layer norm (kernels/k_norm.cu). Operands as the CPU's kernels take
 * them (backends/cpu/k_batch_norm.c, bn_act.h). */
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

/* blocks the statistics' first pass wants (2 per multiprocessor of an
   H100), and the fewest elements a block sums */
#define WANT_BLOCKS 512
#define MIN_CHUNK 4096

#define AT(member) offsetof(lz_cu_bn_args, member)

static void dims(const lz_value *x, lz_cu_bn_args *a)
{
    a->N = x->shape[0];
    a->C = x->shape[1];
    a->S = 1;
    for (int i = 2; i < x->ndim; i++) a->S *= x->shape[i];
}

/* the statistics' partial sums and their finish: forward (g < 0) or the
   gradient's */
static int stats(lz_cu_planner *pl, const lz_instr *s, lz_cu_bn_args *a, int g, int fw, int fb)
{
    const int64_t M = a->N * a->S;
    int64_t splits = (WANT_BLOCKS + a->C - 1) / (a->C ? a->C : 1), most = (M + MIN_CHUNK - 1) / MIN_CHUNK;
    if (splits > most) splits = most;
    if (splits < 1) splits = 1;
    a->chunk = M ? (M + splits - 1) / splits : 1;
    a->splits = (int)(M ? (M + a->chunk - 1) / a->chunk : 1);
    if (!a->C) return 0;
    const int64_t part = lz_cu_take_scratch(pl, sizeof(double) * 2 * (size_t)(a->splits * a->C));
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_NORM, "lz_bn_partial", a->C * a->splits * LZ_CU_BLOCK,
                                       LZ_CU_BLOCK, a, sizeof *a);
    if (!l || lz_cu_patch(pl, l, AT(x), s->in[0], 0) || lz_cu_patch(pl, l, AT(partial), LZ_CU_REF_SCRATCH, part))
        return -1;
    if (g >= 0) {   /* the gradient's: g, and the forward's statistics and folded parameters */
        if (lz_cu_patch(pl, l, AT(g), g, 0) || lz_cu_patch(pl, l, AT(stats), s->in[1], 0) ||
            lz_cu_patch(pl, l, AT(eps), s->in[2], 0) || (fw >= 0 && lz_cu_patch(pl, l, AT(fw), fw, 0)) ||
            (fb >= 0 && lz_cu_patch(pl, l, AT(fb), fb, 0)))
            return -1;
    }
    lz_cu_launch *f = lz_cu_add_launch(pl, LZ_CU_MOD_NORM, g >= 0 ? "lz_bn_grad_stats_finish" : "lz_bn_stats_finish",
                                       a->C, LZ_CU_BLOCK, a, sizeof *a);
    if (!f || lz_cu_patch(pl, f, AT(partial), LZ_CU_REF_SCRATCH, part) || lz_cu_patch(pl, f, AT(y), s->out, 0))
        return -1;
    if (g >= 0 && (lz_cu_patch(pl, f, AT(stats), s->in[1], 0) || lz_cu_patch(pl, f, AT(eps), s->in[2], 0)))
        return -1;
    return 0;
}

/* a gradient step's folded activation's forward weight and bias: its last
   inputs, iattr[3] and iattr[4] saying which are there (bn_act.h) */
static void folded(const lz_instr *s, int *fw, int *fb)
{
    const int has_w = s->iattr[3] != 0, has_b = s->iattr[4] != 0;
    *fw = s->iattr[2] && has_w ? s->in[s->n_in - has_w - has_b] : -1;
    *fb = s->iattr[2] && has_b ? s->in[s->n_in - 1] : -1;
}

static int batch_norm(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *x = &p->values[s->in[0]], *y = &p->values[s->out];
    if (x->dtype != LZ_F32 || x->ndim < 2) return lz_cu_fail(pl, "float32 x [N, C, ...] only");
    lz_cu_bn_args a;
    memset(&a, 0, sizeof a);
    dims(x, &a);
    a.out_bf16 = y->dtype == LZ_BF16;
    if (y->dtype != LZ_F32 && !a.out_bf16 && s->op != LZ_OP_BATCH_NORM_STATS)
        return lz_cu_fail(pl, "a float32 or bf16 result only");
    switch ((lz_op)s->op) {
    case LZ_OP_BATCH_NORM_STATS: return stats(pl, s, &a, -1, -1, -1);
    case LZ_OP_BATCH_NORM_GRAD_STATS: {
        int fw, fb;
        folded(s, &fw, &fb);
        a.act = (int)s->iattr[2];
        a.lo = s->fattr[0];
        a.hi = s->fattr[1];
        return stats(pl, s, &a, s->in[3], fw, fb);
    }
    case LZ_OP_BATCH_NORM: {
        const int has_w = s->iattr[0] != 0, has_b = s->iattr[1] != 0;
        a.act = (int)s->iattr[2];
        a.lo = s->fattr[0];
        a.hi = s->fattr[1];
        if (!y->numel) return 0;
        lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_NORM, "lz_bn_apply", y->numel, LZ_CU_BLOCK, &a, sizeof a);
        if (!l || lz_cu_patch(pl, l, AT(x), s->in[0], 0) || lz_cu_patch(pl, l, AT(stats), s->in[1], 0) ||
            lz_cu_patch(pl, l, AT(eps), s->in[2], 0) || lz_cu_patch(pl, l, AT(y), s->out, 0) ||
            (has_w && lz_cu_patch(pl, l, AT(w), s->in[3], 0)) ||
            (has_b && lz_cu_patch(pl, l, AT(b), s->in[3 + has_w], 0)))
            return -1;
        return 0;
    }
    case LZ_OP_BATCH_NORM_GRAD: {
        int fw, fb;
        folded(s, &fw, &fb);
        a.act = (int)s->iattr[2];
        a.lo = s->fattr[0];
        a.hi = s->fattr[1];
        if (!y->numel) return 0;
        lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_NORM, "lz_bn_grad", y->numel, LZ_CU_BLOCK, &a, sizeof a);
        if (!l || lz_cu_patch(pl, l, AT(x), s->in[0], 0) || lz_cu_patch(pl, l, AT(stats), s->in[1], 0) ||
            lz_cu_patch(pl, l, AT(eps), s->in[2], 0) || lz_cu_patch(pl, l, AT(g), s->in[3], 0) ||
            lz_cu_patch(pl, l, AT(gstats), s->in[4], 0) || lz_cu_patch(pl, l, AT(y), s->out, 0) ||
            (s->iattr[0] && lz_cu_patch(pl, l, AT(w), s->in[5], 0)) ||
            (fw >= 0 && lz_cu_patch(pl, l, AT(fw), fw, 0)) || (fb >= 0 && lz_cu_patch(pl, l, AT(fb), fb, 0)))
            return -1;
        return 0;
    }
    default: return lz_cu_fail(pl, "not a batch-norm op");
    }
}

static int layer_norm(lz_cu_planner *pl, const lz_instr *s, int grad)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *y = &p->values[s->out];
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return lz_cu_fail(pl, "float32 operands only");
    lz_cu_ln_args a = {.d = s->iattr[0], .eps = s->fattr[0]};
    if (a.d < 1 || y->numel % a.d) return lz_cu_fail(pl, "row length does not divide the elements");
    a.rows = y->numel / a.d;
    if (!a.rows) return 0;
    /* a block per row: enough threads for a few elements each */
    uint32_t block = 32;
    while (block < 1024 && (int64_t)block * 4 < a.d) block *= 2;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_NORM, grad ? "lz_layer_norm_grad" : "lz_layer_norm",
                                       a.rows * block, block, &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_ln_args, x), s->in[0], 0) ||
        lz_cu_patch(pl, l, offsetof(lz_cu_ln_args, y), s->out, 0))
        return -1;
    return grad ? lz_cu_patch(pl, l, offsetof(lz_cu_ln_args, g), s->in[1], 0) : 0;
}

int lz_cu_plan_norm(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    switch ((lz_op)s->op) {
    case LZ_OP_BATCH_NORM_STATS:
    case LZ_OP_BATCH_NORM:
    case LZ_OP_BATCH_NORM_GRAD_STATS:
    case LZ_OP_BATCH_NORM_GRAD: *rc = batch_norm(pl, s); return 1;
    case LZ_OP_LAYER_NORM: *rc = layer_norm(pl, s, 0); return 1;
    case LZ_OP_LAYER_NORM_GRAD: *rc = layer_norm(pl, s, 1); return 1;
    default: return 0;
    }
}
