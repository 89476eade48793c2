/* Steps that move values without arithmetic: fills, copies, reshapes,
 * permutes and expands (a strided gather), slices, their gradients and
 * concatenations (2-d copies the copy engine runs, as the CPU's memcpy
 * rows in backends/cpu/k_shape.c). */
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

static size_t elsize(const lz_value *v) { return lz_cu_esize(v->dtype); }

/* v as outer runs of v->shape[axis] runs of inner elements */
static void split_axis(const lz_value *v, int axis, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= v->shape[d];
    for (int d = axis + 1; d < v->ndim; d++) *inner *= v->shape[d];
}

/* out (dense, its shape) = in read with stride[d] per output axis:
   adjacent axes that stay adjacent merge, unit axes drop (k_shape.c's
   collapse); a gather that is a plain copy is one */
static int gather(lz_cu_planner *pl, const lz_instr *s, const int64_t *stride)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    const int to_bf16 = vi->dtype == LZ_F32 && vo->dtype == LZ_BF16;
    if (vi->dtype != vo->dtype && !to_bf16)
        return lz_cu_fail(pl, "no kernel for %d -> %d dtype change", vi->dtype, vo->dtype);
    if (!vo->numel) return 0;
    lz_cu_gather_args a;
    memset(&a, 0, sizeof a);
    for (int d = 0; d < vo->ndim; d++) {
        if (vo->shape[d] == 1) continue;
        if (a.nd && a.stride[a.nd - 1] == vo->shape[d] * stride[d]) {
            a.size[a.nd - 1] *= vo->shape[d];
            a.stride[a.nd - 1] = stride[d];
        } else {
            if (a.nd == LZ_CU_MAX_DIMS) return lz_cu_fail(pl, "more than %d axes", LZ_CU_MAX_DIMS);
            a.size[a.nd] = vo->shape[d];
            a.stride[a.nd] = stride[d];
            a.nd++;
        }
    }
    if (!to_bf16 && (a.nd == 0 || (a.nd == 1 && a.stride[0] == 1)))
        return lz_cu_add_copy(pl, (lz_cu_copy){.dst = {s->out, 0}, .src = {s->in[0], 0},
                                               .width = vo->nbytes, .height = 1});
    if (a.nd == 0) {
        a.nd = 1;
        a.size[0] = 1;
    }
    a.numel = vo->numel;
    a.esize = (int)elsize(vo);
    a.to_bf16 = to_bf16;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, "lz_gather", vo->numel, LZ_CU_BLOCK, &a, sizeof a);
    if (!l) return -1;
    if (lz_cu_patch(pl, l, offsetof(lz_cu_gather_args, src), s->in[0], 0)) return -1;
    return lz_cu_patch(pl, l, offsetof(lz_cu_gather_args, dst), s->out, 0);
}

static int permute(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int64_t istr[LZ_MAX_DIMS], stride[LZ_MAX_DIMS], acc = 1;
    for (int d = vi->ndim - 1; d >= 0; d--) {
        istr[d] = acc;
        acc *= vi->shape[d];
    }
    for (int d = 0; d < vo->ndim; d++) {
        const int64_t pd = s->iattr[d];
        if (pd < 0 || pd >= vi->ndim) return lz_cu_fail(pl, "bad axis %lld in perm", (long long)pd);
        stride[d] = istr[pd];
    }
    return gather(pl, s, stride);
}

static int expand(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int64_t stride[LZ_MAX_DIMS], acc = 1;
    const int off = vo->ndim - vi->ndim;
    for (int d = vo->ndim - 1; d >= 0; d--) {
        const int id = d - off;
        if (id < 0) {
            stride[d] = 0;
            continue;
        }
        stride[d] = vi->shape[id] == 1 && vo->shape[d] != 1 ? 0 : acc;
        acc *= vi->shape[id];
    }
    return gather(pl, s, stride);
}

static int fill(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_value *vo = &pl->plan->prog->values[s->out];
    union { float f; uint32_t u; } v = {.f = s->fattr[0]};
    /* other dtypes are zeros, as on the CPU (k_misc.c) */
    if (vo->dtype != LZ_F32 || v.u == 0) return lz_cu_add_zero(pl, s->out, 0, vo->nbytes);
    lz_cu_fill_args a = {.n = vo->numel, .value = v.u, .width = 4};
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, "lz_fill", vo->numel, LZ_CU_BLOCK, &a, sizeof a);
    return l ? lz_cu_patch(pl, l, offsetof(lz_cu_fill_args, dst), s->out, 0) : -1;
}

/* [outer, l, inner] rows between values of the axis lengths lsrc / ldst:
   the rows of n = len * inner elements of src at element soff, to dst at doff */
static int rows(lz_cu_planner *pl, int dst, int64_t doff, int64_t ldst, int src, int64_t soff, int64_t lsrc,
                int64_t len, int64_t outer, int64_t inner, size_t es)
{
    lz_cu_copy c = {.dst = {dst, doff * inner * (int64_t)es}, .src = {src, soff * inner * (int64_t)es},
                    .dpitch = (size_t)(ldst * inner) * es, .spitch = (size_t)(lsrc * inner) * es,
                    .width = (size_t)(len * inner) * es, .height = (size_t)outer};
    if (c.height == 1 || (c.dpitch == c.width && c.spitch == c.width)) {   /* one run */
        c.width *= c.height;
        c.height = 1;
        c.dpitch = c.spitch = c.width;
    }
    return lz_cu_add_copy(pl, c);
}

static int slice(lz_cu_planner *pl, const lz_instr *s, int grad)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    const int axis = (int)s->iattr[0];
    const int64_t start = s->iattr[1];
    int64_t outer, inner;
    split_axis(grad ? vo : vi, axis, &outer, &inner);
    const int64_t lin = vi->shape[axis], lout = vo->shape[axis];
    if (!grad) return rows(pl, s->out, 0, lout, s->in[0], start, lin, lout, outer, inner, elsize(vo));
    if (lz_cu_add_zero(pl, s->out, 0, vo->nbytes)) return -1;
    return rows(pl, s->out, start, lout, s->in[0], 0, lin, lin, outer, inner, elsize(vo));
}

static int cat(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vo = &p->values[s->out];
    const int axis = (int)s->iattr[0];
    int64_t outer, inner, off = 0;
    split_axis(vo, axis, &outer, &inner);
    for (int i = 0; i < s->n_in; i++) {
        const int64_t li = p->values[s->in[i]].shape[axis];
        if (rows(pl, s->out, off, vo->shape[axis], s->in[i], 0, li, li, outer, inner, elsize(vo))) return -1;
        off += li;
    }
    return 0;
}

int lz_cu_plan_shape(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    const lz_value *vo = &pl->plan->prog->values[s->out];
    switch ((lz_op)s->op) {
    case LZ_OP_FILL: *rc = fill(pl, s); return 1;
    case LZ_OP_COPY:
    case LZ_OP_RESHAPE:   /* a reshape left a step (not a view) copies; the same memory needs none */
        *rc = lz_cu_add_copy(pl, (lz_cu_copy){.dst = {s->out, 0}, .src = {s->in[0], 0}, .width = vo->nbytes,
                                              .height = 1});
        return 1;
    case LZ_OP_PERMUTE: *rc = permute(pl, s); return 1;
    case LZ_OP_EXPAND: *rc = expand(pl, s); return 1;
    case LZ_OP_SLICE: *rc = slice(pl, s, 0); return 1;
    case LZ_OP_SLICE_GRAD: *rc = slice(pl, s, 1); return 1;
    case LZ_OP_CAT: *rc = cat(pl, s); return 1;
    default: return 0;
    }
}
