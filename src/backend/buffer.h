/* Buffers: device memory holding a tensor's values. A buffer made for an
 * execution's output is a placeholder until the executor marks it ready.
 *
 * Its memory is the device's: only this file's functions (buffer.c, through
 * the backend's table) and the backend itself touch it. The engine moves
 * values with lz_buffer_write / _read / _fill..., in the order the
 * contract sets (backend/backend.h): write a buffer before enqueueing what
 * reads it, read one only after lz_executor_wait_buffer. */
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
    void  *data;             /* device address (backend.h): never dereferenced outside
                                backends/; NULL in a failed buffer */
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

/* The device address of b's memory, for binding an execution's operands
   (the executor); NULL for a failed buffer. */
static inline void *lz_buffer_address(const lz_buffer *b) { return b->data; }

/* Moving values, on the recording thread; each 0, or -1 + error naming op.
   Host to device: nbytes (at most b's) from src, reusable on return;
   counted in bytes_to_device. */
int lz_buffer_write(const char *op, lz_buffer *b, const void *src, size_t nbytes);
/* Device to host: waits for the values (not for an execution: the caller
   waited for b's writer); counted in bytes_from_device. */
int lz_buffer_read(const char *op, const lz_buffer *b, void *dst, size_t nbytes);
/* b = copies of the width bytes at value (width 1, 2, 4 or 8). */
int lz_buffer_fill(const char *op, lz_buffer *b, const void *value, size_t width);
/* b = b->nbytes / 4 float32 draws of the counter-based generator. */
int lz_buffer_fill_random(const char *op, lz_buffer *b, uint64_t seed, int dist, float lo, float hi);
/* dst = the n float32 values of src rounded to bfloat16. */
int lz_buffer_to_bf16(const char *op, lz_buffer *dst, const lz_buffer *src, int64_t n);
/* Device to device, on the executor thread: NULL, or the backend's
   message (no error state is set there). */
const char *lz_buffer_copy(lz_buffer *dst, const lz_buffer *src, size_t nbytes);

#endif
