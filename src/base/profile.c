/* Kernel time by op (lz_profile_*). The executor thread adds, the
 * program's thread reads: a mutex guards the table, taken once per kernel
 * and only while profiling is on. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/op.h"
#include "base/profile.h"
#include "lazyc.h"

typedef struct slot { int64_t calls; double ms; } slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot table[LZ_OP_COUNT][2];
static atomic_int on;

int  lz_profile_on(void) { return atomic_load_explicit(&on, memory_order_relaxed); }
void lz_profile_enable(int enable) { atomic_store(&on, !!enable); }

void lz_profile_add(int op, int library, double ms)
{
    if (op < 0 || op >= LZ_OP_COUNT) return;
    pthread_mutex_lock(&lock);
    table[op][!!library].calls++;
    table[op][!!library].ms += ms;
    pthread_mutex_unlock(&lock);
}

void lz_profile_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    pthread_mutex_unlock(&lock);
}

static int by_time(const void *a, const void *b)
{
    const lz_profile_entry *x = a, *y = b;
    return (x->ms < y->ms) - (x->ms > y->ms);
}

int lz_profile_read(lz_profile_entry *out, int max)
{
    lz_profile_entry all[LZ_OP_COUNT * 2];
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int op = 0; op < LZ_OP_COUNT; op++)
        for (int lib = 0; lib < 2; lib++)
            if (table[op][lib].calls)
                all[n++] = (lz_profile_entry){lz_op_name((lz_op)op), lib, table[op][lib].calls,
                                              table[op][lib].ms};
    pthread_mutex_unlock(&lock);
    qsort(all, (size_t)n, sizeof *all, by_time);
    for (int i = 0; i < n && i < max && out; i++) out[i] = all[i];
    return n;
}
