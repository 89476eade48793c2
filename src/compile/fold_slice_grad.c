/* The gradient of a tensor cut into slices along one axis is the sum of
 * the slices' gradients, each a zero-filled copy of the whole tensor with
 * its slice written in (attention's q, k and v from one qkv product): three
 * full writes and a pass adding them up. When the slices tile the axis,
 * that sum is the slices' gradients side by side: the tree of adds becomes
 * one cat and the zero-filled tensors go.
 *
 * Figures: docs/performance.md, "Fusion". */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "compile/program.h"

#define MAX_PARTS 16

typedef struct tree {
    int leaf[MAX_PARTS], n_leaf;   /* slice-gradient instructions */
    int inner[MAX_PARTS], n_inner; /* add instructions below the root */
} tree;

/* Whether value v, read by an add of the tree, is a part of it: produced
   by an add or a slice gradient of root's shape and dtype that nothing
   else reads. Collects the tree's instructions into t. */
static int collect(const lz_program *p, const int *producer, const int *uses, int v,
                   const lz_value *root, tree *t)
{
    const int i = producer[v];
    const lz_value *val = &p->values[v];
    if (i < 0 || uses[v] != 1 || val->kind != LZ_VALUE_TEMP || val->dtype != root->dtype ||
        val->ndim != root->ndim || memcmp(val->shape, root->shape, sizeof val->shape))
        return 0;
    const lz_instr *s = &p->instrs[i];
    if (s->op == LZ_OP_SLICE_GRAD) {
        if (t->n_leaf == MAX_PARTS) return 0;
        t->leaf[t->n_leaf++] = i;
        return 1;
    }
    if (s->op != LZ_OP_ADD || t->n_inner == MAX_PARTS) return 0;
    t->inner[t->n_inner++] = i;
    return collect(p, producer, uses, s->in[0], root, t) &&
           collect(p, producer, uses, s->in[1], root, t);
}

/* Sorts the leaves by start; 0 unless they share an axis and tile it. */
static int tiles_axis(const lz_program *p, tree *t, int64_t len)
{
    for (int a = 1; a < t->n_leaf; a++)
        for (int b = a; b > 0 && p->instrs[t->leaf[b]].iattr[1] < p->instrs[t->leaf[b - 1]].iattr[1]; b--) {
            int x = t->leaf[b];
            t->leaf[b] = t->leaf[b - 1];
            t->leaf[b - 1] = x;
        }
    const int64_t axis = p->instrs[t->leaf[0]].iattr[0];
    int64_t at = 0;
    for (int a = 0; a < t->n_leaf; a++) {
        const lz_instr *s = &p->instrs[t->leaf[a]];
        if (s->iattr[0] != axis || s->iattr[1] != at) return 0;
        at += p->values[s->in[0]].shape[axis];
    }
    return at == len;
}

void lz_fold_slice_grads(lz_program *p)
{
    const size_t nv = (size_t)(p->n_values ? p->n_values : 1);
    int *producer = lz_host_malloc(sizeof *producer * nv), *uses = lz_host_calloc(nv, sizeof *uses);
    char *dead = lz_host_calloc((size_t)p->n_instrs + 1, 1);
    if (!producer || !uses || !dead) {
        free(producer); free(uses); free(dead);
        p->out_of_memory = 1;
        return;
    }
    for (int v = 0; v < p->n_values; v++) producer[v] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        producer[p->instrs[i].out] = i;
        for (int a = 0; a < p->instrs[i].n_in; a++) uses[p->instrs[i].in[a]]++;
    }
    for (int i = 0; i < p->n_instrs; i++) {
        lz_instr *s = &p->instrs[i];
        const lz_value *root = &p->values[s->out];
        if (s->op != LZ_OP_ADD || dead[i]) continue;
        tree t = {.n_leaf = 0};
        if (!collect(p, producer, uses, s->in[0], root, &t) ||
            !collect(p, producer, uses, s->in[1], root, &t))
            continue;
        const int64_t axis = p->instrs[t.leaf[0]].iattr[0];
        if (axis < 0 || axis >= root->ndim || !tiles_axis(p, &t, root->shape[axis])) continue;
        int *in = lz_host_malloc(sizeof *in * (size_t)t.n_leaf);
        if (!in) continue;   /* out of memory: this sum stays unfolded */
        for (int a = 0; a < t.n_leaf; a++) {
            in[a] = p->instrs[t.leaf[a]].in[0];
            dead[t.leaf[a]] = 1;
        }
        for (int a = 0; a < t.n_inner; a++) dead[t.inner[a]] = 1;
        free(s->in);
        const int out = s->out;
        memset(s, 0, sizeof *s);
        s->op = LZ_OP_CAT;
        s->out = out;
        s->n_in = t.n_leaf;
        s->in = in;
        s->iattr[0] = axis;
    }
    lz_program_drop_instrs(p, dead);
    free(dead);
    free(uses);
    free(producer);
}
