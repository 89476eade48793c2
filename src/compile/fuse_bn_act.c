/* Batch norm with its activation: a training-mode batch norm whose output
 * only a ReLU or hardtanh (ReLU6) reads, and the gradient of that
 * activation, becomes one batch-norm step that applies the activation as
 * it writes. The activation's own pass over memory (read y, write z) goes,
 * and so does y: the gradient step reads z instead, which gives the same
 * mask (z > 0 exactly where y > 0; lo < z < hi exactly where lo < y < hi;
 * NaN in both or neither). Runs before the element-wise fusion pass. */
#include <stdlib.h>
#include <string.h>

#include "compile/executable.h"

/* The activation a step applies: 1 ReLU, 2 hardtanh, 0 neither. */
static int activation_of(const lz_step *s)
{
    return s->op == LZ_OP_RELU ? LZ_BN_ACT_RELU : s->op == LZ_OP_HARDTANH ? LZ_BN_ACT_HARDTANH : 0;
}

static int is_gradient_of(const lz_step *g, const lz_step *act)
{
    if (act->op == LZ_OP_RELU) return g->op == LZ_OP_RELU_GRAD;
    return g->op == LZ_OP_HARDTANH_GRAD && g->fattr[0] == act->fattr[0] && g->fattr[1] == act->fattr[1];
}

void lz_fuse_bn_activation(lz_program *p)
{
    if (!lz_fusion_enabled()) return;
    int n = p->n_steps;
    for (int i = 0; i < n; i++) {
        lz_step *bn = &p->steps[i];
        if (bn->op != LZ_OP_BATCH_NORM || bn->iattr[2] != 0) continue;
        const int y = bn->out;
        if (p->values[y].kind != LZ_VALUE_TEMP || p->values[y].dtype != LZ_F32) continue;
        /* every read of y: one activation, and its gradients (mask input 0) */
        int act = -1, ok = 1;
        for (int j = i + 1; j < n && ok; j++)
            for (int a = 0; a < p->steps[j].n_in && ok; a++) {
                if (p->steps[j].in[a] != y) continue;
                if (activation_of(&p->steps[j]) && act < 0 && a == 0) act = j;
                else if (act < 0 || a != 0 || !is_gradient_of(&p->steps[j], &p->steps[act])) ok = 0;
            }
        if (!ok || act < 0) continue;
        const lz_step a = p->steps[act];
        for (int j = act + 1; j < n; j++)
            if (p->steps[j].n_in > 0 && p->steps[j].in[0] == y) p->steps[j].in[0] = a.out;
        bn->iattr[2] = activation_of(&a);
        bn->fattr[0] = a.op == LZ_OP_HARDTANH ? a.fattr[0] : 0.0f;
        bn->fattr[1] = a.op == LZ_OP_HARDTANH ? a.fattr[1] : 0.0f;
        bn->out = a.out;
        free(p->steps[act].in);
        memmove(&p->steps[act], &p->steps[act + 1], sizeof *p->steps * (size_t)(n - act - 1));
        n--;
    }
    p->n_steps = n;
}
