/* Host-to-device copies through a ring of pinned host memory.
 *
 * The contract lets the caller reuse its buffer as soon as to_device
 * returns, and the host must not wait for the device there. A copy from
 * pageable memory would do neither well (the runtime synchronises the
 * stream before such a copy), so the bytes go into the ring first and an
 * asynchronous copy from there is queued on the stream; an event recorded
 * after it says when its region may be written again. The host waits only
 * when the ring has no free region that large: when more than its size is
 * in flight (LZ_CUDA_STAGING_MIB; a transfer larger than half of it goes
 * in pieces). A loader's batch is copied into the ring while the previous
 * step runs and its copy waits its turn on the stream. */
#include <string.h>

#include "backends/cuda/cu_runtime.h"

#define MAX_PENDING 256

typedef struct pending {
    size_t start, end;
    cudaEvent_t ev;
} pending;

static struct {
    pthread_mutex_t mu;
    char *base;
    size_t size, head;
    pending q[MAX_PENDING];   /* in flight, oldest at `first` */
    int first, n;
    cudaEvent_t events[MAX_PENDING];
} ring = {.mu = PTHREAD_MUTEX_INITIALIZER};

const char *lz_cu_staging_init(size_t bytes)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&ring.events[i], cudaEventDisableTiming);
        if (e != cudaSuccess) return lz_cu_err("creating the staging events", e);
    }
    if (!bytes) return NULL;
    cudaError_t e = cudaHostAlloc((void **)&ring.base, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) return lz_cu_errf(e, "allocating %zu MiB of pinned staging memory (LZ_CUDA_STAGING_MIB)",
                                            bytes >> 20);
    ring.size = bytes;
    return NULL;
}

void lz_cu_staging_free(void)
{
    if (ring.base) cudaFreeHost(ring.base);
    for (int i = 0; i < MAX_PENDING; i++)
        if (ring.events[i]) cudaEventDestroy(ring.events[i]);
    memset(ring.events, 0, sizeof ring.events);
    ring.base = NULL;
    ring.size = ring.head = 0;
    ring.n = ring.first = 0;
}

static int overlaps(const pending *p, size_t a, size_t b) { return p->start < b && a < p->end; }

/* under mu: waits for the oldest copy in flight and frees its region */
static cudaError_t retire_oldest(void)
{
    cudaError_t e = cudaEventSynchronize(ring.q[ring.first].ev);
    ring.first = (ring.first + 1) % MAX_PENDING;
    ring.n--;
    return e;
}

/* under mu: a region of n bytes (n <= size / 2) free of copies in flight */
static cudaError_t take(size_t n, size_t *at)
{
    if (ring.head + n > ring.size) ring.head = 0;   /* the tail is skipped */
    for (;;) {
        int busy = ring.n == MAX_PENDING;
        for (int k = 0; k < ring.n && !busy; k++)
            busy = overlaps(&ring.q[(ring.first + k) % MAX_PENDING], ring.head, ring.head + n);
        if (!busy) break;
        cudaError_t e = retire_oldest();
        if (e != cudaSuccess) return e;
    }
    *at = ring.head;
    ring.head += (n + 255) / 256 * 256;
    return cudaSuccess;
}

const char *lz_cu_staged_copy(void *dst, const void *src, size_t nbytes)
{
    if (!ring.base) {   /* no staging: pageable, the runtime's own way */
        cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, lz_cu.stream);
        return e == cudaSuccess ? NULL : lz_cu_errf(e, "copying %zu bytes to the device", nbytes);
    }
    pthread_mutex_lock(&ring.mu);
    const size_t piece = ring.size / 2;
    const char *why = NULL;
    for (size_t done = 0; done < nbytes && !why;) {
        const size_t n = nbytes - done < piece ? nbytes - done : piece;
        size_t at = 0;
        cudaError_t e = take(n, &at);
        if (e == cudaSuccess) {
            memcpy(ring.base + at, (const char *)src + done, n);
            e = cudaMemcpyAsync((char *)dst + done, ring.base + at, n, cudaMemcpyHostToDevice, lz_cu.stream);
        }
        if (e == cudaSuccess) {
            const int slot = (ring.first + ring.n) % MAX_PENDING;
            ring.q[slot] = (pending){at, at + n, ring.events[slot]};
            e = cudaEventRecord(ring.q[slot].ev, lz_cu.stream);
            if (e == cudaSuccess) ring.n++;
        }
        if (e != cudaSuccess) why = lz_cu_errf(e, "copying %zu bytes to the device", nbytes);
        done += n;
    }
    pthread_mutex_unlock(&ring.mu);
    return why;
}
