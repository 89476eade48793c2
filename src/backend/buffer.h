/* Buffers: device memory holding a tensor's values. A buffer made for an
 * execution's output is a placeholder until the executor marks it ready. */
#ifndef LZ_BUFFER_H
#define LZ_BUFFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/memory.h"

typedef struct lz_buffer {
    atomic_int refs;
    atomic_int job_refs;     /* of refs, those held by executions in flight */
    uint64_t id;             /* unique for the process: names a buffer without a reference */
    void  *data;             /* 64-byte aligned; NULL in a failed buffer */
    size_t nbytes;
    /* under the queue lock: executions enqueued to write it and not
       finished (0: ready), and the failure that kept it from being filled */
    int    writes_pending;
    char  *error;
    int    host_seen;        /* the host has waited for it once (host_waits) */
    /* graph-cut scratch of the recording thread: input slot in the cut of
       that epoch */
    uint32_t cut_epoch;
    int      cut_slot;
} lz_buffer;

/* A ready buffer of nbytes (contents undefined). NULL + error on failure. */
lz_buffer *lz_buffer_new(size_t nbytes);
/* A buffer for an execution about to be enqueued to fill (until then
   nothing waits for it). */
lz_buffer *lz_buffer_placeholder(size_t nbytes);
/* A buffer that will never be filled: ready, holding no memory, reporting
   msg when read. For the results of a step that failed before it ran.
   NULL on failure (out of host memory). */
lz_buffer *lz_buffer_failed(size_t nbytes, const char *msg);
/* Gives a buffer that an execution about to be enqueued will write over
   (lz_executor_overwritable) a new identity: a new id, not yet waited for. */
void       lz_buffer_refill(lz_buffer *b);
void       lz_buffer_ref(lz_buffer *b);
void       lz_buffer_unref(lz_buffer *b);

#endif
