#include "base/fault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/settings.h"

/* events left before the armed one fails; 0 when disarmed */
static atomic_long remaining[LZ_FAULT_KINDS];
static atomic_long fired[LZ_FAULT_KINDS];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_int env_read;   /* set once read_env ran: the hot path skips pthread_once */

static void read_env(void)
{
    static const lz_setting_id ids[LZ_FAULT_KINDS] = {LZ_SETTING_FAULT_ALLOC, LZ_SETTING_FAULT_KERNEL,
                                                       LZ_SETTING_FAULT_HOST, LZ_SETTING_FAULT_SCRATCH};
    for (int k = 0; k < LZ_FAULT_KINDS; k++)
        atomic_store(&remaining[k], (long)lz_setting_int(ids[k]));
    atomic_store_explicit(&env_read, 1, memory_order_release);
}

void lz_fault_set(int kind, long n)
{
    if (kind < 0 || kind >= LZ_FAULT_KINDS) return;
    /* read the environment first, so it never overrides a later set */
    pthread_once(&env_once, read_env);
    atomic_store(&remaining[kind], n > 0 ? n : 0);
}

void lz_fault_reset(void)
{
    pthread_once(&env_once, read_env);
    for (int k = 0; k < LZ_FAULT_KINDS; k++) {
        atomic_store(&remaining[k], 0);
        atomic_store(&fired[k], 0);
    }
}

long lz_fault_fired(int kind)
{
    return kind >= 0 && kind < LZ_FAULT_KINDS ? atomic_load(&fired[kind]) : 0;
}

int lz_fault_hit(int kind)
{
    if (!atomic_load_explicit(&env_read, memory_order_acquire)) pthread_once(&env_once, read_env);
    long r = atomic_load_explicit(&remaining[kind], memory_order_relaxed);
    /* the thread whose decrement takes it from 1 to 0 fails; then disarmed */
    while (r > 0)
        if (atomic_compare_exchange_weak(&remaining[kind], &r, r - 1)) {
            if (r != 1) return 0;
            atomic_fetch_add(&fired[kind], 1);
            return 1;
        }
    return 0;
}

void *lz_host_malloc(size_t n) { return lz_fault_hit(LZ_FAULT_HOST) ? NULL : malloc(n); }

void *lz_host_calloc(size_t n, size_t size)
{
    return lz_fault_hit(LZ_FAULT_HOST) ? NULL : calloc(n, size);
}

void *lz_host_realloc(void *p, size_t n) { return lz_fault_hit(LZ_FAULT_HOST) ? NULL : realloc(p, n); }

const char *lz_fault_kernel_message(const char *op)
{
    static _Thread_local char msg[128];
    snprintf(msg, sizeof msg, "injected fault in kernel %s", op);
    return msg;
}
