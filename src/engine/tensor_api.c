/* Public tensor calls: making data, querying shape, reading values. Values
 * move through the backend's table only (backend/buffer.h): this file never
 * touches device memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/metrics.h"
#include "base/thread.h"
#include "engine/capture_hooks.h"
#include "engine/device.h"
#include "engine/step.h"
#include "engine/tensor.h"
#include "runtime/executor.h"

static lz_tensor *new_data(const char *op, lz_dtype dtype, int ndim, const int64_t *shape, lz_buffer **bufp)
{
    size_t nbytes = 0;
    if (lz_owner_check(op) || lz_shape_check(op, dtype, ndim, shape, &nbytes)) return NULL;
    if (lz_device_start(op)) return NULL;
    lz_buffer *b = lz_buffer_new(nbytes);
    if (!b) return NULL;
    lz_node *n = lz_node_new_data(b, dtype, ndim, shape);
    lz_buffer_unref(b);
    *bufp = b;
    return lz_tensor_wrap(n);
}

static lz_tensor *from_host(const char *op, const void *data, lz_dtype dtype, int ndim,
                            const int64_t *shape)
{
    lz_buffer *b;
    lz_tensor *t = new_data(op, dtype, ndim, shape, &b);
    if (!t) return NULL;
    if (b->nbytes && !data) {
        lz_free(t);
        return lz_errorf("%s: data is NULL", op);
    }
    if (lz_buffer_write(op, b, data, b->nbytes)) {   /* data may be NULL when empty */
        lz_free(t);
        return NULL;
    }
    lz_counters.transfers_to_device++;
    return t;
}

lz_tensor *lz_from_host(const void *data, lz_dtype dtype, int ndim, const int64_t *shape)
{
    lz_tensor *t = from_host("lz_from_host", data, dtype, ndim, shape);
    lz_capture_note_host_data(t, "lz_from_host");
    return t;
}

lz_tensor *lz_internal_data(const void *data, lz_dtype dtype, int ndim, const int64_t *shape)
{
    return from_host("lz_from_host", data, dtype, ndim, shape);
}

lz_tensor *lz_internal_scalar(float value) { return lz_internal_data(&value, LZ_F32, 0, NULL); }

lz_tensor *lz_full(lz_dtype dtype, int ndim, const int64_t *shape, double value)
{
    /* converting NaN or an out-of-range value to an integer is undefined */
    if ((dtype == LZ_I64 && !(value >= -0x1p63 && value < 0x1p63)) ||
        (dtype == LZ_I32 && !(value >= -0x1p31 && value < 0x1p31)))
        return lz_errorf("lz_full: %g does not fit in %s", value, lz_dtype_name(dtype));
    lz_buffer *b;
    lz_tensor *t = new_data("lz_full", dtype, ndim, shape, &b);
    if (!t) return NULL;
    /* one element's bytes, repeated on the device */
    union { float f; uint16_t bf16; int64_t i64; int32_t i32; } v;
    if (dtype == LZ_F32) v.f = (float)value;
    else if (dtype == LZ_BF16) v.bf16 = lz_f32_to_bf16((float)value);
    else if (dtype == LZ_I64) v.i64 = (int64_t)value;
    else v.i32 = (int32_t)value;
    if (lz_buffer_fill("lz_full", b, &v, lz_dtype_size(dtype))) {
        lz_free(t);
        return NULL;
    }
    lz_capture_note_host_data(t, "lz_full");
    return t;
}

lz_tensor *lz_from_random(uint64_t seed, int dist, float a, float b, int ndim, const int64_t *shape)
{
    if (dist != 0 && dist != 1)
        return lz_errorf("lz_from_random: dist %d is neither 0 (uniform) nor 1 (normal)", dist);
    if (!isfinite(a) || !isfinite(b))
        return lz_errorf("lz_from_random: parameters %g and %g must be finite", (double)a, (double)b);
    lz_buffer *bf;
    lz_tensor *t = new_data("lz_from_random", LZ_F32, ndim, shape, &bf);
    if (!t) return NULL;
    /* drawn on the device: no host memory, no transfer */
    if (lz_buffer_fill_random("lz_from_random", bf, seed, dist, a, b)) {
        lz_free(t);
        return NULL;
    }
    lz_capture_note_host_data(t, "lz_from_random");
    return t;
}

lz_tensor *lz_zeros(lz_dtype dtype, int ndim, const int64_t *shape)
{
    lz_buffer *b;
    lz_tensor *t = new_data("lz_zeros", dtype, ndim, shape, &b);
    const unsigned char zero = 0;
    if (t && lz_buffer_fill("lz_zeros", b, &zero, 1)) {
        lz_free(t);
        return NULL;
    }
    lz_capture_note_host_data(t, "lz_zeros");
    return t;
}

lz_tensor *lz_scalar(float value)
{
    lz_tensor *t = from_host("lz_scalar", &value, LZ_F32, 0, NULL);
    lz_capture_note_host_data(t, "lz_scalar");
    return t;
}

int lz_ndim(const lz_tensor *t)
{
    if (!t) return lz_errorf_int("lz_ndim: tensor is NULL");
    return lz_owner_check("lz_ndim") ? -1 : t->node->ndim;
}

int64_t lz_dim(const lz_tensor *t, int axis)
{
    if (!t) return lz_errorf_int("lz_dim: tensor is NULL");
    if (lz_owner_check("lz_dim")) return -1;
    int nd = t->node->ndim;
    if (axis < -nd || axis >= nd) return lz_errorf_int("lz_dim: axis %d out of range for %d dims", axis, nd);
    return t->node->shape[axis < 0 ? axis + nd : axis];
}

int64_t lz_numel(const lz_tensor *t)
{
    if (!t) return lz_errorf_int("lz_numel: tensor is NULL");
    return lz_owner_check("lz_numel") ? -1 : lz_node_numel(t->node);
}
lz_dtype lz_tensor_dtype(const lz_tensor *t)
{
    return t && !lz_owner_check("lz_tensor_dtype") ? (lz_dtype)t->node->dtype : LZ_F32;
}
int lz_is_pending(const lz_tensor *t) { return t && !lz_owner_check("lz_is_pending") && !t->node->buf; }

/* Syncs t alone if pending, then waits for its buffer. */
static int materialise_and_wait(const char *op, lz_tensor *t)
{
    if (!t) return lz_errorf_int("%s: tensor is NULL", op);
    lz_capture_note_break(op);
    if (!t->node->buf && lz_sync_tensors(&t, 1, 0) != 0) return -1;
    return lz_executor_wait_buffer(t->node->buf);
}

/* t's size in bytes, or -1 with op's error when the host side's nbytes
   differs (side: "destination" or "source"). */
static int64_t host_bytes(const char *op, const lz_tensor *t, size_t nbytes, const char *side)
{
    size_t need = (size_t)lz_node_numel(t->node) * lz_dtype_size((lz_dtype)t->node->dtype);
    if (nbytes == need) return (int64_t)need;
    char s[96];
    return lz_errorf_int("%s: tensor %s %s holds %zu bytes, %s has %zu", op,
                         lz_shape_str(s, t->node->ndim, t->node->shape),
                         lz_dtype_name((lz_dtype)t->node->dtype), need, side, nbytes);
}

int lz_to_host(lz_tensor *t, void *dst, size_t nbytes)
{
    if (!t) return lz_errorf_int("lz_to_host: tensor is NULL");
    if (lz_owner_check("lz_to_host")) return -1;
    int64_t got = host_bytes("lz_to_host", t, nbytes, "destination");
    if (got < 0) return -1;
    size_t need = (size_t)got;
    if (need && !dst) return lz_errorf_int("lz_to_host: destination is NULL");
    if (materialise_and_wait("lz_to_host", t)) return -1;
    if (lz_buffer_read("lz_to_host", t->node->buf, dst, need)) return -1;   /* dst may be NULL when empty */
    lz_counters.transfers_from_device++;
    return 0;
}

float lz_item(lz_tensor *t)
{
    if (!t) { lz_errorf("lz_item: tensor is NULL"); return NAN; }
    if (lz_owner_check("lz_item")) return NAN;
    lz_capture_note_break("lz_item");
    if (lz_node_numel(t->node) != 1) {
        char s[96];
        lz_errorf("lz_item: tensor %s has %lld elements, not 1",
                  lz_shape_str(s, t->node->ndim, t->node->shape), (long long)lz_node_numel(t->node));
        return NAN;
    }
    union { float f; int64_t i64; int32_t i32; uint16_t bf16; } v;
    if (lz_to_host(t, &v, lz_dtype_size((lz_dtype)t->node->dtype))) return NAN;
    switch ((lz_dtype)t->node->dtype) {
    case LZ_I64: return (float)v.i64;
    case LZ_I32: return (float)v.i32;
    case LZ_BF16: return lz_bf16_to_f32(v.bf16);
    default: return v.f;
    }
}

int lz_copy_from_host(lz_tensor *t, const void *data, size_t nbytes)
{
    if (!t) return lz_errorf_int("lz_copy_from_host: tensor is NULL");
    if (lz_owner_check("lz_copy_from_host")) return -1;
    int64_t got = host_bytes("lz_copy_from_host", t, nbytes, "source");
    if (got < 0) return -1;
    size_t need = (size_t)got;
    if (need && !data) return lz_errorf_int("lz_copy_from_host: data is NULL");
    /* A fresh buffer, not an overwrite: an execution in flight may still be
       reading the old one. */
    lz_buffer *b = lz_buffer_new(need);
    if (!b) return -1;
    if (lz_buffer_write("lz_copy_from_host", b, data, need)) {   /* data may be NULL when empty */
        lz_buffer_unref(b);
        return -1;
    }
    lz_counters.transfers_to_device++;
    lz_node *n = lz_node_new_data(b, (lz_dtype)t->node->dtype, t->node->ndim, t->node->shape);
    lz_buffer_unref(b);
    if (!n) return -1;
    lz_tensor_set_node(t, n);
    return 0;
}

int lz_assign(lz_tensor *dst, lz_tensor *src)
{
    if (lz_owner_check("lz_assign")) return -1;
    if (!dst || !src) {
        if (!lz_last_error()) lz_errorf("lz_assign: %s is NULL", dst ? "src" : "dst");
        return -1;
    }
    if (dst->node->dtype != src->node->dtype || dst->node->ndim != src->node->ndim ||
        memcmp(dst->node->shape, src->node->shape, sizeof(int64_t) * dst->node->ndim)) {
        char a[96], b[96];
        return lz_errorf_int("lz_assign: dst %s %s and src %s %s differ",
                             lz_shape_str(a, dst->node->ndim, dst->node->shape),
                             lz_dtype_name((lz_dtype)dst->node->dtype),
                             lz_shape_str(b, src->node->ndim, src->node->shape),
                             lz_dtype_name((lz_dtype)src->node->dtype));
    }
    if (dst == src) return 0;
    lz_node_ref(src->node);
    lz_tensor_set_node(dst, src->node);
    return 0;
}
