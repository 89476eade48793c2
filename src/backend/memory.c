/* Device memory through the registered backend (registry.c), with the
 * accounting behind the peak_bytes metric. */
#include "backend/memory.h"

#include <stdatomic.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/fault.h"

static atomic_llong bytes_now, bytes_peak;

void *lz_device_alloc(size_t nbytes)
{
    const lz_backend *b = lz_backend_current();
    if (!b) return lz_errorf("no backend registered: cannot allocate %zu bytes of device memory",
                             nbytes);
    /* LZ_FAULT_ALLOC fails here, not in a backend: every backend's
       failure paths are tested alike */
    void *p = lz_fault_hit(LZ_FAULT_ALLOC) ? NULL : b->alloc(nbytes);
    if (!p) return NULL;
    long long now = atomic_fetch_add(&bytes_now, (long long)nbytes) + (long long)nbytes;
    long long peak = atomic_load(&bytes_peak);
    while (now > peak && !atomic_compare_exchange_weak(&bytes_peak, &peak, now)) {}
    return p;
}

void lz_device_free(void *p, size_t nbytes)
{
    const lz_backend *b = lz_backend_current();
    if (!p || !b) return;
    b->free(p, nbytes);
    atomic_fetch_sub(&bytes_now, (long long)nbytes);
}

int64_t lz_device_bytes_now(void) { return atomic_load(&bytes_now); }
int64_t lz_device_peak_bytes(void) { return atomic_load(&bytes_peak); }
void lz_device_peak_reset(void) { atomic_store(&bytes_peak, atomic_load(&bytes_now)); }

void lz_device_trim(void)
{
    const lz_backend *b = lz_backend_current();
    if (b && b->trim) b->trim();
}

