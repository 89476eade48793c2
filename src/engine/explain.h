/* Why graphs compile: on every cache miss the new graph is compared with
 * the nearest cached one and the first difference gives the cause (counted
 * for lz_metrics_report; printed with LZ_EXPLAIN_COMPILES=1). Every
 * barrier also feeds a short history: a process that keeps compiling gets
 * one warning naming the usual mistakes. */
#ifndef LZ_EXPLAIN_H
#define LZ_EXPLAIN_H

#include "ir/graph.h"

typedef enum lz_compile_cause {
    LZ_CAUSE_FIRST,      /* the cache was empty */
    LZ_CAUSE_GREW,       /* the nearest graph is a prefix: more nodes (a missing lz_mark_step) */
    LZ_CAUSE_SHRANK,     /* fewer nodes */
    LZ_CAUSE_OP,         /* another op at a node */
    LZ_CAUSE_SHAPE,
    LZ_CAUSE_DTYPE,
    LZ_CAUSE_ATTR,       /* an integer attribute (axis, stride, ...) */
    LZ_CAUSE_CONSTANT,   /* a float baked into the graph (fill value, exponent, p, ...) */
    LZ_CAUSE_OPERANDS,   /* the same ops wired differently */
    LZ_CAUSE_INPUTS,     /* leaves sharing buffers differently */
    LZ_CAUSE_OUTPUTS,    /* other tensors requested */
    LZ_CAUSE_COUNT
} lz_compile_cause;

const char *lz_compile_cause_name(int cause);
/* Classifies a miss of g against the cache as it is now (call before
   inserting g's executable), counts the cause and prints the line when
   LZ_EXPLAIN_COMPILES is on. */
void lz_explain_miss(const lz_graph *g);
/* Every cache lookup: compiled is 1 on a miss. Cheap on a hit. */
void lz_explain_barrier(int compiled);
/* Compiles by cause since the last lz_metrics_reset. */
long long lz_compile_cause_count(int cause);
void lz_compile_causes_reset(void);

#endif
