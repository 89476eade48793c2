#include "engine/cache.h"

#include <stdlib.h>

#include "base/fault.h"
#include "base/settings.h"

typedef struct entry {
    lz_executable *exe;
    struct entry *chain;             /* same bucket */
    struct entry *lru_prev, *lru_next;
} entry;

#define NBUCKETS 1024
static entry *buckets[NBUCKETS];
static entry *lru_head, *lru_tail;   /* head: most recently used */
static int size, capacity;

static int cap(void)
{
    if (!capacity) capacity = (int)lz_setting_int(LZ_SETTING_CACHE_CAPACITY);
    return capacity;
}

static void lru_unlink(entry *e)
{
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next; else lru_head = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev; else lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_front(entry *e)
{
    e->lru_next = lru_head;
    if (lru_head) lru_head->lru_prev = e;
    lru_head = e;
    if (!lru_tail) lru_tail = e;
}

lz_executable *lz_cache_find(const lz_graph *g)
{
    for (entry *e = buckets[g->hash % NBUCKETS]; e; e = e->chain) {
        if (e->exe->hash != g->hash ||
            !lz_graph_same(e->exe->sig, e->exe->sig_len, g->sig, g->sig_len))
            continue;
        lru_unlink(e);
        lru_front(e);
        lz_executable_ref(e->exe);
        return e->exe;
    }
    return NULL;
}

const lz_executable *lz_cache_nearest(const lz_graph *g, size_t *common)
{
    const lz_executable *best = NULL;
    size_t best_len = 0;
    /* most recently used first: it wins a tie */
    for (const entry *e = lru_head; e; e = e->lru_next) {
        const int64_t *a = e->exe->sig;
        size_t n = e->exe->sig_len < g->sig_len ? e->exe->sig_len : g->sig_len, k = 0;
        while (k < n && a[k] == g->sig[k]) k++;
        if (!best || k > best_len) best = e->exe, best_len = k;
    }
    *common = best_len;
    return best;
}

static void remove_entry(entry *e)
{
    entry **pp = &buckets[e->exe->hash % NBUCKETS];
    while (*pp != e) pp = &(*pp)->chain;
    *pp = e->chain;
    lru_unlink(e);
    lz_executable_unref(e->exe);
    free(e);
    size--;
}

void lz_cache_insert(lz_executable *exe)
{
    entry *e = lz_host_calloc(1, sizeof *e);
    if (!e) return;   /* out of memory: this graph runs uncached, compiles again next time */
    lz_executable_ref(exe);
    e->exe = exe;
    e->chain = buckets[exe->hash % NBUCKETS];
    buckets[exe->hash % NBUCKETS] = e;
    lru_front(e);
    size++;
    for (entry *victim = lru_tail, *prev; victim && size > cap(); victim = prev) {
        prev = victim->lru_prev;
        if (victim->exe->pinned <= 0 && victim != e) remove_entry(victim);
    }
}

int lz_cache_size(void) { return size; }
void lz_cache_set_capacity(int c) { capacity = c > 0 ? c : 0; }

void lz_cache_clear(void)
{
    while (lru_head) remove_entry(lru_head);
}
