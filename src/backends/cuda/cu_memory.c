/* The contract's device memory and the work outside executions, on the
 * one stream in the order asked (backend/backend.h, "Order"):
 *
 *  - alloc/free: the device's stream-ordered pool. A block freed on the
 *    stream is handed out again only to work queued after the free, which
 *    is what the contract asks of a free that may come while work on the
 *    memory is still queued; freed memory stays in the pool (no
 *    cudaMalloc per buffer) until lz_shutdown trims it;
 *  - to_device through pinned staging (cu_staging.c): queued, never
 *    waited for; to_host waits, then reports bad data a kernel found;
 *  - fill, fill_random and to_bf16 as kernels (k_misc.cu, k_random.cu):
 *    queued. */
#include <string.h>

#include "backends/cuda/cu_runtime.h"
#include "base/rng.h"

void *lz_cu_alloc(size_t nbytes)
{
    lz_cu_bind_thread();
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, nbytes, lz_cu.stream);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* not sticky: clear it */
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        lz_cu.host->set_error(lz_cu_msg("cuda: out of device memory: %zu bytes asked, %zu MiB free of %zu MiB (%s)",
                                        nbytes, free_b >> 20, total >> 20, cudaGetErrorName(e)));
        return NULL;
    }
    if ((uintptr_t)p % 64) {   /* the contract promises 64-byte alignment */
        cudaFreeAsync(p, lz_cu.stream);
        lz_cu.host->set_error("cuda: the memory pool gave an address not 64-byte aligned");
        return NULL;
    }
    return p;
}

void lz_cu_free(void *p, size_t nbytes)
{
    (void)nbytes;
    lz_cu_bind_thread();
    if (p) cudaFreeAsync(p, lz_cu.stream);
}

const char *lz_cu_to_device(void *dst, const void *src, size_t nbytes)
{
    lz_cu_bind_thread();
    return nbytes ? lz_cu_staged_copy(dst, src, nbytes) : NULL;
}

const char *lz_cu_to_host(void *dst, const void *src, size_t nbytes)
{
    lz_cu_bind_thread();
    if (nbytes) {
        /* waits for the copy alone, not for work the executor queued on
           the stream after it (the next step): an event right after it */
        cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, lz_cu.stream);
        if (e == cudaSuccess) e = cudaEventRecord(lz_cu.read_done, lz_cu.stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(lz_cu.read_done);
        if (e != cudaSuccess) return lz_cu_errf(e, "reading %zu bytes back to the host", nbytes);
    }
    return lz_cu_status_take();
}

const char *lz_cu_device_copy(void *dst, const void *src, size_t nbytes)
{
    if (!nbytes || dst == src) return NULL;
    lz_cu_bind_thread();
    cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, lz_cu.stream);
    return e == cudaSuccess ? NULL : lz_cu_errf(e, "copying %zu bytes on the device", nbytes);
}

const char *lz_cu_fill(void *dst, size_t nbytes, const void *value, size_t width)
{
    lz_cu_bind_thread();
    const unsigned char *v = value;
    size_t same = 1;
    while (same < width && v[same] == v[0]) same++;
    if (same == width) {   /* zeros, and any value of one repeated byte */
        cudaError_t e = cudaMemsetAsync(dst, v[0], nbytes, lz_cu.stream);
        return e == cudaSuccess ? NULL : lz_cu_errf(e, "filling %zu bytes", nbytes);
    }
    if (width != 2 && width != 4 && width != 8) return "cuda: a fill of width other than 1, 2, 4 or 8 bytes";
    lz_cu_fill_args a = {.dst = dst, .n = (long long)(nbytes / width), .width = (int)width};
    memcpy(&a.value, value, width);   /* little-endian: the low bytes */
    return lz_cu_launch_family(LZ_CU_MOD_MISC, "lz_fill", &a, a.n);
}

const char *lz_cu_fill_random(void *dst, int64_t n, uint64_t seed, int dist, float a, float b)
{
    lz_cu_fill_random_args args = {.dst = dst, .n = n, .key = lz_rng_key(seed), .a = a, .b = b, .dist = dist};
    return lz_cu_launch_family(LZ_CU_MOD_RANDOM, "lz_fill_random", &args, n);
}

const char *lz_cu_to_bf16(void *dst, const void *src, int64_t n)
{
    lz_cu_convert_args a = {.src = src, .dst = dst, .n = n};
    return lz_cu_launch_family(LZ_CU_MOD_MISC, "lz_to_bf16", &a, n);
}

/* lz_shutdown, with every buffer and executable freed: the pool gives
   its memory back to the device */
void lz_cu_trim(void)
{
    lz_cu_bind_thread();
    cudaStreamSynchronize(lz_cu.stream);
    cudaMemPoolTrimTo(lz_cu.pool, 0);
}
