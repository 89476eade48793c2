/* Autocast's casts folded into the instruction that makes their operand. A cast
 * to bf16 that is the only reader of an instruction's float32 result, where that
 * instruction's kernel can write bf16 itself, goes: the instruction writes the cast's
 * result, and the float32 result's write and read go with the cast's
 * kernel. Such instructions: a batch norm or its gradient whose output only the
 * next convolution's cast reads (backends/cpu/bn_act.h, LZ_BN_TILE floats
 * rounded at a time), and a permute (attention's heads split for a
 * product, or merged back for the output projection, through the reshape
 * between). The values are the cast's, bit for bit. Runs after
 * lz_fuse_bn_activation (a batch norm's activation is folded first, so its
 * gradients no longer read the output as a mask) and before lz_fuse; not
 * when fusion is off. */
#include <stdlib.h>

#include "base/fault.h"
#include "compile/program.h"

static int writes_bf16(const lz_instr *s)
{
    return s->op == LZ_OP_BATCH_NORM || s->op == LZ_OP_BATCH_NORM_GRAD || s->op == LZ_OP_PERMUTE;
}

/* v is a float32 temporary that one instruction reads, once */
static int only_reader(const lz_program *p, const int *reads, int v)
{
    return reads[v] == 1 && p->values[v].kind == LZ_VALUE_TEMP && p->values[v].dtype == LZ_F32;
}

void lz_fold_casts(lz_program *p)
{
    if (!lz_fusion_enabled() || p->n_instrs < 2) return;
    const size_t nv = (size_t)(p->n_values ? p->n_values : 1);
    int *reads = lz_host_calloc(nv, sizeof *reads), *made_by = lz_host_malloc(sizeof *made_by * nv);
    int *consumer = lz_host_malloc(sizeof *consumer * nv);   /* an instruction reading v */
    char *drop = lz_host_calloc((size_t)p->n_instrs, 1);
    if (!reads || !made_by || !consumer || !drop) {   /* the casts stay */
        free(reads); free(made_by); free(consumer); free(drop);
        return;
    }
    for (int v = 0; v < p->n_values; v++) made_by[v] = consumer[v] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        made_by[p->instrs[i].out] = i;
        for (int a = 0; a < p->instrs[i].n_in; a++) {
            reads[p->instrs[i].in[a]]++;
            consumer[p->instrs[i].in[a]] = i;
        }
    }
    int folded = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *c = &p->instrs[i];
        if (c->op != LZ_OP_CAST || c->n_in != 1 || p->values[c->out].dtype != LZ_BF16) continue;
        /* back through reshapes (attention's heads merged back before the
           output projection), each result read by the next instruction alone */
        const int y = c->in[0];
        int v = y, m = made_by[v];
        while (m >= 0 && p->instrs[m].op == LZ_OP_RESHAPE && only_reader(p, reads, v)) {
            v = p->instrs[m].in[0];
            m = made_by[v];
        }
        if (m < 0 || !only_reader(p, reads, v) || !writes_bf16(&p->instrs[m])) continue;
        /* the values between carry bf16 now; the cast's operand goes */
        for (int u = v; u != y; u = p->instrs[consumer[u]].out) {
            p->values[u].dtype = LZ_BF16;
            p->values[u].nbytes = (size_t)p->values[u].numel * lz_dtype_size(LZ_BF16);
        }
        p->instrs[made_by[y]].out = c->out;
        made_by[c->out] = made_by[y];
        drop[i] = 1;
        folded = 1;
    }
    if (folded) lz_program_drop_instrs(p, drop);
    free(reads); free(made_by); free(consumer); free(drop);
}
