/* Step boundaries: cut, hash, compile or hit, enqueue. */
#ifndef LZ_STEP_H
#define LZ_STEP_H

#include "engine/tensor.h"

/* Cuts one graph for the pending nodes roots[0..n), finds or compiles its
   executable, enqueues one execution and materialises the roots on
   placeholder buffers. 0, or -1 with the error set: then nothing is
   enqueued and the roots are data already, failed or at their previous
   values (lz_execute_graph). */
int lz_run_roots(lz_node *const *roots, int n);
/* lz_mark_step without its counter and graph-break check: every pending
   tensor as one graph. 0, or -1 as lz_run_roots. */
int lz_step_all(void);

/* Forgets lz_set_eager: the next use reads LZ_EAGER again (lz_shutdown). */
void lz_step_shutdown(void);

/* The tracing state, owned by the barrier so that the barrier and host
   reads note graph breaks without calling up into capture (capture_trace.c
   sets it around the step function it traces and reads the break). */
void lz_trace_begin(void);
/* Ends tracing; returns the first graph break noted since lz_trace_begin,
   or NULL. */
const char *lz_trace_end(void);
/* 1 while a step function is being traced. */
int  lz_capture_tracing(void);
/* Notes a graph break (reading values or syncing) if a step function is
   being traced; no-op otherwise. */
void lz_capture_note_break(const char *reason);

/* lz_sync without the graph-break check: for the library's own syncs. */
int lz_sync_tensors(lz_tensor *const *ts, int n, int wait);

#include "compile/executable.h"
/* The executable for g: a cache hit, or a compile (counted). */
lz_executable *lz_find_or_compile(const lz_graph *g);
/* Enqueues one execution of exe for g and materialises g's outputs on new
   placeholder buffers. A pending tensor whose value before its update is
   an input of g is state: it keeps that value if the execution fails.
   exe NULL (a failed compile), or an output that cannot be allocated:
   nothing is enqueued, the outputs become data that reports the error
   (state: its previous value), the next lz_wait reports it, and -1
   returns with the error set. */
int lz_execute_graph(const lz_graph *g, lz_executable *exe);
/* lz_execute_graph for a graph whose roots are every pending tensor (a
   traced step): state may be donated as lz_mark_step does. */
int lz_execute_step_graph(const lz_graph *g, lz_executable *exe);

#endif
