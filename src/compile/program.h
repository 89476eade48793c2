/* A lowered graph: values, a schedule of kernel steps, and a memory plan.
 * This is what backends see: no IR nodes, no tensors. */
#ifndef LZ_PROGRAM_H
#define LZ_PROGRAM_H

#include <stddef.h>
#include <stdint.h>
#include "lazyc.h"
#include "core/ir.h"

enum { LZ_VALUE_INPUT, LZ_VALUE_OUTPUT, LZ_VALUE_TEMP, LZ_VALUE_CONST };

typedef struct lz_value {
    uint8_t dtype, ndim, kind;
    int64_t shape[LZ_MAX_DIMS];
    int64_t numel;
    size_t  nbytes;
    int     slot;            /* input or output slot, for those kinds */
    size_t  offset;          /* arena offset, for temps */
} lz_value;

typedef struct lz_step {
    uint16_t op;             /* lz_op: backends dispatch on it */
    int      out;            /* value index */
    int      n_in;
    int     *in;             /* value indices */
    int64_t  iattr[LZ_MAX_IATTR];
    float    fattr[LZ_MAX_FATTR];
} lz_step;

typedef struct lz_program {
    int       n_values;
    lz_value *values;
    int       n_steps;
    lz_step  *steps;
    int       n_inputs, n_outputs;
    size_t    arena_bytes;   /* temps live here, placed by liveness */
    double    flops;         /* matmul (and later conv) work per run */
} lz_program;

void lz_program_free(lz_program *p);

#endif
