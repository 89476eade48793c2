#include "backends/cpu/scratch.h"

#include <omp.h>
#include <stdlib.h>

#include "base/fault.h"

#define MAX_SLOTS 256

/* padded to a cache line each, so two threads never share one */
static struct { void *p; size_t cap; char pad[48]; } slots[LZ_SCRATCH_KINDS][MAX_SLOTS];

void *lz_cpu_scratch(int kind, size_t nbytes)
{
    int t = omp_get_thread_num();
    if (t < 0 || t >= MAX_SLOTS || kind < 0 || kind >= LZ_SCRATCH_KINDS) return NULL;
    if (slots[kind][t].cap >= nbytes && slots[kind][t].p) return slots[kind][t].p;
    free(slots[kind][t].p);
    size_t cap = (nbytes + 63) / 64 * 64;
    /* LZ_FAULT_SCRATCH: as aligned_alloc failing (the old buffer is gone either way) */
    slots[kind][t].p = lz_fault_hit(LZ_FAULT_SCRATCH) ? NULL : aligned_alloc(64, cap ? cap : 64);
    slots[kind][t].cap = slots[kind][t].p ? cap : 0;
    return slots[kind][t].p;
}

void lz_cpu_scratch_trim(void)
{
    for (int k = 0; k < LZ_SCRATCH_KINDS; k++)
        for (int t = 0; t < MAX_SLOTS; t++) {
            free(slots[k][t].p);
            slots[k][t].p = NULL;
            slots[k][t].cap = 0;
        }
}
