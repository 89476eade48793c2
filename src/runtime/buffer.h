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
    uint64_t id;             /* unique for the process: names a buffer without a reference */
    void  *data;             /* 64-byte aligned; NULL in a failed buffer */
    size_t nbytes;
    /* written by the executor under the queue lock */
    int    ready;
    int    host_seen;        /* the host has waited for it once (host_waits) */
    char  *error;            /* the failure that kept this buffer from being filled */
    /* graph-cut scratch of the recording thread: input slot in the cut of
       that epoch */
    uint32_t cut_epoch;
    int      cut_slot;
} lz_buffer;

/* A ready buffer of nbytes (contents undefined). NULL + error on failure. */
lz_buffer *lz_buffer_new(size_t nbytes);
/* A placeholder that an enqueued execution will fill. */
lz_buffer *lz_buffer_placeholder(size_t nbytes);
/* A buffer that will never be filled: ready, holding no memory, reporting
   msg when read. For the results of a step that failed before it ran.
   NULL on failure (out of host memory). */
lz_buffer *lz_buffer_failed(size_t nbytes, const char *msg);
/* Whether the caller's reference is the only one to b (no execution in
   flight binds it, nothing else can read it) and b holds nbytes of valid
   memory: then its value may be overwritten by a new execution. */
int        lz_buffer_unshared(const lz_buffer *b, size_t nbytes);
/* Turns an unshared buffer into a placeholder for an execution about to be
   enqueued: a new id, not ready, not yet waited for. */
void       lz_buffer_refill(lz_buffer *b);
void       lz_buffer_ref(lz_buffer *b);
void       lz_buffer_unref(lz_buffer *b);

#endif
