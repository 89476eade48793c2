/* IR nodes: one recorded operation each.
 *
 * A node is either pending (an op over source nodes) or data (it has a
 * buffer: a data leaf made from host memory, or a node that an execution has
 * materialised). Materialising a node turns every tensor that points at it
 * into data at once and drops its sources, so the IR above it can be freed.
 */
#ifndef LZ_IR_H
#define LZ_IR_H

#include <stdint.h>
#include "base/op.h"
#include "lazyc.h"

struct lz_buffer;

typedef struct lz_node {
    int refs;
    uint16_t op;
    uint8_t  dtype;          /* lz_dtype */
    uint8_t  ndim;
    int64_t  shape[LZ_MAX_DIMS];
    int64_t  iattr[LZ_MAX_IATTR];
    float    fattr[LZ_MAX_FATTR];
    uint8_t  n_iattr, n_fattr;
    uint64_t hash;           /* structural, computed once at creation */
    struct lz_buffer *buf;   /* non-NULL: data (leaf or materialised) */
    /* graph cutting scratch, valid during one cut only */
    uint32_t cut_epoch;
    int32_t  cut_index;
    int      n_src;
    struct lz_node *src[];   /* NULL after materialisation */
} lz_node;

/* Attributes given to lz_node_new; arrays may be NULL when counts are 0. */
typedef struct lz_attrs {
    int n_iattr, n_fattr;
    int64_t iattr[LZ_MAX_IATTR];
    float   fattr[LZ_MAX_FATTR];
} lz_attrs;

/* A pending node over src (each gains a reference). attrs may be NULL. */
lz_node *lz_node_new(lz_op op, lz_dtype dtype, int ndim, const int64_t *shape,
                     int n_src, lz_node *const *src, const lz_attrs *attrs);
/* A data node on buf (takes a reference to buf). */
lz_node *lz_node_new_data(struct lz_buffer *buf, lz_dtype dtype, int ndim, const int64_t *shape);
void     lz_node_ref(lz_node *n);
void     lz_node_unref(lz_node *n);
/* Makes n data on buf and drops its sources. */
void     lz_node_materialise(lz_node *n, struct lz_buffer *buf);
int64_t  lz_node_numel(const lz_node *n);

/* Hash of n as a data leaf: shape and dtype only, never values. */
uint64_t lz_node_leaf_hash(const lz_node *n);

#endif
