#include "backend/buffer.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/metrics.h"

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

/* ---- moving values: the only place outside backends/ that names a
   buffer's memory, and then only to hand it to the backend ---- */

/* The backend, or NULL + error: a buffer exists only once one is
   registered, but a test may have made one by hand. */
static const lz_backend *backend_for(const char *op)
{
    const lz_backend *be = lz_backend_current();
    return be ? be : lz_errorf("%s: no backend registered", op);
}

static int check(const char *op, const lz_buffer *b, size_t nbytes, const char *what)
{
    if (!b->data) return lz_errorf_int("%s: %s", op, b->error ? b->error : "the buffer has no memory");
    if (nbytes > b->nbytes)
        return lz_errorf_int("%s: %s of %zu bytes, where the buffer holds %zu", op, what, nbytes,
                             b->nbytes);
    return 0;
}

static int result(const char *op, const char *why)
{
    return why ? lz_errorf_int("%s: %s", op, why) : 0;
}

int lz_buffer_write(const char *op, lz_buffer *b, const void *src, size_t nbytes)
{
    const lz_backend *be = backend_for(op);
    if (!be || check(op, b, nbytes, "a write")) return -1;
    if (!nbytes) return 0;
    if (result(op, be->to_device(b->data, src, nbytes))) return -1;
    lz_counters.bytes_to_device += (int64_t)nbytes;
    return 0;
}

int lz_buffer_read(const char *op, const lz_buffer *b, void *dst, size_t nbytes)
{
    const lz_backend *be = backend_for(op);
    if (!be || check(op, b, nbytes, "a read")) return -1;
    if (!nbytes) return 0;
    if (result(op, be->to_host(dst, b->data, nbytes))) return -1;
    lz_counters.bytes_from_device += (int64_t)nbytes;
    return 0;
}

int lz_buffer_fill(const char *op, lz_buffer *b, const void *value, size_t width)
{
    const lz_backend *be = backend_for(op);
    if (!be || check(op, b, 0, "a fill")) return -1;
    if (!b->nbytes) return 0;
    return result(op, be->fill(b->data, b->nbytes / width * width, value, width));
}

int lz_buffer_fill_random(const char *op, lz_buffer *b, uint64_t seed, int dist, float lo, float hi)
{
    const lz_backend *be = backend_for(op);
    if (!be || check(op, b, 0, "a fill")) return -1;
    const int64_t n = (int64_t)(b->nbytes / sizeof(float));
    return n ? result(op, be->fill_random(b->data, n, seed, dist, lo, hi)) : 0;
}

int lz_buffer_to_bf16(const char *op, lz_buffer *dst, const lz_buffer *src, int64_t n)
{
    const lz_backend *be = backend_for(op);
    if (!be || check(op, dst, (size_t)n * 2, "a cast") || check(op, src, (size_t)n * 4, "a cast"))
        return -1;
    return n ? result(op, be->to_bf16(dst->data, src->data, n)) : 0;
}

const char *lz_buffer_copy(lz_buffer *dst, const lz_buffer *src, size_t nbytes)
{
    const lz_backend *be = lz_backend_current();
    if (!be || !dst->data || !src->data || nbytes > dst->nbytes || nbytes > src->nbytes)
        return "a device copy between buffers that cannot hold it";
    return nbytes ? be->copy(dst->data, src->data, nbytes) : NULL;
}
