/* The CPU buffer pool under its cap (LZ_POOL_MIB): blocks of sizes no
 * longer asked for give way to newly freed ones, so a model that follows
 * another in the same process still gets its blocks back from the cache
 * (asserted on the cached-bytes counter, whose drop on an allocation is a
 * hit). And below the cap: a request no cached block fits gives back as
 * many bytes of the oldest blocks while the pool caches more than the
 * program holds (a finished model's buffers), none while it holds more (a
 * training step's freed buffers beside its parameters). With
 * LZ_HUGE_PAGES=1, blocks of 2 MiB and more are aligned to 2 MiB and
 * advised for huge pages (the flag "hg" of their mapping in
 * /proc/self/smaps); smaller ones are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "backends/cpu/buffer_pool.h"

enum { KIB = 1024, MIB = 1024 * 1024, N = 16 };

static int holds(void *const *set, int n, const void *p)
{
    for (int i = 0; i < n; i++)
        if (set[i] == p) return 1;
    return 0;
}

/* the same sizes again: the same blocks, nothing new */
static void steady_sizes_reuse_blocks(void)
{
    void *a[N], *b[N];
    for (int i = 0; i < N; i++) a[i] = lz_pool_alloc(32 * KIB);
    for (int i = 0; i < N; i++) lz_pool_free(a[i], 32 * KIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), N * 32 * KIB);
    int reused = 0;
    for (int i = 0; i < N; i++) reused += holds(a, N, b[i] = lz_pool_alloc(32 * KIB));
    CHECK_EQ_I(reused, N);
    CHECK_EQ_I(lz_pool_cached_bytes(), 0);
    CHECK_EQ_I(lz_pool_held_bytes(), N * 32 * KIB);
    for (int i = 0; i < N; i++) lz_pool_free(b[i], 32 * KIB);
    CHECK_EQ_I(lz_pool_held_bytes(), 0);
    lz_pool_trim();
}

/* a finished model's buffers make room for the next one's sizes */
static void new_sizes_take_the_place_of_old_ones(void)
{
    void *a[N];
    for (int i = 0; i < N; i++) a[i] = lz_pool_alloc(32 * KIB);
    for (int i = 0; i < N; i++) lz_pool_free(a[i], 32 * KIB);
    void *c = lz_pool_alloc(96 * KIB);             /* held 0 < cached 16 blocks */
    CHECK(c != NULL);
    CHECK_EQ_I(lz_pool_cached_bytes(), (N - 3) * 32 * KIB);
    void *d = lz_pool_alloc(160 * KIB);            /* held 3 < cached 13 */
    CHECK_EQ_I(lz_pool_cached_bytes(), (N - 8) * 32 * KIB);
    void *e = lz_pool_alloc(224 * KIB);            /* held 8 = cached 8: stops there */
    CHECK_EQ_I(lz_pool_cached_bytes(), (N - 8) * 32 * KIB);
    lz_pool_free(c, 96 * KIB);
    lz_pool_free(d, 160 * KIB);
    lz_pool_free(e, 224 * KIB);
    lz_pool_trim();
}

/* while the program holds more than the cache, a new size gives nothing
   back: those are the step's own buffers, wanted again next step */
static void held_memory_keeps_the_cache(void)
{
    void *params = lz_pool_alloc(768 * KIB), *a[N], *b[N];
    for (int i = 0; i < N; i++) a[i] = lz_pool_alloc(8 * KIB);
    for (int i = 0; i < N; i++) lz_pool_free(a[i], 8 * KIB);
    void *c = lz_pool_alloc(24 * KIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), N * 8 * KIB);
    int reused = 0;
    for (int i = 0; i < N; i++) reused += holds(a, N, b[i] = lz_pool_alloc(8 * KIB));
    CHECK_EQ_I(reused, N);
    for (int i = 0; i < N; i++) lz_pool_free(b[i], 8 * KIB);
    lz_pool_free(c, 24 * KIB);
    lz_pool_free(params, 768 * KIB);
    lz_pool_trim();
}

static void large_blocks_ask_for_huge_pages(void)
{
    const size_t size = 3 * MIB + 4 * KIB + 64;
    char *p = lz_pool_alloc(size);
    CHECK(p != NULL);
    CHECK_EQ_I((uintptr_t)p % (2 * MIB), 0);
    memset(p, 1, size);
    char flags[512];
    lz_test_vm_flags(p, flags, sizeof flags);
    if (lz_test_thp_kernel()) CHECK(strstr(flags, " hg") != NULL);
    else printf("no transparent huge pages in this kernel: the advice is not checked\n");
    lz_pool_free(p, size);                      /* over the 1 MiB cap: unmapped */
    CHECK_EQ_I(lz_pool_held_bytes(), 0);
    CHECK_EQ_I(lz_pool_cached_bytes(), 0);
    /* a small block stays on the C heap, unadvised */
    char *s = lz_pool_alloc(64 * KIB);
    lz_test_vm_flags(s, flags, sizeof flags);
    CHECK(strstr(flags, " hg") == NULL);
    lz_pool_free(s, 64 * KIB);
    lz_pool_trim();
}

int main(void)
{
    setenv("LZ_POOL_MIB", "1", 1);   /* read on the pool's first use */
    setenv("LZ_HUGE_PAGES", "1", 1);
    CHECK_EQ_I(lz_pool_held_bytes(), 0);
    steady_sizes_reuse_blocks();
    new_sizes_take_the_place_of_old_ones();
    held_memory_keeps_the_cache();
    large_blocks_ask_for_huge_pages();

    /* the LRU below the cap, with the program holding more than the cache
       (as a training step does), so no miss gives anything back */
    void *held = lz_pool_alloc(2 * MIB);
    void *old[4], *cur[2];
    for (int i = 0; i < 4; i++) old[i] = lz_pool_alloc(256 * KIB);
    for (int i = 0; i < 4; i++) CHECK(old[i] != NULL);
    for (int i = 0; i < 4; i++) lz_pool_free(old[i], 256 * KIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), MIB);

    /* a new size fills a full cache by evicting the oldest blocks */
    for (int i = 0; i < 2; i++) cur[i] = lz_pool_alloc(384 * KIB);
    for (int i = 0; i < 2; i++) lz_pool_free(cur[i], 384 * KIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), MIB);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 2; i++) cur[i] = lz_pool_alloc(384 * KIB);
        CHECK_EQ_I(lz_pool_cached_bytes(), MIB - 768 * KIB);   /* both hits */
        for (int i = 0; i < 2; i++) lz_pool_free(cur[i], 384 * KIB);
        CHECK_EQ_I(lz_pool_cached_bytes(), MIB);
    }
    /* one 256 KiB block survived: the most recently freed of the old size */
    void *p = lz_pool_alloc(256 * KIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), 768 * KIB);
    CHECK(p == old[3]);
    lz_pool_free(p, 256 * KIB);

    /* larger than the whole cache: never cached, nothing evicted */
    void *big = lz_pool_alloc(2 * MIB);
    CHECK(big != NULL);
    lz_pool_free(big, 2 * MIB);
    CHECK_EQ_I(lz_pool_cached_bytes(), MIB);
    lz_pool_free(held, 2 * MIB);

    lz_pool_trim();
    CHECK_EQ_I(lz_pool_cached_bytes(), 0);
    return lz_test_done();
}
