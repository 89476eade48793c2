/* Host memory for the CPU backend, with freed blocks kept by size for
 * reuse. A training step frees and allocates the same sizes every step;
 * large blocks would otherwise be fresh mmaps whose pages fault in again
 * each step. Buffers are freed on both threads (the executor drops its
 * references after a run), hence the lock. */
#include "backend/cpu/pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/fault.h"

#define NBUCKETS 1024

typedef struct block { struct block *next; size_t size; } block;   /* lives in the freed memory */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static block *buckets[NBUCKETS];
static size_t cached, limit;

static size_t round_size(size_t n) { return (n + 63) / 64 * 64; }
static size_t bucket_of(size_t size) { return (size / 64) % NBUCKETS; }

static size_t cache_limit(void)
{
    if (!limit) {
        const char *env = getenv("LZ_POOL_MIB");
        limit = (env && atol(env) >= 0 ? (size_t)atol(env) : 4096) << 20;
        if (!limit) limit = 1;   /* 0 MiB: cache nothing */
    }
    return limit;
}

void *lz_pool_alloc(size_t nbytes)
{
    if (lz_fault_hit(LZ_FAULT_ALLOC)) return NULL;
    size_t size = round_size(nbytes ? nbytes : 1);
    pthread_mutex_lock(&mu);
    for (block **pp = &buckets[bucket_of(size)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->size != size) continue;
        block *b = *pp;
        *pp = b->next;
        cached -= size;
        pthread_mutex_unlock(&mu);
        return b;
    }
    pthread_mutex_unlock(&mu);
    return aligned_alloc(64, size);
}

void lz_pool_free(void *p, size_t nbytes)
{
    if (!p) return;
    size_t size = round_size(nbytes ? nbytes : 1);
    pthread_mutex_lock(&mu);
    if (cached + size > cache_limit()) {
        pthread_mutex_unlock(&mu);
        free(p);
        return;
    }
    block *b = p;
    b->size = size;
    b->next = buckets[bucket_of(size)];
    buckets[bucket_of(size)] = b;
    cached += size;
    pthread_mutex_unlock(&mu);
}

void lz_pool_trim(void)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < NBUCKETS; i++)
        while (buckets[i]) {
            block *b = buckets[i];
            buckets[i] = b->next;
            free(b);
        }
    cached = 0;
    pthread_mutex_unlock(&mu);
}

size_t lz_pool_cached_bytes(void)
{
    pthread_mutex_lock(&mu);
    size_t n = cached;
    pthread_mutex_unlock(&mu);
    return n;
}
