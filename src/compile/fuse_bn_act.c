/* Batch norm with its activation: a training-mode batch norm whose output
 * only a ReLU or hardtanh (ReLU6) reads, and the gradient of that
 * activation, becomes one batch-norm step that applies the activation as
 * it writes. The activation's own pass over memory (read y, write z) goes,
 * and so does y: the gradient step reads z instead, which gives the same
 * mask (z > 0 exactly where y > 0; lo < z < hi exactly where lo < y < hi;
 * NaN in both or neither). Backward, the activation's gradient runs inside
 * the batch norm's two gradient kernels, which read the mask and the
 * incoming gradient instead of a masked copy. Runs before the element-wise
 * fusion pass. */
#include <assert.h>
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

static int is_activation_gradient(const lz_step *s)
{
    return s->op == LZ_OP_RELU_GRAD || s->op == LZ_OP_HARDTANH_GRAD;
}

static void remove_step(lz_program *p, int i)
{
    free(p->steps[i].in);
    memmove(&p->steps[i], &p->steps[i + 1], sizeof *p->steps * (size_t)(p->n_steps - i - 1));
    p->n_steps--;
}

/* Backward: an activation's gradient gy = act'(mask) * gz that only the
   batch norm's two gradient steps read (as their g) is computed inside
   them from gz and the mask value, which each takes as an extra last
   input. Its pass over memory (read 2, write 1) and gy's buffer go. */
static void fold_gradients(lz_program *p)
{
    for (int i = 0; i < p->n_steps; i++) {
        const lz_step a = p->steps[i];
        const int gy = a.out;
        /* the batch norm's kernels read gz and the mask whole, element by
           element: a broadcast operand (the gradient of a mean, once its
           expand is folded away) stays with the activation's own kernel */
        if (!is_activation_gradient(&a) || p->values[gy].kind != LZ_VALUE_TEMP ||
            p->values[gy].dtype != LZ_F32 || p->values[a.in[0]].numel != p->values[gy].numel ||
            p->values[a.in[1]].numel != p->values[gy].numel)
            continue;
        int readers = 0, ok = 1;
        for (int j = i + 1; j < p->n_steps && ok; j++)
            for (int k = 0; k < p->steps[j].n_in && ok; k++) {
                if (p->steps[j].in[k] != gy) continue;
                const lz_step *b = &p->steps[j];
                ok = k == 3 && b->iattr[2] == 0 &&
                     (b->op == LZ_OP_BATCH_NORM_GRAD_STATS || b->op == LZ_OP_BATCH_NORM_GRAD);
                readers++;
            }
        if (!ok || readers == 0) continue;
        for (int j = i + 1; j < p->n_steps; j++) {
            lz_step *b = &p->steps[j];
            if (b->n_in < 4 || b->in[3] != gy) continue;
            int *in = realloc(b->in, sizeof *in * (size_t)(b->n_in + 1));
            assert(in);
            b->in = in;
            b->in[3] = a.in[1];
            b->in[b->n_in++] = a.in[0];
            b->iattr[2] = a.op == LZ_OP_RELU_GRAD ? LZ_BN_ACT_RELU : LZ_BN_ACT_HARDTANH;
            b->fattr[0] = a.op == LZ_OP_HARDTANH_GRAD ? a.fattr[0] : 0.0f;
            b->fattr[1] = a.op == LZ_OP_HARDTANH_GRAD ? a.fattr[1] : 0.0f;
        }
        remove_step(p, i);
        i--;
    }
}

/* Forward: a batch norm whose output y only one activation reads (and
   that activation's gradients, as their mask) writes the activation's
   output z itself; the gradients read z. */
static void fold_activations(lz_program *p)
{
    for (int i = 0; i < p->n_steps; i++) {
        lz_step *bn = &p->steps[i];
        if (bn->op != LZ_OP_BATCH_NORM || bn->iattr[2] != 0) continue;
        const int y = bn->out;
        if (p->values[y].kind != LZ_VALUE_TEMP || p->values[y].dtype != LZ_F32) continue;
        /* every read of y: one activation, and its gradients (mask input 0) */
        int act = -1, ok = 1;
        for (int j = i + 1; j < p->n_steps && ok; j++)
            for (int a = 0; a < p->steps[j].n_in && ok; a++) {
                if (p->steps[j].in[a] != y) continue;
                if (activation_of(&p->steps[j]) && act < 0 && a == 0) act = j;
                else if (act < 0 || a != 0 || !is_gradient_of(&p->steps[j], &p->steps[act])) ok = 0;
            }
        if (!ok || act < 0) continue;
        const lz_step a = p->steps[act];
        for (int j = act + 1; j < p->n_steps; j++)
            if (p->steps[j].n_in > 0 && p->steps[j].in[0] == y) p->steps[j].in[0] = a.out;
        bn->iattr[2] = activation_of(&a);
        bn->fattr[0] = a.op == LZ_OP_HARDTANH ? a.fattr[0] : 0.0f;
        bn->fattr[1] = a.op == LZ_OP_HARDTANH ? a.fattr[1] : 0.0f;
        bn->out = a.out;
        remove_step(p, act);
    }
}

void lz_fuse_bn_activation(lz_program *p)
{
    if (!lz_fusion_enabled()) return;
    fold_activations(p);
    fold_gradients(p);
}
