/* Reshapes as views. A reshape's result holds its input's bytes in the
 * same order, so when it is a temporary it needs no memory or copy of its
 * own: it becomes a view of its input's memory and its instruction leaves the
 * schedule. The memory plan keeps the viewed value alive until the last
 * use of any view of it (memplan.c); the executor points a view at the
 * viewed value's memory (executor.c). Values are never written after
 * their instruction, so a view cannot see a change. A reshape that is a graph
 * output keeps its copy: that buffer is the caller's.
 *
 * Figures: docs/performance.md, "Fusion". */
#include <stdlib.h>

#include "base/fault.h"
#include "compile/program.h"

void lz_plan_views(lz_program *p)
{
    char *drop = lz_host_calloc((size_t)p->n_instrs + 1, 1);
    if (!drop) {
        p->out_of_memory = 1;
        return;
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        lz_value *out = &p->values[s->out];
        const lz_value *in = s->op == LZ_OP_RESHAPE ? &p->values[s->in[0]] : NULL;
        if (in && out->kind == LZ_VALUE_TEMP && out->nbytes == in->nbytes) {
            out->kind = LZ_VALUE_VIEW;
            out->view_of = in->kind == LZ_VALUE_VIEW ? in->view_of : s->in[0];
            drop[i] = 1;
        }
    }
    lz_program_drop_instrs(p, drop);
    free(drop);
}
