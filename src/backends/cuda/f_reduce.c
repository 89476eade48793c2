/* SUM, MEAN and MAX (kernels/k_reduce.cu): the source's axes folded into
 * kept and reduced groups as the CPU folds them (backends/cpu/k_reduce.c),
 * the innermost group picking the kernel, and long reductions with few
 * outputs split so the whole GPU works on them. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

/* threads that keep an H100 busy on a memory-bound loop (132 SMs) */
#define WANT_THREADS (1 << 17)
/* the fewest elements a split folds: below it the second pass costs more */
#define MIN_SPLIT 2048

static int reduce(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *xv = &p->values[s->in[0]], *yv = &p->values[s->out];
    if (xv->dtype != yv->dtype || xv->dtype == LZ_BF16) return lz_cu_fail(pl, "float32 or integer operands only");
    lz_cu_reduce_args a;
    memset(&a, 0, sizeof a);
    a.op = s->op == LZ_OP_SUM ? LZ_CU_RED_SUM : s->op == LZ_OP_MEAN ? LZ_CU_RED_MEAN : LZ_CU_RED_MAX;
    a.dtype = xv->dtype;
    const int64_t mask = s->iattr[0];
    int64_t stride[LZ_MAX_DIMS], st = 1;
    for (int d = xv->ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= xv->shape[d];
    }
    /* groups of adjacent axes with one role (the source is dense) */
    int last_red = -1;
    a.K = 1;
    a.R = 1;
    for (int d = 0; d < xv->ndim; d++) {
        const int64_t n = xv->shape[d];
        const int red = (int)(mask >> d & 1);
        if (red) a.R *= n;
        else a.K *= n;
        if (n == 1) continue;
        long long *size = red ? a.rsize : a.ksize, *str = red ? a.rstride : a.kstride;
        int *nd = red ? &a.nr : &a.nk;
        if (last_red == red) {
            size[*nd - 1] *= n;
            str[*nd - 1] = stride[d];
        } else {
            if (*nd == LZ_CU_MAX_DIMS) return lz_cu_fail(pl, "more than %d axis groups", LZ_CU_MAX_DIMS);
            size[*nd] = n;
            str[*nd] = stride[d];
            (*nd)++;
        }
        last_red = red;
    }
    if (a.K != yv->numel) return lz_cu_fail(pl, "%lld kept elements for %lld outputs", (long long)a.K,
                                            (long long)yv->numel);
    if (!a.K) return 0;
    if (!a.nr) {   /* nothing reduced but unit axes: every output is one element */
        a.nr = 1;
        a.rsize[0] = 1;
    }
    a.scale = a.R ? 1.0 / (double)a.R : (double)INFINITY;   /* a mean over nothing is 0/0, as the CPU's */
    const int rows = last_red == 1;
    const int64_t per = rows ? 32 : 1;
    a.splits = 1;
    if (a.dtype == LZ_F32 && a.K * per < WANT_THREADS && a.R > MIN_SPLIT) {
        int64_t sp = (WANT_THREADS + a.K * per - 1) / (a.K * per), most = (a.R + MIN_SPLIT - 1) / MIN_SPLIT;
        a.splits = (int)(sp < most ? sp : most);
    }
    a.chunk = a.R ? (a.R + a.splits - 1) / a.splits : 1;
    if (a.R) a.splits = (int)((a.R + a.chunk - 1) / a.chunk);
    const int64_t partial = a.splits > 1 ? lz_cu_take_scratch(pl, sizeof(double) * (size_t)(a.splits * a.K)) : 0;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_REDUCE, rows ? "lz_reduce_rows" : "lz_reduce_cols",
                                       a.K * a.splits * per, LZ_CU_BLOCK, &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_reduce_args, x), s->in[0], 0) ||
        lz_cu_patch(pl, l, offsetof(lz_cu_reduce_args, y), s->out, 0))
        return -1;
    if (a.splits == 1) return 0;
    if (lz_cu_patch(pl, l, offsetof(lz_cu_reduce_args, partial), LZ_CU_REF_SCRATCH, partial)) return -1;
    lz_cu_launch *f = lz_cu_add_launch(pl, LZ_CU_MOD_REDUCE, "lz_reduce_finish", a.K, LZ_CU_BLOCK, &a, sizeof a);
    if (!f || lz_cu_patch(pl, f, offsetof(lz_cu_reduce_args, y), s->out, 0)) return -1;
    return lz_cu_patch(pl, f, offsetof(lz_cu_reduce_args, partial), LZ_CU_REF_SCRATCH, partial);
}

int lz_cu_plan_reduce(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    if (s->op != LZ_OP_SUM && s->op != LZ_OP_MEAN && s->op != LZ_OP_MAX) return 0;
    *rc = reduce(pl, s);
    return 1;
}
