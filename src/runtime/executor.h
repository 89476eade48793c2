/* The device queue: one executor thread runs executions in FIFO order.
 * Inputs and outputs are bound as buffers, never values, so a graph may
 * read the placeholders of an execution still in flight. The thread blocks
 * on a condition variable while idle; it never spins. */
#ifndef LZ_EXECUTOR_H
#define LZ_EXECUTOR_H

#include "backend/buffer.h"
#include "compile/executable.h"

/* Enqueues one execution of exe. Takes references to exe and every buffer;
   in[slot] and out[slot] follow the program's input/output slots. keep
   (may be NULL) gives per output the input slot holding the value it
   replaces, or -1: if the execution fails, that output takes the input's
   value (state stays as it was) and the others report the error. */
void lz_executor_enqueue(lz_executable *exe, lz_buffer *const *in, lz_buffer *const *out,
                         const int *keep);
/* Records a failure raised outside an execution (a step that could not be
   compiled or enqueued) for the next lz_executor_wait_all to report. */
void lz_executor_note_error(const char *msg);
/* Blocks until b is filled. 0, or -1 with the execution's error. Counts a
   host wait the first time the host waits for a placeholder. */
int  lz_executor_wait_buffer(lz_buffer *b);
/* Whether an execution about to be enqueued may write over b's value: the
   caller's reference is the only one besides those of executions in flight
   (they run first, FIFO, and nothing else can read the value after them),
   b holds nbytes, and no failure is recorded on it yet. A failure of an
   execution in flight still reaches the new one: it inherits it. */
int  lz_executor_overwritable(lz_buffer *b, size_t nbytes);
/* Blocks until every enqueued execution is done; returns -1 with the first
   error raised since the last call (errors are never lost). */
int  lz_executor_wait_all(void);
/* Executions enqueued and not finished (takes the queue lock: tests only). */
int  lz_executor_in_flight(void);
/* Runs every enqueued execution, stops and joins the executor thread and
   drops an error no wait reported (lz_shutdown). The next enqueue starts
   the thread again. */
void lz_executor_shutdown(void);

#endif
