/* The indexing ops added for models from PyTorch (kernels/k_index.cu):
 * the triangular mask, cumsum, gather, scatter-add and argmax, with the
 * attributes the CPU's kernels read (backends/cpu/k_index.c). */
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

#define AT(member) offsetof(lz_cu_index_args, member)

static void split_axis(const lz_value *v, int axis, lz_cu_index_args *a)
{
    a->outer = a->inner = 1;
    for (int d = 0; d < axis; d++) a->outer *= v->shape[d];
    for (int d = axis + 1; d < v->ndim; d++) a->inner *= v->shape[d];
    a->n = v->shape[axis];
}

static lz_cu_launch *launch(lz_cu_planner *pl, const char *kernel, int64_t threads, const lz_cu_index_args *a,
                            const lz_instr *s, int with_idx)
{
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_INDEX, kernel, threads, LZ_CU_BLOCK, a, sizeof *a);
    if (!l || lz_cu_patch(pl, l, AT(x), s->in[0], 0) || lz_cu_patch(pl, l, AT(y), s->out, 0)) return NULL;
    if (with_idx && (lz_cu_patch(pl, l, AT(idx), s->in[1], 0) || lz_cu_patch(pl, l, AT(status), LZ_CU_REF_STATUS, 0)))
        return NULL;
    return l;
}

static int index_op(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *x = &p->values[s->in[0]], *y = &p->values[s->out];
    lz_cu_index_args a;
    memset(&a, 0, sizeof a);
    a.dtype = x->dtype;
    if (x->dtype == LZ_BF16 && s->op != LZ_OP_GATHER) return lz_cu_fail(pl, "float32 or integer operands only");
    switch ((lz_op)s->op) {
    case LZ_OP_TRI_MASK:
        if (y->ndim < 2) return lz_cu_fail(pl, "fewer than 2 axes");
        a.rows = y->shape[y->ndim - 2];
        a.cols = y->shape[y->ndim - 1];
        a.numel = y->numel;
        a.k = s->iattr[0];
        a.upper = (int)s->iattr[1];
        a.fill = s->fattr[0];
        return !y->numel || launch(pl, "lz_tri_mask", y->numel, &a, s, 0) ? 0 : -1;
    case LZ_OP_CUMSUM:
        split_axis(y, (int)s->iattr[0], &a);
        a.rev = (int)s->iattr[1];
        return !y->numel || launch(pl, "lz_cumsum", a.outer * a.inner, &a, s, 0) ? 0 : -1;
    case LZ_OP_ARGMAX:
        split_axis(x, (int)s->iattr[0], &a);
        return !y->numel || launch(pl, "lz_argmax", a.outer * a.inner, &a, s, 0) ? 0 : -1;
    default: {   /* gather (x, idx) -> idx shape; scatter-add (src, idx) -> the full shape */
        const int scatter = s->op == LZ_OP_SCATTER_ADD;
        const lz_value *vi = &p->values[s->in[1]], *full = scatter ? y : x;
        if (vi->dtype != LZ_I64 && vi->dtype != LZ_I32) return lz_cu_fail(pl, "integer indices only");
        if (scatter && (x->dtype != LZ_F32 || y->dtype != LZ_F32)) return lz_cu_fail(pl, "float32 values only");
        if (vi->ndim != full->ndim || vi->ndim > LZ_CU_MAX_DIMS) return lz_cu_fail(pl, "indices of another rank");
        a.axis = (int)s->iattr[0];
        a.ndim = vi->ndim;
        a.is64 = vi->dtype == LZ_I64;
        a.numel = vi->numel;
        memcpy(a.ishape, vi->shape, sizeof(int64_t) * (size_t)vi->ndim);
        memcpy(a.fshape, full->shape, sizeof(int64_t) * (size_t)full->ndim);
        if (scatter && lz_cu_add_zero(pl, s->out, 0, y->nbytes)) return -1;
        return !vi->numel || launch(pl, scatter ? "lz_scatter_add" : "lz_gather", vi->numel, &a, s, 1) ? 0 : -1;
    }
    }
}

int lz_cu_plan_index(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    switch ((lz_op)s->op) {
    case LZ_OP_TRI_MASK:
    case LZ_OP_CUMSUM:
    case LZ_OP_GATHER:
    case LZ_OP_SCATTER_ADD:
    case LZ_OP_ARGMAX: *rc = index_op(pl, s); return 1;
    default: return 0;
    }
}
