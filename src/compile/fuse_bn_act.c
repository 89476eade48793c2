/* Batch norm with its activation: a training-mode batch norm whose output
 * only a ReLU or hardtanh (ReLU6) reads, and the gradient of that
 * activation, becomes one batch-norm instruction that applies the activation as
 * it writes. The activation's own pass over memory (read y, write z) goes,
 * and so does y. Backward, the activation's gradient runs inside the batch
 * norm's two gradient kernels: they read the incoming gradient instead of a
 * masked copy, and recompute y from x, the statistics and the forward's
 * weight and bias for the mask (backends/cpu/bn_act.h) instead of reading
 * it, which gives the same mask as z (z > 0 exactly where y > 0; lo < z <
 * hi exactly where lo < y < hi; NaN in both or neither). Under autocast
 * the batch norm also writes the bf16 copy the next convolution reads
 * (fold_casts.c, after this pass). Runs before the element-wise fusion
 * pass. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "compile/executable.h"

/* The activation an instruction applies: 1 ReLU, 2 hardtanh, 0 neither. */
static int activation_of(const lz_instr *s)
{
    return s->op == LZ_OP_RELU ? LZ_BN_ACT_RELU : s->op == LZ_OP_HARDTANH ? LZ_BN_ACT_HARDTANH : 0;
}

static int is_gradient_of(const lz_instr *g, const lz_instr *act)
{
    if (act->op == LZ_OP_RELU) return g->op == LZ_OP_RELU_GRAD;
    return g->op == LZ_OP_HARDTANH_GRAD && g->fattr[0] == act->fattr[0] && g->fattr[1] == act->fattr[1];
}

static int is_activation_gradient(const lz_instr *s)
{
    return s->op == LZ_OP_RELU_GRAD || s->op == LZ_OP_HARDTANH_GRAD;
}

static void remove_step(lz_program *p, int i)
{
    free(p->instrs[i].in);
    memmove(&p->instrs[i], &p->instrs[i + 1], sizeof *p->instrs * (size_t)(p->n_instrs - i - 1));
    p->n_instrs--;
}

/* The batch-norm instruction whose output is the mask value v and whose y the
   gradient instructions' kernels can recompute for it (the same x, statistics
   and eps as gradient instruction b, and no other activation folded in than
   act's), or NULL. */
static const lz_instr *mask_source(const lz_program *p, int v, const lz_instr *act,
                                  const lz_instr *b)
{
    for (int j = 0; j < p->n_instrs; j++) {
        const lz_instr *bn = &p->instrs[j];
        if (bn->out != v) continue;
        if (bn->op != LZ_OP_BATCH_NORM) return NULL;
        for (int k = 0; k < 3; k++)
            if (bn->in[k] != b->in[k]) return NULL;
        const int kind = act->op == LZ_OP_RELU_GRAD ? LZ_BN_ACT_RELU : LZ_BN_ACT_HARDTANH;
        if (bn->iattr[2] == LZ_BN_ACT_NONE) return bn;
        if (bn->iattr[2] != kind) return NULL;
        return kind == LZ_BN_ACT_RELU ||
               (bn->fattr[0] == act->fattr[0] && bn->fattr[1] == act->fattr[1]) ? bn : NULL;
    }
    return NULL;
}

/* Backward: an activation's gradient gy = act'(mask) * gz that only the
   batch norm's two gradient instructions read (as their g) is computed inside
   them from gz and y recomputed, when the mask is a batch norm's output:
   each takes the forward's weight and bias as extra last inputs. Its pass
   over memory (read 2, write 1) and gy's buffer go, and the gradient
   kernels read no mask. */
static void fold_gradients(lz_program *p)
{
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr a = p->instrs[i];
        const int gy = a.out;
        /* the batch norm's kernels read gz whole, element by element, and
           recompute the mask there: a broadcast operand (the gradient of a
           mean, once its expand is folded away) stays with the
           activation's own kernel */
        if (!is_activation_gradient(&a) || p->values[gy].kind != LZ_VALUE_TEMP ||
            p->values[gy].dtype != LZ_F32 || p->values[a.in[0]].numel != p->values[gy].numel ||
            p->values[a.in[1]].numel != p->values[gy].numel)
            continue;
        int readers = 0, ok = 1;
        for (int j = i + 1; j < p->n_instrs && ok; j++)
            for (int k = 0; k < p->instrs[j].n_in && ok; k++) {
                if (p->instrs[j].in[k] != gy) continue;
                const lz_instr *b = &p->instrs[j];
                ok = k == 3 && b->iattr[2] == 0 &&
                     (b->op == LZ_OP_BATCH_NORM_GRAD_STATS || b->op == LZ_OP_BATCH_NORM_GRAD) &&
                     mask_source(p, a.in[0], &a, b);
                readers++;
            }
        if (!ok || readers == 0) continue;
        for (int j = i + 1; j < p->n_instrs; j++) {
            lz_instr *b = &p->instrs[j];
            if (b->n_in < 4 || b->in[3] != gy) continue;
            const lz_instr *bn = mask_source(p, a.in[0], &a, b);
            const int has_w = bn->iattr[0] != 0, has_b = bn->iattr[1] != 0;
            int *in = lz_host_realloc(b->in, sizeof *in * (size_t)(b->n_in + 2));
            if (!in) {   /* out of memory, maybe after rewriting a reader: the compile fails */
                p->out_of_memory = 1;
                return;
            }
            b->in = in;
            b->in[3] = a.in[1];
            if (has_w) b->in[b->n_in++] = bn->in[3];
            if (has_b) b->in[b->n_in++] = bn->in[3 + has_w];
            b->iattr[3] = has_w;
            b->iattr[4] = has_b;
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
    for (int i = 0; i < p->n_instrs; i++) {
        lz_instr *bn = &p->instrs[i];
        if (bn->op != LZ_OP_BATCH_NORM || bn->iattr[2] != 0) continue;
        const int y = bn->out;
        if (p->values[y].kind != LZ_VALUE_TEMP || p->values[y].dtype != LZ_F32) continue;
        /* every read of y: one activation, and its gradients (mask input 0) */
        int act = -1, ok = 1;
        for (int j = i + 1; j < p->n_instrs && ok; j++)
            for (int a = 0; a < p->instrs[j].n_in && ok; a++) {
                if (p->instrs[j].in[a] != y) continue;
                if (activation_of(&p->instrs[j]) && act < 0 && a == 0) act = j;
                else if (act < 0 || a != 0 || !is_gradient_of(&p->instrs[j], &p->instrs[act])) ok = 0;
            }
        if (!ok || act < 0) continue;
        const lz_instr a = p->instrs[act];
        for (int j = act + 1; j < p->n_instrs; j++)
            if (p->instrs[j].n_in > 0 && p->instrs[j].in[0] == y) p->instrs[j].in[0] = a.out;
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
