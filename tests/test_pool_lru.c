/* The CPU buffer pool under its cap (LZ_POOL_MIB): blocks of sizes no
 * longer asked for give way to newly freed ones, so a model that follows
 * another in the same process still gets its blocks back from the cache
 * (asserted on the cached-bytes counter, whose drop on an allocation is a
 * hit). */
#include <stdlib.h>

#include "testlib.h"
#include "backend/cpu/buffer_pool.h"

enum { KIB = 1024, MIB = 1024 * 1024 };

int main(void)
{
    setenv("LZ_POOL_MIB", "1", 1);   /* read on the pool's first use */
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

    lz_pool_trim();
    CHECK_EQ_I(lz_pool_cached_bytes(), 0);
    return lz_test_done();
}
