/* Graph cutting: the post-order of pending IR reachable from a set of
 * roots, its data leaves (inputs, deduplicated by buffer) and a structural
 * key: a hash for lookup and a signature to confirm a hit. */
#ifndef LZ_GRAPH_H
#define LZ_GRAPH_H

#include <stddef.h>
#include "ir/ir.h"

typedef struct lz_graph {
    int n_nodes;
    lz_node **nodes;         /* post-order; leaves included */
    int *slot_of;            /* per node: its input slot, or -1 if pending */
    int n_inputs;
    lz_node **inputs;        /* data leaves in input-slot order */
    int n_outputs;
    lz_node **outputs;       /* roots, deduplicated, in request order */
    uint64_t hash;
    int64_t *sig;            /* structure: ops, attrs, shapes, operand and slot indices */
    size_t sig_len;
} lz_graph;

/* Cuts the graph of roots (pending nodes). Takes no references: the caller
   keeps the roots alive until the graph is released. 0, or -1 and an error
   when out of memory (g is then empty: nothing to release). */
int  lz_graph_cut(lz_graph *g, lz_node *const *roots, int n_roots);
void lz_graph_release(lz_graph *g);
/* 1 if a and b have the same structure. */
int  lz_graph_same(const int64_t *sig_a, size_t len_a, const int64_t *sig_b, size_t len_b);

/* 0 if a and b have the same structure; else 1 with what names the first
   differing node (index, op, shape, dtype, attributes: was, is now). */
int  lz_graph_sig_diff(const int64_t *a, size_t na, const int64_t *b, size_t nb, char *what, size_t cap);

#endif
