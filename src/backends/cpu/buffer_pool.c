/* Host memory for the CPU backend, with freed blocks kept by size for
 * reuse. A training step frees and allocates the same sizes every step;
 * large blocks would otherwise be fresh mmaps whose pages fault in again
 * each step. Buffers are freed on both threads (the executor drops its
 * references after a run), hence the lock.
 *
 * When the cache is full, the blocks freed longest ago make room for the
 * new one: sizes a finished model or step no longer asks for must not keep
 * the next one's blocks from being cached (they would then be unmapped
 * and faulted in again on every step).
 *
 * A request no cached block fits also gives back, oldest first, as many
 * cached bytes as it asks for, while the pool caches more than the program
 * holds: a training step's freed buffers are a small part of what it holds
 * (parameters, optimizer state, the executables' arenas), so a steady step
 * keeps its cache, but after a model is freed, the next one's buffers take
 * the place of the old ones instead of being new memory beside them. New
 * memory costs a page fault per page on first touch, and more on a
 * virtual machine for memory the guest never touched before
 * (docs/performance.md, "Models one after another").
 *
 * With LZ_HUGE_PAGES=1, blocks of 2 MiB and more are their own mappings,
 * aligned to 2 MiB and advised for transparent huge pages (Linux's default
 * policy, "madvise", gives them only where asked): a step streams hundreds
 * of MiB, and with 4 KiB pages each page of a stream is a TLB miss. Not by
 * default: on a virtual machine that reports free memory to its host, a
 * fresh huge page is slow to touch, and first steps take far longer
 * (docs/performance.md, "Huge pages"). */
#include "backends/cpu/buffer_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/settings.h"

#define NBUCKETS 1024

/* Lives in the freed memory (blocks are at least 64 bytes). */
typedef struct block {
    struct block *next, *prev;         /* same bucket */
    struct block *newer, *older;       /* free order */
    size_t size;
} block;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static block *buckets[NBUCKETS];
static block *newest, *oldest;
static size_t cached, limit;
static size_t held;                    /* handed out and not yet freed */

static size_t round_size(size_t n) { return (n + 63) / 64 * 64; }
static size_t bucket_of(size_t size) { return (size / 64) % NBUCKETS; }

static size_t cache_limit(void)
{
    if (!limit) {
        limit = (size_t)lz_setting_int(LZ_SETTING_POOL_MIB) << 20;
        if (!limit) limit = 1;   /* 0 MiB: cache nothing */
    }
    return limit;
}

/* under mu */
static void unlink_block(block *b)
{
    if (b->prev) b->prev->next = b->next;
    else buckets[bucket_of(b->size)] = b->next;
    if (b->next) b->next->prev = b->prev;
    if (b->newer) b->newer->older = b->older;
    else newest = b->older;
    if (b->older) b->older->newer = b->newer;
    else oldest = b->newer;
    cached -= b->size;
}

/* under mu: unlinks the oldest blocks, up to bytes of them, while the
   cache is larger than what the program holds; returns them chained by
   next, for freeing outside the lock */
static block *give_back(size_t bytes)
{
    block *out = NULL;
    for (size_t n = 0; n < bytes && oldest && cached > held;) {
        block *o = oldest;
        unlink_block(o);
        n += o->size;
        o->next = out;
        out = o;
    }
    return out;
}

#define HUGE_PAGE ((size_t)2 << 20)

static size_t mapped_size(size_t size)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) / page * page;
}

/* read once per process, so a block is freed the way it was made */
static int huge_block(size_t size)
{
    return size >= HUGE_PAGE && lz_setting_int(LZ_SETTING_HUGE_PAGES);
}

static void *alloc_block(size_t size)
{
    if (!huge_block(size)) return aligned_alloc(64, size);
    const size_t len = mapped_size(size), span = len + HUGE_PAGE;
    char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > m) munmap(m, (size_t)(p - m));
    if (m + span > p + len) munmap(p + len, (size_t)(m + span - (p + len)));
    /* advice only: without huge pages the block works all the same */
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

static void free_block(void *p, size_t size)
{
    if (!huge_block(size)) free(p);
    else munmap(p, mapped_size(size));
}

static void free_chain(block *b)
{
    while (b) {
        block *next = b->next;
        free_block(b, b->size);
        b = next;
    }
}

void *lz_pool_alloc(size_t nbytes)
{
    size_t size = round_size(nbytes ? nbytes : 1);
    pthread_mutex_lock(&mu);
    for (block *b = buckets[bucket_of(size)]; b; b = b->next) {
        if (b->size != size) continue;
        unlink_block(b);
        held += size;
        pthread_mutex_unlock(&mu);
        return b;
    }
    block *stale = give_back(size);
    pthread_mutex_unlock(&mu);
    free_chain(stale);
    void *p = alloc_block(size);
    if (p) {
        pthread_mutex_lock(&mu);
        held += size;
        pthread_mutex_unlock(&mu);
    }
    return p;
}

void lz_pool_free(void *p, size_t nbytes)
{
    if (!p) return;
    size_t size = round_size(nbytes ? nbytes : 1);
    pthread_mutex_lock(&mu);
    held = held > size ? held - size : 0;
    if (size > cache_limit()) {
        pthread_mutex_unlock(&mu);
        free_block(p, size);
        return;
    }
    block *evicted = NULL;
    while (cached + size > cache_limit()) {
        block *o = oldest;
        unlink_block(o);
        o->next = evicted;       /* freed outside the lock */
        evicted = o;
    }
    block *b = p;
    b->size = size;
    b->prev = NULL;
    b->next = buckets[bucket_of(size)];
    if (b->next) b->next->prev = b;
    buckets[bucket_of(size)] = b;
    b->newer = NULL;
    b->older = newest;
    if (newest) newest->newer = b;
    newest = b;
    if (!oldest) oldest = b;
    cached += size;
    pthread_mutex_unlock(&mu);
    free_chain(evicted);
}

void lz_pool_trim(void)
{
    pthread_mutex_lock(&mu);
    block *all = newest;
    for (int i = 0; i < NBUCKETS; i++) buckets[i] = NULL;
    newest = oldest = NULL;
    cached = 0;
    pthread_mutex_unlock(&mu);
    while (all) {
        block *next = all->older;
        free_block(all, all->size);
        all = next;
    }
}

size_t lz_pool_held_bytes(void)
{
    pthread_mutex_lock(&mu);
    size_t n = held;
    pthread_mutex_unlock(&mu);
    return n;
}

size_t lz_pool_cached_bytes(void)
{
    pthread_mutex_lock(&mu);
    size_t n = cached;
    pthread_mutex_unlock(&mu);
    return n;
}

/* A write a page: madvise(MADV_POPULATE_WRITE) would hold the address
   space's lock for a whole range, and the thread whose work this fills
   the wait for (oneDNN's JIT) needs that lock to map its code. */
void lz_pool_fault_in(void *p, size_t nbytes, const atomic_int *stop)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), chunk = (size_t)256 << 10;
    for (size_t off = 0; off < nbytes && !atomic_load(stop); off += chunk)
        for (size_t k = off; k < nbytes && k < off + chunk; k += page) ((volatile char *)p)[k] = 0;
}
