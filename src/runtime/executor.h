/* The device queue: one executor thread runs executions in FIFO order.
 * Inputs and outputs are bound as buffers, never values, so a graph may
 * read the placeholders of an execution still in flight. The thread blocks
 * on a condition variable while idle; it never spins. */
#ifndef LZ_EXECUTOR_H
#define LZ_EXECUTOR_H

#include "compile/executable.h"
#include "runtime/buffer.h"

/* Enqueues one execution of exe. Takes references to exe and every buffer;
   in[slot] and out[slot] follow the program's input/output slots. */
void lz_executor_enqueue(lz_executable *exe, lz_buffer *const *in, lz_buffer *const *out);
/* Blocks until b is filled. 0, or -1 with the execution's error. Counts a
   host wait the first time the host waits for a placeholder. */
int  lz_executor_wait_buffer(lz_buffer *b);
/* Blocks until every enqueued execution is done; returns -1 with the first
   error raised since the last call (errors are never lost). */
int  lz_executor_wait_all(void);
/* Executions enqueued and not finished (takes the queue lock: tests only). */
int  lz_executor_in_flight(void);

#endif
