/* Counters and timers behind lz_metrics_get (engine/metrics_api.c). The recording thread bumps
 * counters directly; the executor thread adds its time under a lock. */
#ifndef LZ_METRICS_H
#define LZ_METRICS_H

#include "lazyc.h"

extern lz_metrics lz_counters;   /* recording-thread fields */

static inline void lz_metrics_count_node(void) { lz_counters.ir_nodes++; }
/* Monotonic clock in milliseconds. */
double lz_now_ms(void);
/* Executor-thread time; safe from any thread. */
void   lz_metrics_add_execute_ms(double ms);
/* The executor time added so far, and its reset (lz_metrics_get/_reset,
   engine/metrics_api.c); safe from any thread. */
double lz_metrics_execute_ms(void);
void   lz_metrics_execute_ms_reset(void);
/* Launches a backend made for the executions it ran: CUDA graphs (each a
   whole execution) and kernels (or library calls) launched one by one.
   Any thread; read and reset by lz_metrics_get/_reset. */
void   lz_metrics_add_launches(int64_t graphs, int64_t kernels);
void   lz_metrics_launches(int64_t *graphs, int64_t *kernels);
void   lz_metrics_launches_reset(void);

#endif
