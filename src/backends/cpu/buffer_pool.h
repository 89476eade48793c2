#ifndef LZ_CPU_POOL_H
#define LZ_CPU_POOL_H

#include <stdatomic.h>
#include <stddef.h>

/* 64-byte aligned host memory; freed blocks are reused by exact size, up
   to LZ_POOL_MIB (default 4096) MiB cached; when full, the blocks freed
   longest ago are returned to the system first. A request that finds no
   block of its size returns as many bytes of the oldest ones while more
   is cached than held (buffer_pool.c). */
void *lz_pool_alloc(size_t nbytes);
void  lz_pool_free(void *p, size_t nbytes);
/* Returns every cached block to the system. */
void  lz_pool_trim(void);
/* Bytes of freed blocks held for reuse. */
size_t lz_pool_cached_bytes(void);
/* Bytes handed out and not yet freed. */
size_t lz_pool_held_bytes(void);
/* Faults p's nbytes in (their first touch, done now) until *stop is set:
   writes a byte a page, so their contents are undefined after. */
void lz_pool_fault_in(void *p, size_t nbytes, const atomic_int *stop);

#endif
