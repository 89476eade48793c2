/* hardtanh and its gradient, embedding and its scatter-add gradient, and
 * the generator's ops (dropout masks, random tensors, the counter): the
 * kernels of kernels/k_misc.cu and k_random.cu. The seed and counter stay
 * on the device, so a replayed step draws from the generator's state of
 * that call. */
#include <stddef.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"
#include "base/rng.h"

#define PATCH(l, type, member, value) lz_cu_patch(pl, l, offsetof(type, member), value, 0)

static int hardtanh(lz_cu_planner *pl, const lz_instr *s, int grad)
{
    const lz_program *p = pl->plan->prog;
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return lz_cu_fail(pl, "float32 operands only");
    lz_cu_hardtanh_args a = {.n = p->values[s->out].numel, .lo = s->fattr[0], .hi = s->fattr[1]};
    if (!a.n) return 0;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, grad ? "lz_hardtanh_grad" : "lz_hardtanh", a.n,
                                       LZ_CU_BLOCK, &a, sizeof a);
    if (!l || PATCH(l, lz_cu_hardtanh_args, x, s->in[0]) || PATCH(l, lz_cu_hardtanh_args, y, s->out)) return -1;
    return grad ? PATCH(l, lz_cu_hardtanh_args, g, s->in[1]) : 0;
}

/* (weight [V, D], idx) -> [..., D]; (g [..., D], idx) -> [V, D] */
static int embedding(lz_cu_planner *pl, const lz_instr *s, int grad)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *vi = &p->values[s->in[1]];
    const lz_value *vw = grad ? &p->values[s->out] : &p->values[s->in[0]];
    if (vi->dtype != LZ_I64 && vi->dtype != LZ_I32) return lz_cu_fail(pl, "integer indices only");
    if (p->values[s->in[0]].dtype != LZ_F32) return lz_cu_fail(pl, "float32 weights only");
    lz_cu_embedding_args a = {.n = vi->numel, .rows = vw->shape[0], .d = vw->shape[1],
                              .is64 = vi->dtype == LZ_I64};
    if (grad && lz_cu_add_zero(pl, s->out, 0, p->values[s->out].nbytes)) return -1;
    if (!a.n || !a.d) return 0;
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, grad ? "lz_embedding_grad" : "lz_embedding",
                                       a.n * a.d, LZ_CU_BLOCK, &a, sizeof a);
    if (!l || PATCH(l, lz_cu_embedding_args, w_or_g, s->in[0]) || PATCH(l, lz_cu_embedding_args, idx, s->in[1]) ||
        PATCH(l, lz_cu_embedding_args, out, s->out))
        return -1;
    return PATCH(l, lz_cu_embedding_args, status, LZ_CU_REF_STATUS);
}

/* (seed, counter) -> dropout mask or random values */
static int random_op(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    lz_cu_random_op_args a = {.n = p->values[s->out].numel};
    if (!a.n) return 0;
    const char *kernel = "lz_rand";
    if (s->op == LZ_OP_DROPOUT_MASK) {
        kernel = "lz_dropout_mask";
        a.thresh = lz_rng_dropout_threshold(s->fattr[0]);
        a.keep = lz_rng_dropout_keep(s->fattr[0]);
    } else {
        a.normal = s->iattr[0] == 1;
    }
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_RANDOM, kernel, a.n, LZ_CU_BLOCK, &a, sizeof a);
    if (!l || PATCH(l, lz_cu_random_op_args, seed, s->in[0]) || PATCH(l, lz_cu_random_op_args, counter, s->in[1]))
        return -1;
    return PATCH(l, lz_cu_random_op_args, out, s->out);
}

static int rng_advance(lz_cu_planner *pl, const lz_instr *s)
{
    lz_cu_rng_advance_args a = {.add = (unsigned long long)s->iattr[0]};
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_MISC, "lz_rng_advance", 1, 32, &a, sizeof a);
    if (!l || PATCH(l, lz_cu_rng_advance_args, in, s->in[0])) return -1;
    return PATCH(l, lz_cu_rng_advance_args, out, s->out);
}

int lz_cu_plan_nn(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    switch ((lz_op)s->op) {
    case LZ_OP_HARDTANH: *rc = hardtanh(pl, s, 0); return 1;
    case LZ_OP_HARDTANH_GRAD: *rc = hardtanh(pl, s, 1); return 1;
    case LZ_OP_EMBEDDING: *rc = embedding(pl, s, 0); return 1;
    case LZ_OP_EMBEDDING_GRAD: *rc = embedding(pl, s, 1); return 1;
    case LZ_OP_DROPOUT_MASK:
    case LZ_OP_RAND: *rc = random_op(pl, s); return 1;
    case LZ_OP_RNG_ADVANCE: *rc = rng_advance(pl, s); return 1;
    default: return 0;
    }
}
