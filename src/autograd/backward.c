/* lz_backward: walks the autograd records from the loss in reverse
 * topological order. Every rule records ops, so the whole backward pass is
 * pending IR that the next barrier cuts together with the forward and the
 * update.
 *
 * The graph's vertices are records (lz_ag) and leaves (tensors that require
 * grad); the edges are those taken when each op was recorded, so a tensor
 * re-pointed since then does not redirect a gradient. */
#include <stdlib.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/thread.h"
#include "engine/tensor.h"

/* A vertex: a record, or (fn NULL) a leaf. */
typedef struct vtx { lz_ag *fn; lz_tensor *leaf; } vtx;
typedef struct vvec { vtx *v; int n, cap; } vvec;

static int push(vvec *a, vtx x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        vtx *v = lz_host_realloc(a->v, sizeof *a->v * (size_t)cap);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static uint32_t *epoch_of(vtx x) { return x.fn ? &x.fn->epoch : &x.leaf->ag_epoch; }
static lz_tensor **acc_of(vtx x) { return x.fn ? &x.fn->acc : &x.leaf->ag_acc; }

/* The vertex input i of record ag sends its gradient to, if any: the
   record that made it, or the leaf it was if that still requires grad. */
static int edge(const lz_ag *ag, int i, vtx *to)
{
    if (ag->fn[i]) { *to = (vtx){ag->fn[i], NULL}; return 1; }
    if (ag->leaf[i] && ag->leaf[i]->requires_grad) { *to = (vtx){NULL, ag->leaf[i]}; return 1; }
    return 0;
}

/* Post-order over the vertices, iterative (deep networks). A vertex's epoch
   is 2*ep once expanded and 2*ep+1 once emitted. Sets *dead to the first
   dead record reached (the backward cannot run); -1 when out of memory. */
static int topo_order(vtx root, uint32_t ep, vvec *order, lz_ag **dead)
{
    vvec stack = {0};
    int rc = push(&stack, root);
    *dead = NULL;
    while (rc == 0 && stack.n && !*dead) {
        vtx x = stack.v[stack.n - 1];
        uint32_t *e = epoch_of(x);
        if (*e < 2 * ep) {
            *e = 2 * ep;
            if (x.fn && x.fn->state != LZ_AG_LIVE) *dead = x.fn;
            for (int i = 0; rc == 0 && x.fn && !*dead && i < x.fn->n_in; i++) {
                vtx to;
                if (edge(x.fn, i, &to) && *epoch_of(to) < 2 * ep) rc = push(&stack, to);
            }
            continue;
        }
        stack.n--;
        if (*e == 2 * ep + 1) continue;
        *e = 2 * ep + 1;
        rc = push(order, x);
    }
    free(stack.v);
    return rc ? lz_errorf_int("lz_backward: out of memory ordering the autograd records") : 0;
}

/* a + g for two gradients of one value: recorded here rather than by
   lz_add, because ops sit a floor above autograd (docs/design.md, Layers).
   Both have the value's shape and dtype by construction (each rule
   reduces a broadcast gradient to its input's shape): a mismatch is a bug
   in a rule, reported instead of broadcast. */
static lz_tensor *add_grads(lz_tensor *a, lz_tensor *g)
{
    const lz_node *na = a->node, *ng = g->node;
    int same = na->dtype == ng->dtype && na->ndim == ng->ndim;
    for (int d = 0; same && d < na->ndim; d++) same = na->shape[d] == ng->shape[d];
    if (!same) {
        char sg[96], sa[96];
        return lz_errorf("lz_backward: a gradient (%s %s) does not match its value (%s %s)",
                         lz_dtype_name((lz_dtype)ng->dtype), lz_shape_str(sg, ng->ndim, ng->shape),
                         lz_dtype_name((lz_dtype)na->dtype), lz_shape_str(sa, na->ndim, na->shape));
    }
    lz_tensor *in[2] = {a, g};
    return lz_record(LZ_OP_ADD, (lz_dtype)na->dtype, na->ndim, na->shape, 2, in, NULL);
}

/* Adds g (an owned handle) into an accumulator. */
static int accumulate(lz_tensor **acc, lz_tensor *g)
{
    if (!*acc) {
        *acc = g;
        return 0;
    }
    lz_tensor *sum = add_grads(*acc, g);
    lz_free(g);
    if (!sum) return -1;
    lz_scope_release(sum);
    lz_free(*acc);
    *acc = sum;
    return 0;
}

/* Runs ag's rule on gradient g and sends each input's gradient on. */
static int run_rule(lz_ag *ag, lz_tensor *g, uint32_t ep)
{
    lz_tensor *gin_small[8] = {0}, **gin = gin_small;
    if (ag->n_in > 8) {
        gin = lz_host_calloc((size_t)ag->n_in, sizeof *gin);
        if (!gin) return lz_errorf_int("lz_backward: out of memory in the backward of %s", ag->name);
    }
    lz_scope_begin();
    int rc = ag->backward(ag, ag->out, g, gin);
    for (int i = 0; i < ag->n_in; i++)
        if (gin[i]) lz_scope_release(gin[i]);
    lz_scope_end();
    for (int i = 0; i < ag->n_in; i++) {
        vtx to;
        if (!gin[i]) continue;
        if (rc == 0 && edge(ag, i, &to) && *epoch_of(to) >= 2 * ep) rc = accumulate(acc_of(to), gin[i]);
        else lz_free(gin[i]);
    }
    if (rc && !lz_last_error()) lz_errorf("lz_backward: backward of %s failed", ag->name);
    if (gin != gin_small) free(gin);
    return rc;
}

static uint32_t pass_epoch;

int lz_backward(lz_tensor *loss)
{
    if (!loss) return lz_errorf_int("lz_backward: loss is NULL");
    if (lz_owner_check("lz_backward")) return -1;
    loss = lz_tensor_of(loss);   /* an lz_retain handle: its tensor's record */
    if (lz_node_numel(loss->node) != 1) {
        char s[96];
        return lz_errorf_int("lz_backward: loss %s has %lld elements, not 1",
                             lz_shape_str(s, loss->node->ndim, loss->node->shape),
                             (long long)lz_node_numel(loss->node));
    }
    if (loss->ag && loss->ag->state != LZ_AG_LIVE) return lz_ag_dead_error(loss->ag);
    if (!lz_needs_grad(loss)) return lz_errorf_int("lz_backward: loss does not depend on any tensor that requires grad");
    uint32_t ep = ++pass_epoch;
    vvec order = {0};
    vtx root = loss->ag ? (vtx){loss->ag, NULL} : (vtx){NULL, loss};
    lz_ag *dead;
    int rc = topo_order(root, ep, &order, &dead);
    if (rc != 0 || dead) {
        /* nothing recorded, nothing freed: the graph is as it was */
        free(order.v);
        return rc ? rc : lz_ag_dead_error(dead);
    }

    lz_no_grad_begin();
    /* d loss / d loss = 1: a constant 1 is one of the two values that may
       be baked into a graph */
    lz_attrs one = {.n_fattr = 1, .fattr = {1.0f}};
    lz_tensor *seed = lz_record(LZ_OP_FILL, LZ_F32, loss->node->ndim, loss->node->shape, 0, NULL, &one);
    if (seed) lz_scope_release(seed);
    else rc = -1;
    *acc_of(root) = seed;

    for (int k = order.n - 1; k >= 0 && rc == 0; k--) {
        vtx x = order.v[k];
        lz_tensor **acc = acc_of(x), *g = *acc;
        if (!g) continue;
        *acc = NULL;
        if (!x.fn) {
            /* a leaf: add into its grad, keeping the grad's handle */
            lz_tensor *t = x.leaf;
            if (!t->grad) {
                t->grad = g;
                continue;
            }
            lz_tensor *sum = add_grads(t->grad, g);
            rc = sum ? lz_assign(t->grad, sum) : -1;
            lz_free(sum);
            lz_free(g);
            continue;
        }
        rc = run_rule(x.fn, g, ep);
        lz_free(g);
    }
    lz_no_grad_end();

    /* The graph is used up, as in PyTorch: free the saved values (so the
       activations can go) and leave each record marked freed, so a second
       backward through it says so. */
    for (int k = 0; k < order.n; k++) {
        vtx x = order.v[k];
        lz_tensor **acc = acc_of(x);
        if (*acc) { lz_free(*acc); *acc = NULL; }
        if (x.fn) lz_ag_release(x.fn);
    }
    free(order.v);
    return rc;
}
