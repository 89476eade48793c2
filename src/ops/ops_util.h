/* Helpers shared by op constructors: shape inference and gradient shaping. */
#ifndef LZ_OPS_UTIL_H
#define LZ_OPS_UTIL_H

#include "engine/tensor.h"

/* A new tensor on g's current node (a handle of its own, in the current
   scope, with no autograd record): what a backward rule returns when the
   gradient passes through unchanged. Not lz_retain(g): that handle would
   share g itself, and a gradient must be a tensor of its own. */
lz_tensor *lz_same_value(lz_tensor *g);

struct lz_ag;
/* The backward of a one-input op whose gradient is one step, op(x, g)
   with x's shape (relu, gelu, hardtanh, layer norm): gin[0] unless x
   needs no gradient; attrs: the step's attributes (NULL: none). */
int lz_grad_of_x_g(lz_op op, const struct lz_ag *ag, lz_tensor *g, lz_tensor **gin,
                   const lz_attrs *attrs);

/* numpy broadcast of two shapes; on mismatch sets "op: shapes [..] and [..]
   cannot broadcast" and returns -1. */
int lz_broadcast_shape(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                       int *nout, int64_t *out);
/* Normalises axis (negative counts from the end); -1 + error if out of range. */
int lz_norm_axis(const char *op, int axis, int ndim);
/* Sums g over the axes that broadcasting added or stretched so that it has
   like's shape (returns a new reference to g's tensor if nothing to do).
   ops/reduce.c. */
lz_tensor *lz_reduce_to_like(lz_tensor *g, const lz_tensor *like);
int64_t lz_shape_numel(int ndim, const int64_t *shape);
/* 0 with "op: dtype bf16 not supported ..." set when t is bf16, whose
   only kernels are products, casts, shape steps and the norms; else 1. */
int lz_refuse_bf16(const char *op, const lz_tensor *t);
/* 1 if the dtype is f32; otherwise sets "op: dtype X not supported (f32 only)". */
int lz_require_f32(const char *op, const lz_tensor *t);

/* 1 if the dtype is f32 or bf16 (a product's operand); otherwise sets
   "op: dtype X not supported (f32 or bf16 only)". */
int lz_require_float(const char *op, const lz_tensor *t);
/* The dtype a product (matmul, linear, conv2d) computes on: bf16 inside
   a bf16 autocast region or when either operand is bf16, else f32. */
lz_dtype lz_product_dtype(const lz_tensor *a, const lz_tensor *b);
/* The dtype a product of float32 operands a and b takes: as
   lz_product_dtype, except that under autocast it stays float32 where
   LZ_AUTOCAST_PRODUCTS says so or the backend runs it faster in float32
   (op and its n dims as base/product.h describes them). ops/autocast.c. */
lz_dtype lz_product_choice(const lz_tensor *a, const lz_tensor *b, int op, int n,
                           const int64_t *dims);
/* x as an operand of dtype dt: a new handle to x when it is dt already,
   else its cast (a parameter's from the region's cache: made once, shared
   by every use; its bf16 copy when the last update made one). ops/autocast.c. */
lz_tensor *lz_product_operand(lz_tensor *x, lz_dtype dt);
/* After an optimizer assigned parameter w its new value: records w's bf16
   copy for the next step's products when a product read w under autocast
   since the last update, else forgets the copy. 0, or -1 on failure.
   ops/autocast.c. */
int lz_autocast_refresh(lz_tensor *w);
/* x cast to value's dtype where value holds that cast already: a handle on
   value's node with lz_cast's gradient to x. ops/cast.c. */
lz_tensor *lz_cast_from(lz_tensor *x, lz_tensor *value);

static inline int lz_t_ndim(const lz_tensor *t) { return t->node->ndim; }
static inline const int64_t *lz_t_shape(const lz_tensor *t) { return t->node->shape; }
static inline lz_dtype lz_t_dtype(const lz_tensor *t) { return (lz_dtype)t->node->dtype; }

#endif
