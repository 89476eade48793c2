/* Making a program's plan (cu_plan.h): each step goes to the family
 * planner that knows its op, which adds the step's actions. A step no
 * family takes fails the plan with the op's name and the device, as the
 * CPU backend fails on an op it has no kernel for. */
#include "backends/cuda/cu_plan.h"

#include <stdio.h>
#include <stdlib.h>

void lz_cu_plan_free(lz_cu_plan *pl)
{
    if (!pl) return;
    for (int i = 0; pl->instrs && i < pl->prog->n_instrs; i++) {
        for (int k = 0; k < pl->instrs[i].n_act; k++) {
            lz_cu_action *a = &pl->instrs[i].act[k];
            if (a->kind == LZ_CU_LAUNCH) free(a->u.launch);
            else if (a->kind == LZ_CU_MATMUL) free(a->u.matmul);
            else if (a->kind == LZ_CU_CONV) free(a->u.conv);
        }
        free(pl->instrs[i].act);
    }
    free(pl->instrs);
    for (int k = 0; pl->gen_text && k < pl->n_gen; k++) free(pl->gen_text[k]);
    free(pl->gen_text);
    free(pl->gen_hash);
    lz_cu_text_free(&pl->gen);
    free(pl);
}

lz_cu_plan *lz_cu_plan_make(const lz_program *p, char *err, size_t errn)
{
    int (*const families[])(lz_cu_planner *, const lz_instr *, int *) = {
        lz_cu_plan_elementwise, lz_cu_plan_shape, lz_cu_plan_reduce, lz_cu_plan_softmax,
        lz_cu_plan_norm,        lz_cu_plan_pool,  lz_cu_plan_nn,     lz_cu_plan_matmul,
        lz_cu_plan_conv,        lz_cu_plan_index,
    };
    lz_cu_plan *plan = calloc(1, sizeof *plan);
    if (plan) plan->instrs = calloc((size_t)(p->n_instrs ? p->n_instrs : 1), sizeof *plan->instrs);
    if (!plan || !plan->instrs) {
        free(plan);
        snprintf(err, errn, "cuda: out of host memory planning %d steps", p->n_instrs);
        return NULL;
    }
    plan->prog = p;
    lz_cu_planner pl = {.plan = plan, .err = err, .errn = errn};
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        pl.step = i;
        int rc = 0, taken = 0;
        for (size_t f = 0; f < sizeof families / sizeof *families && !taken; f++)
            taken = families[f](&pl, s, &rc);
        if (!taken) {
            snprintf(err, errn, "cuda: no kernel for op %s (step %d)", lz_op_name((lz_op)s->op), i);
            rc = -1;
        }
        if (rc) {
            lz_cu_plan_free(plan);
            return NULL;
        }
    }
    if (plan->gen.oom) {
        snprintf(err, errn, "cuda: out of host memory generating the element-wise kernels");
        lz_cu_plan_free(plan);
        return NULL;
    }
    return plan;
}
