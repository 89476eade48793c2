/* Convolutions in all three directions as cuDNN calls (cu_conv.c makes
 * the descriptors and picks the algorithm on the device). The shapes are
 * the forward's: x [N, C, H, W], w [O, C/g, KH, KW], y [N, O, OH, OW];
 * iattr: stride h, w, padding h, w, dilation h, w, groups. Autocast's
 * bf16 operands give cuDNN's bf16 result (float32 accumulation) in the
 * step's scratch, widened into the float32 value lazyc defines. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

static void shape4(const lz_value *v, int64_t *d) { memcpy(d, v->shape, sizeof(int64_t) * 4); }

static int conv(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *v0 = &p->values[s->in[0]], *v1 = &p->values[s->in[1]], *vo = &p->values[s->out];
    if (v0->ndim != 4 || v1->ndim != 4 || vo->ndim != 4) return lz_cu_fail(pl, "4-d NCHW operands only");
    const int bf16 = v0->dtype == LZ_BF16;
    if (v0->dtype != v1->dtype || (v0->dtype != LZ_F32 && !bf16) || (vo->dtype != LZ_F32 && vo->dtype != v0->dtype))
        return lz_cu_fail(pl, "float32 or bf16 operands of one dtype only");
    lz_cu_conv *c = calloc(1, sizeof *c);
    if (!c) return lz_cu_fail(pl, "out of host memory");
    c->bf16 = bf16;
    for (int k = 0; k < 2; k++) {
        c->stride[k] = (int)s->iattr[k];
        c->pad[k] = (int)s->iattr[2 + k];
        c->dil[k] = (int)s->iattr[4 + k];
    }
    c->groups = (int)s->iattr[6];
    c->in0 = (lz_cu_ref){s->in[0], 0};
    c->in1 = (lz_cu_ref){s->in[1], 0};
    c->out = (lz_cu_ref){s->out, 0};
    switch ((lz_op)s->op) {
    case LZ_OP_CONV2D:
        c->dir = LZ_CU_CONV_FWD;
        shape4(v0, c->x);
        shape4(v1, c->w);
        shape4(vo, c->y);
        break;
    case LZ_OP_CONV2D_GRAD_INPUT:   /* (g, w) -> x */
        c->dir = LZ_CU_CONV_BWD_DATA;
        shape4(vo, c->x);
        shape4(v1, c->w);
        shape4(v0, c->y);
        break;
    default:                        /* (x, g) -> w */
        c->dir = LZ_CU_CONV_BWD_FILTER;
        shape4(v0, c->x);
        shape4(vo, c->w);
        shape4(v1, c->y);
        break;
    }
    if (c->groups < 1 || c->x[1] != c->w[1] * c->groups || !vo->numel) {
        free(c);
        return vo->numel ? lz_cu_fail(pl, "groups %d do not divide the channels", (int)s->iattr[6]) : 0;
    }
    const int widen = bf16 && vo->dtype == LZ_F32;
    c->staged = widen ? (lz_cu_ref){LZ_CU_REF_SCRATCH, lz_cu_take_scratch(pl, 2 * (size_t)vo->numel)}
                      : (lz_cu_ref){LZ_CU_REF_NONE, 0};   /* cuDNN writes the value itself */
    const int64_t staged = c->staged.add;
    if (lz_cu_add_conv(pl, c)) return -1;
    if (!widen) return 0;
    lz_cu_convert_args a = {.n = vo->numel};
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, "lz_widen_bf16", vo->numel, LZ_CU_BLOCK, &a, sizeof a);
    if (!l || lz_cu_patch(pl, l, offsetof(lz_cu_convert_args, src), LZ_CU_REF_SCRATCH, staged)) return -1;
    return lz_cu_patch(pl, l, offsetof(lz_cu_convert_args, dst), s->out, 0);
}

int lz_cu_plan_conv(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    if (s->op != LZ_OP_CONV2D && s->op != LZ_OP_CONV2D_GRAD_INPUT && s->op != LZ_OP_CONV2D_GRAD_WEIGHT) return 0;
    *rc = conv(pl, s);
    return 1;
}
