#include "ir/graph.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"

static uint32_t epoch;

/* Out of memory, a push is dropped and counted in *failed: the cut then
   fails as a whole. */
static int failed;

typedef struct vec { void **v; int n, cap; } vec;

static void vec_push(vec *a, void *p)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        void **v = lz_host_realloc(a->v, sizeof *a->v * (size_t)cap);
        if (!v) { failed = 1; return; }
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = p;
}

typedef struct sigbuf { int64_t *v; size_t n, cap; } sigbuf;

static void sig_push(sigbuf *s, int64_t x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        int64_t *v = lz_host_realloc(s->v, sizeof *s->v * cap);
        if (!v) { failed = 1; return; }
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = x;
}

static void sig_shape(sigbuf *s, const lz_node *n)
{
    sig_push(s, n->dtype);
    sig_push(s, n->ndim);
    for (int d = 0; d < n->ndim; d++) sig_push(s, n->shape[d]);
}

/* A node counts as a leaf of this graph when it holds data. */
static int is_leaf(const lz_node *n) { return n->buf != NULL; }

int lz_graph_cut(lz_graph *g, lz_node *const *roots, int n_roots)
{
    memset(g, 0, sizeof *g);
    failed = 0;
    uint32_t ep = ++epoch;
    vec order = {0}, inputs = {0}, outputs = {0}, stack = {0}, slots = {0};
    sigbuf sig = {0};
    uint64_t h = 0;
    /* Leaves are deduplicated by buffer: two nodes on one buffer are one
       input slot, kept in the buffer's cut scratch. */
    for (int r = 0; r < n_roots; r++) {
        lz_node *root = roots[r];
        /* iterative post-order: a node is pushed twice, the second time
           (marked by a negative cut_index) to emit it */
        if (root->cut_epoch != ep) vec_push(&stack, root);
        while (stack.n && !failed) {
            lz_node *n = stack.v[stack.n - 1];
            if (n->cut_epoch != ep) {
                n->cut_epoch = ep;
                n->cut_index = -1;
                if (!is_leaf(n))
                    for (int i = n->n_src - 1; i >= 0; i--)
                        if (n->src[i]->cut_epoch != ep) vec_push(&stack, n->src[i]);
                continue;
            }
            stack.n--;
            if (n->cut_index >= 0) continue;
            n->cut_index = order.n;
            vec_push(&order, n);
            if (is_leaf(n)) {
                if (n->buf->cut_epoch != ep) {
                    n->buf->cut_epoch = ep;
                    n->buf->cut_slot = inputs.n;
                    vec_push(&inputs, n);
                }
                int slot = n->buf->cut_slot;
                vec_push(&slots, (void *)(intptr_t)slot);
                sig_push(&sig, LZ_OP_LEAF);
                sig_shape(&sig, n);
                sig_push(&sig, slot);
                h = lz_hash_mix(lz_hash_mix(h, lz_node_leaf_hash(n)), (uint64_t)slot);
            } else {
                vec_push(&slots, (void *)(intptr_t)-1);
                sig_push(&sig, n->op);
                sig_shape(&sig, n);
                sig_push(&sig, n->n_iattr);
                for (int i = 0; i < n->n_iattr; i++) sig_push(&sig, n->iattr[i]);
                sig_push(&sig, n->n_fattr);
                for (int i = 0; i < n->n_fattr; i++) {
                    uint32_t bits;
                    memcpy(&bits, &n->fattr[i], sizeof bits);
                    sig_push(&sig, bits);
                }
                sig_push(&sig, n->n_src);
                h = lz_hash_mix(h, n->hash);
                for (int i = 0; i < n->n_src; i++) {
                    sig_push(&sig, n->src[i]->cut_index);
                    h = lz_hash_mix(h, (uint64_t)n->src[i]->cut_index);
                }
            }
        }
    }
    /* outputs: roots deduplicated, in request order */
    sig_push(&sig, -1);
    for (int r = 0; r < n_roots; r++) {
        int dup = 0;
        for (int j = 0; j < outputs.n; j++) dup |= outputs.v[j] == roots[r];
        if (dup) continue;
        vec_push(&outputs, roots[r]);
        sig_push(&sig, roots[r]->cut_index);
        h = lz_hash_mix(h, (uint64_t)roots[r]->cut_index);
    }
    free(stack.v);
    g->slot_of = failed ? NULL : lz_host_malloc(sizeof *g->slot_of * (size_t)(order.n ? order.n : 1));
    if (!g->slot_of) {
        free(order.v);
        free(inputs.v);
        free(outputs.v);
        free(slots.v);
        free(sig.v);
        return lz_errorf_int("out of memory cutting a graph (%d nodes so far)", order.n);
    }
    g->n_nodes = order.n;
    for (int i = 0; i < order.n; i++) g->slot_of[i] = (int)(intptr_t)slots.v[i];
    free(slots.v);
    g->nodes = (lz_node **)order.v;
    g->n_inputs = inputs.n;
    g->inputs = (lz_node **)inputs.v;
    g->n_outputs = outputs.n;
    g->outputs = (lz_node **)outputs.v;
    g->hash = lz_hash_mix(h, (uint64_t)sig.n);
    g->sig = sig.v;
    g->sig_len = sig.n;
    return 0;
}

void lz_graph_release(lz_graph *g)
{
    free(g->nodes);
    free(g->slot_of);
    free(g->inputs);
    free(g->outputs);
    free(g->sig);
    memset(g, 0, sizeof *g);
}

int lz_graph_same(const int64_t *a, size_t na, const int64_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, sizeof *a * na) == 0;
}

/* Length of the signature segment of the node starting at a[i]: a leaf is
   op, dtype, ndim, shape, slot; an op is op, dtype, ndim, shape, n_iattr,
   iattr, n_fattr, fattr, n_src, sources (lz_graph_cut). 0 at the outputs. */
static size_t sig_node_len(const int64_t *a, size_t n, size_t i)
{
    if (i >= n || a[i] < 0) return 0;
    size_t j = i + 1;
    if (j + 1 >= n) return n - i;
    j += 2 + (size_t)a[j + 1];                  /* dtype, ndim, shape */
    if (a[i] == LZ_OP_LEAF) return j + 1 - i;   /* slot */
    for (int k = 0; k < 3 && j < n; k++) j += 1 + (size_t)a[j];   /* iattr, fattr, sources */
    return (j > n ? n : j) - i;
}

static void describe_node(char *buf, size_t cap, const int64_t *a, size_t len)
{
    char shape[96];
    int64_t dims[LZ_MAX_DIMS];
    int nd = len > 2 ? (int)a[2] : 0;
    if (nd > LZ_MAX_DIMS) nd = LZ_MAX_DIMS;
    for (int d = 0; d < nd && (size_t)(3 + d) < len; d++) dims[d] = a[3 + d];
    size_t off = (size_t)snprintf(buf, cap, "%s %s %s", a[0] == LZ_OP_LEAF ? "input" : lz_op_name((lz_op)a[0]),
                                  lz_shape_str(shape, nd, dims), lz_dtype_name((lz_dtype)(len > 1 ? a[1] : 0)));
    if (a[0] == LZ_OP_LEAF || off >= cap) return;
    size_t j = 3 + (size_t)nd;
    if (j < len && a[j] > 0) {
        off += (size_t)snprintf(buf + off, cap - off, " iattr");
        for (int64_t k = 0; k < a[j] && j + 1 + (size_t)k < len && off < cap; k++)
            off += (size_t)snprintf(buf + off, cap - off, " %lld", (long long)a[j + 1 + k]);
    }
    j += 1 + (j < len ? (size_t)a[j] : 0);
    if (j < len && a[j] > 0 && off < cap) {
        off += (size_t)snprintf(buf + off, cap - off, " fattr");
        for (int64_t k = 0; k < a[j] && j + 1 + (size_t)k < len && off < cap; k++) {
            uint32_t bits = (uint32_t)a[j + 1 + k];
            float f;
            memcpy(&f, &bits, sizeof f);
            off += (size_t)snprintf(buf + off, cap - off, " %.9g", (double)f);
        }
    }
}

int lz_graph_sig_diff(const int64_t *a, size_t na, const int64_t *b, size_t nb, char *what, size_t cap)
{
    size_t i = 0, j = 0;
    for (int node = 0;; node++) {
        size_t la = sig_node_len(a, na, i), lb = sig_node_len(b, nb, j);
        if (!la || !lb) {
            if (la || lb) {
                snprintf(what, cap, "the graph had %s nodes, it now has %s (node %d)", la ? "more" : "fewer",
                         la ? "fewer" : "more", node);
                return 1;
            }
            break;
        }
        if (la != lb || memcmp(a + i, b + j, sizeof *a * la)) {
            char was[256], now[256];
            describe_node(was, sizeof was, a + i, la);
            describe_node(now, sizeof now, b + j, lb);
            snprintf(what, cap, "node %d was %s, is now %s", node, was, now);
            return 1;
        }
        i += la;
        j += lb;
    }
    if (!lz_graph_same(a + i, na - i, b + j, nb - j)) {
        snprintf(what, cap, "the graph's outputs differ");
        return 1;
    }
    return 0;
}
