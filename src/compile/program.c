/* Editing and freeing a program: used by compile.c and by the passes that
 * drop instructions (fold_expand.c, fold_slice_grad.c, views.c), so that neither
 * the passes nor the driver call into each other. */
#include <stdlib.h>
#include <string.h>

#include "compile/program.h"

static void step_free(lz_instr *s)
{
    lz_fused *f = s->fused;
    for (int k = 0; f && k < f->n_ops; k++) free(f->ops[k].in);
    free(f);
    free(s->in);
}

void lz_program_drop_instrs(lz_program *p, const char *drop)
{
    int kept = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        if (drop[i]) step_free(&p->instrs[i]);
        else p->instrs[kept++] = p->instrs[i];
    }
    p->n_instrs = kept;
}

void lz_program_free(lz_program *p)
{
    for (int i = 0; i < p->n_instrs; i++) step_free(&p->instrs[i]);
    free(p->instrs);
    free(p->values);
    free(p->written_by);
    free(p->last_read_by);
    free(p->output_value);
    free(p->input_value);
    memset(p, 0, sizeof *p);
}
