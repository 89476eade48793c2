#include "ir/ir.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"

static uint64_t hash_shape(uint64_t h, const lz_node *n)
{
    h = lz_hash_mix(h, n->dtype);
    h = lz_hash_mix(h, n->ndim);
    for (int d = 0; d < n->ndim; d++) h = lz_hash_mix(h, (uint64_t)n->shape[d]);
    return h;
}

uint64_t lz_node_leaf_hash(const lz_node *n)
{
    return hash_shape(lz_hash_mix(0, LZ_OP_LEAF), n);
}

static lz_node *node_alloc(int n_src)
{
    lz_node *n = lz_host_calloc(1, sizeof *n + sizeof(lz_node *) * (size_t)n_src);
    if (!n) return lz_errorf("out of memory recording an IR node");
    n->refs = 1;
    n->n_src = n_src;
    n->cut_index = -1;
    return n;
}

static void set_shape(lz_node *n, lz_dtype dtype, int ndim, const int64_t *shape)
{
    assert(ndim >= 0 && ndim <= LZ_MAX_DIMS);
    n->dtype = (uint8_t)dtype;
    n->ndim = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++) n->shape[d] = shape[d];
}

lz_node *lz_node_new(lz_op op, lz_dtype dtype, int ndim, const int64_t *shape,
                     int n_src, lz_node *const *src, const lz_attrs *attrs)
{
    lz_node *n = node_alloc(n_src);
    if (!n) return NULL;
    n->op = (uint16_t)op;
    set_shape(n, dtype, ndim, shape);
    uint64_t h = hash_shape(lz_hash_mix(0, op), n);
    if (attrs) {
        assert(attrs->n_iattr <= LZ_MAX_IATTR && attrs->n_fattr <= LZ_MAX_FATTR);
        n->n_iattr = (uint8_t)attrs->n_iattr;
        n->n_fattr = (uint8_t)attrs->n_fattr;
        memcpy(n->iattr, attrs->iattr, sizeof(int64_t) * (size_t)attrs->n_iattr);
        memcpy(n->fattr, attrs->fattr, sizeof(float) * (size_t)attrs->n_fattr);
    }
    h = lz_hash_mix(h, n->n_iattr);
    for (int i = 0; i < n->n_iattr; i++) h = lz_hash_mix(h, (uint64_t)n->iattr[i]);
    h = lz_hash_mix(h, n->n_fattr);
    for (int i = 0; i < n->n_fattr; i++) {
        uint32_t bits;
        memcpy(&bits, &n->fattr[i], sizeof bits);
        h = lz_hash_mix(h, bits);
    }
    for (int i = 0; i < n_src; i++) {
        n->src[i] = src[i];
        lz_node_ref(src[i]);
        h = lz_hash_mix(h, src[i]->buf ? lz_node_leaf_hash(src[i]) : src[i]->hash);
    }
    n->hash = h;
    lz_metrics_count_node();
    return n;
}

lz_node *lz_node_new_data(lz_buffer *buf, lz_dtype dtype, int ndim, const int64_t *shape)
{
    lz_node *n = node_alloc(0);
    if (!n) return NULL;
    n->op = LZ_OP_LEAF;
    set_shape(n, dtype, ndim, shape);
    n->buf = buf;
    lz_buffer_ref(buf);
    n->hash = lz_node_leaf_hash(n);
    return n;
}

void lz_node_ref(lz_node *n) { n->refs++; }

void lz_node_unref(lz_node *n)
{
    /* Iterative: a long chain of IR must not recurse once per node. */
    lz_node *stack_small[64], **stack = stack_small;
    int top = 0, cap = 64;
    stack[top++] = n;
    while (top) {
        lz_node *x = stack[--top];
        if (--x->refs > 0) continue;
        for (int i = 0; i < x->n_src; i++) {
            if (!x->src[i]) continue;
            if (top == cap) {
                lz_node **bigger = lz_host_malloc(sizeof *bigger * (size_t)cap * 2);
                if (!bigger) {
                    /* out of memory: this one source by recursion, which
                       nests only as deep as allocations keep failing */
                    lz_node_unref(x->src[i]);
                    continue;
                }
                memcpy(bigger, stack, sizeof *stack * (size_t)top);
                if (stack != stack_small) free(stack);
                stack = bigger;
                cap *= 2;
            }
            stack[top++] = x->src[i];
        }
        if (x->buf) lz_buffer_unref(x->buf);
        free(x);
    }
    if (stack != stack_small) free(stack);
}

void lz_node_materialise(lz_node *n, lz_buffer *buf)
{
    assert(!n->buf);
    n->buf = buf;
    lz_buffer_ref(buf);
    for (int i = 0; i < n->n_src; i++) {
        if (n->src[i]) lz_node_unref(n->src[i]);
        n->src[i] = NULL;
    }
    n->n_src = 0;
}

int64_t lz_node_numel(const lz_node *n)
{
    int64_t k = 1;
    for (int d = 0; d < n->ndim; d++) k *= n->shape[d];
    return k;
}
