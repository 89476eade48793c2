/* lz_backward: walks the autograd records from the loss in reverse
 * topological order. Every rule records ops, so the whole backward pass is
 * pending IR that the next barrier cuts together with the forward and the
 * update. */
#include <stdlib.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "backend/fault.h"
#include "core/tensor.h"
#include "core/thread.h"

typedef struct tvec { lz_tensor **v; int n, cap; } tvec;

/* 0, or -1 (out of memory; a keeps what it had) */
static int push(tvec *a, lz_tensor *t)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        lz_tensor **v = lz_host_realloc(a->v, sizeof *a->v * (size_t)cap);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = t;
    return 0;
}

/* Post-order over the autograd records, iterative (deep networks). A
 * tensor's ag_epoch is 2*ep once expanded and 2*ep+1 once emitted. */
static int topo_order(lz_tensor *root, uint32_t ep, tvec *order)
{
    tvec stack = {0};
    int rc = push(&stack, root);
    while (stack.n && rc == 0) {
        lz_tensor *t = stack.v[stack.n - 1];
        if (t->ag_epoch < 2 * ep) {
            t->ag_epoch = 2 * ep;
            if (t->ag)
                for (int i = 0; i < t->ag->n_in; i++)
                    if (lz_needs_grad(t->ag->in[i]) && t->ag->in[i]->ag_epoch < 2 * ep &&
                        (rc = push(&stack, t->ag->in[i])) != 0)
                        break;
            continue;
        }
        stack.n--;
        if (t->ag_epoch == 2 * ep + 1) continue;
        t->ag_epoch = 2 * ep + 1;
        rc = push(order, t);
    }
    free(stack.v);
    return rc ? lz_errorf_int("lz_backward: out of memory ordering the autograd records") : 0;
}

/* Adds g (an owned handle) into t's accumulator for this pass. */
static int accumulate(lz_tensor *t, lz_tensor *g)
{
    if (!t->ag_acc) {
        t->ag_acc = g;
        return 0;
    }
    lz_tensor *sum = lz_add(t->ag_acc, g);
    lz_free(g);
    if (!sum) return -1;
    lz_scope_release(sum);
    lz_free(t->ag_acc);
    t->ag_acc = sum;
    return 0;
}

static uint32_t pass_epoch;

int lz_backward(lz_tensor *loss)
{
    if (!loss) return lz_errorf_int("lz_backward: loss is NULL");
    if (lz_owner_check("lz_backward")) return -1;
    if (lz_node_numel(loss->node) != 1) {
        char s[96];
        return lz_errorf_int("lz_backward: loss %s has %lld elements, not 1",
                             lz_shape_str(s, loss->node->ndim, loss->node->shape),
                             (long long)lz_node_numel(loss->node));
    }
    if (!lz_needs_grad(loss)) return lz_errorf_int("lz_backward: loss does not depend on any tensor that requires grad");
    uint32_t ep = ++pass_epoch;
    tvec order = {0};
    int rc = topo_order(loss, ep, &order);

    lz_no_grad_begin();
    /* d loss / d loss = 1: a constant 1 is one of the two values that may
       be baked into a graph */
    lz_attrs one = {.n_fattr = 1, .fattr = {1.0f}};
    loss->ag_acc = rc ? NULL : lz_record(LZ_OP_FILL, LZ_F32, loss->node->ndim, loss->node->shape, 0, NULL, &one);
    if (loss->ag_acc) lz_scope_release(loss->ag_acc);
    else rc = -1;

    for (int k = order.n - 1; k >= 0 && rc == 0; k--) {
        lz_tensor *t = order.v[k];
        lz_tensor *g = t->ag_acc;
        if (!g) continue;
        t->ag_acc = NULL;
        if (!t->ag) {
            /* a leaf: add into its grad, keeping the grad's handle */
            if (!t->grad) {
                t->grad = g;
                continue;
            }
            lz_tensor *sum = lz_add(t->grad, g);
            rc = sum ? lz_assign(t->grad, sum) : -1;
            lz_free(sum);
            lz_free(g);
            continue;
        }
        lz_ag *ag = t->ag;
        lz_tensor *gin_small[8] = {0}, **gin = gin_small;
        if (ag->n_in > 8 && !(gin = calloc((size_t)ag->n_in, sizeof *gin))) {
            lz_free(g);
            rc = lz_errorf_int("lz_backward: out of memory at %s", ag->name);
            break;
        }
        lz_scope_begin();
        rc = ag->backward(ag, t, g, gin);
        for (int i = 0; i < ag->n_in; i++)
            if (gin[i]) lz_scope_release(gin[i]);
        lz_scope_end();
        if (rc == 0) {
            for (int i = 0; i < ag->n_in; i++) {
                if (!gin[i]) continue;
                if (!lz_needs_grad(ag->in[i]) || ag->in[i]->ag_epoch < 2 * ep) { lz_free(gin[i]); continue; }
                if (rc == 0) rc = accumulate(ag->in[i], gin[i]);
                else lz_free(gin[i]);
            }
        } else {
            for (int i = 0; i < ag->n_in; i++) lz_free(gin[i]);
            if (!lz_last_error()) lz_errorf("lz_backward: backward of %s failed", ag->name);
        }
        if (gin != gin_small) free(gin);
        lz_free(g);
    }
    lz_no_grad_end();

    /* The graph is used up, as in PyTorch: drop the records so saved
       activations can be freed. */
    for (int k = 0; k < order.n; k++) {
        lz_tensor *t = order.v[k];
        if (t->ag_acc) { lz_free(t->ag_acc); t->ag_acc = NULL; }
        if (t->ag) { lz_ag_free(t->ag); t->ag = NULL; }
    }
    free(order.v);
    return rc;
}
