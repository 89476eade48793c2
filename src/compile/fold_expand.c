/* Expands that only element-wise instructions read. An element-wise instruction
 * broadcasts its operands to its own shape, and broadcasting composes:
 * reading an expand's source gives the values the expand would have
 * written. So element-wise readers take the source instead, and an expand
 * nothing else reads (the gradient of every sum and mean, read by the
 * element-wise rest of a backward pass) leaves the schedule: no kernel,
 * no buffer. Fusion then reads the source as a broadcast operand.
 *
 * Figures: docs/performance.md, "Fusion". */
#include <stdlib.h>

#include "base/fault.h"
#include "compile/program.h"

void lz_fold_expands(lz_program *p)
{
    const size_t nv = (size_t)(p->n_values ? p->n_values : 1);
    int *source = lz_host_malloc(sizeof *source * nv), *uses = lz_host_calloc(nv, sizeof *uses);
    char *drop = lz_host_calloc((size_t)p->n_instrs + 1, 1);
    if (!source || !uses || !drop) {
        free(source); free(uses); free(drop);
        p->out_of_memory = 1;
        return;
    }
    for (int v = 0; v < p->n_values; v++) source[v] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        lz_instr *s = &p->instrs[i];
        if (lz_op_is_elementwise((lz_op)s->op))
            for (int a = 0; a < s->n_in; a++)
                while (source[s->in[a]] >= 0) s->in[a] = source[s->in[a]];
        for (int a = 0; a < s->n_in; a++) uses[s->in[a]]++;
        if (s->op == LZ_OP_EXPAND) source[s->out] = s->in[0];
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        drop[i] = s->op == LZ_OP_EXPAND && !uses[s->out] && p->values[s->out].kind == LZ_VALUE_TEMP;
    }
    lz_program_drop_instrs(p, drop);
    free(drop);
    free(source);
    free(uses);
}
