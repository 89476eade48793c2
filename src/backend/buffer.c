#include "backend/buffer.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"

static atomic_ullong next_id;

static lz_buffer *buffer_header(size_t nbytes, int ready)
{
    lz_buffer *b = calloc(1, sizeof *b);
    if (!b) return lz_errorf("out of memory allocating a buffer header");
    b->id = atomic_fetch_add(&next_id, 1) + 1;
    b->nbytes = nbytes;
    b->host_seen = ready;
    atomic_init(&b->refs, 1);
    atomic_init(&b->job_refs, 0);
    return b;
}

static lz_buffer *buffer_alloc(size_t nbytes, int ready)
{
    lz_buffer *b = buffer_header(nbytes, ready);
    if (!b) return NULL;
    /* Zero-sized tensors still get a distinct, valid pointer. */
    b->data = lz_device_alloc(nbytes ? nbytes : 1);
    if (!b->data) {
        free(b);
        if (!lz_backend_current()) return NULL;   /* lz_device_alloc said so */
        return lz_errorf("device allocation of %zu bytes failed (out of device memory)", nbytes);
    }
    return b;
}

lz_buffer *lz_buffer_failed(size_t nbytes, const char *msg)
{
    lz_buffer *b = buffer_header(nbytes, 1);
    if (!b) return NULL;
    b->error = strdup(msg);
    if (!b->error) {
        free(b);
        return lz_errorf("out of memory allocating a buffer header");
    }
    return b;
}

lz_buffer *lz_buffer_new(size_t nbytes) { return buffer_alloc(nbytes, 1); }
lz_buffer *lz_buffer_placeholder(size_t nbytes) { return buffer_alloc(nbytes, 0); }

void lz_buffer_refill(lz_buffer *b)
{
    /* A new identity: the old value is gone, and prev_buf_id / cut scratch
       must not take the new one for it. */
    b->id = atomic_fetch_add(&next_id, 1) + 1;
    b->host_seen = 0;
    b->cut_epoch = 0;
    b->cut_slot = 0;
}

void lz_buffer_ref(lz_buffer *b) { atomic_fetch_add(&b->refs, 1); }

void lz_buffer_unref(lz_buffer *b)
{
    if (atomic_fetch_sub(&b->refs, 1) != 1) return;
    lz_device_free(b->data, b->nbytes ? b->nbytes : 1);
    free(b->error);
    free(b);
}
