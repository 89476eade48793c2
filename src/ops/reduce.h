/* What the reductions share (reduce.c): sum, mean and max are one
 * constructor, and their gradients view g with the reduced axes kept. */
#ifndef LZ_OPS_REDUCE_H
#define LZ_OPS_REDUCE_H

#include "autograd/autograd.h"

/* Checks x and the axes, and records op over them (bw: its backward rule,
   attached to float32 results); a sum of int32 sums int64, as torch. */
lz_tensor *lz_reduce_op(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x, int naxes,
                        const int *axes, int keepdim);
/* g (shaped like the output) with the reduced axes restored as size 1, so
   it broadcasts against the input. */
lz_tensor *lz_reduce_keepdim_view(const lz_ag *ag, lz_tensor *g);

#endif
