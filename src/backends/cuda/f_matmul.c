/* Products (LZ_OP_MATMUL) as cuBLASLt calls: the plan's shapes, the
 * batch axes folded into one strided batch (and at most one loop around
 * it), and the operands; cu_matmul.c makes the descriptors on the device.
 * The CPU's rules (backends/cpu/k_linalg.c): a [..., M, K] (stored
 * [..., K, M] when iattr[0]), b [..., K, N] (or [..., N, K]), batch axes
 * broadcast; a batch of a against one b is one tall product. */
#include <stdlib.h>

#include "backends/cuda/cu_plan.h"

static int64_t batch_numel(const lz_value *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim - 2; d++) n *= v->shape[d];
    return n;
}

/* per output batch axis, v's stride in matrices (0 where broadcast) */
static void batch_strides(const lz_value *v, const lz_value *out, int64_t *st)
{
    const int nbo = out->ndim - 2, off = nbo - (v->ndim - 2);
    int64_t s = 1;
    for (int d = nbo - 1; d >= 0; d--) {
        const int vd = d - off;
        if (vd < 0) {
            st[d] = 0;
            continue;
        }
        st[d] = v->shape[vd] == 1 && out->shape[d] != 1 ? 0 : s;
        s *= v->shape[vd];
    }
}

/* The batch axes as (count, strides) and (outer, strides): adjacent axes
   merge while every operand walks them as one; more than two groups is
   refused. */
static int fold_batch(lz_cu_planner *pl, const lz_value *va, const lz_value *vb, const lz_value *vo,
                      lz_cu_matmul *m)
{
    const int nbd = vo->ndim - 2;
    int64_t sa[LZ_MAX_DIMS], sb[LZ_MAX_DIMS], sc[LZ_MAX_DIMS], s = 1;
    batch_strides(va, vo, sa);
    batch_strides(vb, vo, sb);
    for (int d = nbd - 1; d >= 0; d--) {
        sc[d] = s;
        s *= vo->shape[d];
    }
    int64_t n[2] = {1, 1}, ga[2] = {0, 0}, gb[2] = {0, 0}, gc[2] = {0, 0};
    int g = -1;
    for (int d = nbd - 1; d >= 0; d--) {
        const int64_t len = vo->shape[d];
        if (len == 1) continue;
        if (g >= 0 && ga[g] * n[g] == sa[d] && gb[g] * n[g] == sb[d] && gc[g] * n[g] == sc[d]) {
            n[g] *= len;
            continue;
        }
        if (++g == 2) return lz_cu_fail(pl, "batch axes that fold into more than two strided groups");
        n[g] = len;
        ga[g] = sa[d];
        gb[g] = sb[d];
        gc[g] = sc[d];
    }
    const int64_t ea = m->M * m->K, eb = m->K * m->N, ec = m->M * m->N;   /* elements per matrix */
    m->count = n[0];
    m->stride_a = ga[0] * ea;
    m->stride_b = gb[0] * eb;
    m->stride_c = gc[0] * ec;
    m->outer = n[1];
    m->outer_a = ga[1] * ea;
    m->outer_b = gb[1] * eb;
    m->outer_c = gc[1] * ec;
    return 0;
}

static int matmul(lz_cu_planner *pl, const lz_instr *s)
{
    const lz_program *p = pl->plan->prog;
    const lz_value *va = &p->values[s->in[0]], *vb = &p->values[s->in[1]], *vo = &p->values[s->out];
    const int bf16 = va->dtype == LZ_BF16;
    if (va->dtype != vb->dtype || (va->dtype != LZ_F32 && !bf16) || vo->dtype != LZ_F32)
        return lz_cu_fail(pl, "float32 operands, or bf16 ones with a float32 result, only");
    if (va->ndim < 2 || vb->ndim < 2 || vo->ndim < 2) return lz_cu_fail(pl, "operands of at least 2 axes only");
    if (!vo->numel) return 0;
    lz_cu_matmul *m = calloc(1, sizeof *m);
    if (!m) return lz_cu_fail(pl, "out of host memory");
    m->ta = s->iattr[0] != 0;
    m->tb = s->iattr[1] != 0;
    m->bf16 = bf16;
    m->M = vo->shape[vo->ndim - 2];
    m->N = vo->shape[vo->ndim - 1];
    m->K = m->ta ? va->shape[va->ndim - 2] : va->shape[va->ndim - 1];
    m->a = (lz_cu_ref){s->in[0], 0};
    m->b = (lz_cu_ref){s->in[1], 0};
    m->c = (lz_cu_ref){s->out, 0};
    if (m->K == 0) {   /* an empty sum: zeros */
        free(m);
        return lz_cu_add_zero(pl, s->out, 0, vo->nbytes);
    }
    const int64_t nbatch = batch_numel(vo);
    if (!m->ta && batch_numel(vb) == 1 && batch_numel(va) == nbatch) {
        m->M *= nbatch;   /* one tall product: the batch's rows are a's rows */
        m->count = m->outer = 1;
    } else if (fold_batch(pl, va, vb, vo, m)) {
        free(m);
        return -1;
    }
    return lz_cu_add_matmul(pl, m);
}

int lz_cu_plan_matmul(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    if (s->op != LZ_OP_MATMUL) return 0;
    *rc = matmul(pl, s);
    return 1;
}
