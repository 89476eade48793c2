/* Kernel time by op (lz_profile_*), and by step shape as well at level 2.
 * The executor thread adds, the program's thread reads: a mutex guards the
 * tables, taken once per kernel and only while profiling is on. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/op.h"
#include "base/profile.h"
#include "lazyc.h"

typedef struct slot { int64_t calls; double ms; } slot;

/* Step shapes: an open-addressed table; shapes past its size are counted
   under one "(other shapes)" entry of their op, so the totals still add up. */
#define N_SHAPES 2048
typedef struct shape_slot {
    int used, op, library;
    uint64_t hash;
    char operands[LZ_PROFILE_OPERANDS];
    slot t;
    double flops;
} shape_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot table[LZ_OP_COUNT][2];
static shape_slot *shapes;   /* N_SHAPES, made on the first step added after a reset */
static int n_shapes;         /* kept at half the slots, so a probe ends soon */
static slot others[LZ_OP_COUNT][2];   /* shapes past those, or all if shapes could not be made */
static atomic_int on;

int  lz_profile_on(void) { return atomic_load_explicit(&on, memory_order_relaxed) != 0; }
int  lz_profile_steps_on(void) { return atomic_load_explicit(&on, memory_order_relaxed) == 2; }
void lz_profile_enable(int enable) { atomic_store(&on, enable == 2 ? 2 : !!enable); }

void lz_profile_add(int op, int library, double ms)
{
    if (op < 0 || op >= LZ_OP_COUNT) return;
    pthread_mutex_lock(&lock);
    table[op][!!library].calls++;
    table[op][!!library].ms += ms;
    pthread_mutex_unlock(&lock);
}

void lz_profile_add_step(int op, int library, const char *operands, double flops, double ms)
{
    if (op < 0 || op >= LZ_OP_COUNT) return;
    const uint64_t h = lz_hash_mix(lz_hash_str(operands), (uint64_t)(op * 2 + library));
    pthread_mutex_lock(&lock);
    if (!shapes) shapes = calloc(N_SHAPES, sizeof *shapes);
    shape_slot *e = NULL;
    for (size_t i = 0, k = h % N_SHAPES; shapes && i < N_SHAPES; i++, k = (k + 1) % N_SHAPES) {
        shape_slot *t = &shapes[k];
        if (t->used && (t->hash != h || t->op != op || t->library != library ||
                        strcmp(t->operands, operands) != 0))
            continue;
        if (!t->used && n_shapes == N_SHAPES / 2) break;   /* full: other shapes */
        if (!t->used) {
            *t = (shape_slot){1, op, library, h, "", {0, 0}, flops};
            snprintf(t->operands, sizeof t->operands, "%s", operands);
            n_shapes++;
        }
        e = t;
        break;
    }
    slot *c = e ? &e->t : &others[op][!!library];
    c->calls++;
    c->ms += ms;
    table[op][!!library].calls++;
    table[op][!!library].ms += ms;
    pthread_mutex_unlock(&lock);
}

void lz_profile_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    free(shapes);   /* lz_shutdown resets: nothing of the profile stays allocated */
    shapes = NULL;
    memset(others, 0, sizeof others);
    n_shapes = 0;
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

static int step_by_time(const void *a, const void *b)
{
    const lz_profile_step_entry *x = a, *y = b;
    return (x->ms < y->ms) - (x->ms > y->ms);
}

int lz_profile_read_steps(lz_profile_step_entry *out, int max)
{
    pthread_mutex_lock(&lock);
    int n = n_shapes;
    for (int op = 0; op < LZ_OP_COUNT; op++) n += (others[op][0].calls > 0) + (others[op][1].calls > 0);
    lz_profile_step_entry *all = n ? malloc(sizeof *all * (size_t)n) : NULL;
    if (n && !all) {
        pthread_mutex_unlock(&lock);
        lz_errorf("lz_profile_read_steps: out of memory sorting %d step shapes", n);
        return -1;
    }
    int i = 0;
    for (int k = 0; shapes && k < N_SHAPES; k++) {
        const shape_slot *e = &shapes[k];
        if (!e->used) continue;
        all[i] = (lz_profile_step_entry){lz_op_name((lz_op)e->op), e->library, "", e->t.calls,
                                         e->t.ms, e->flops};
        memcpy(all[i++].operands, e->operands, sizeof e->operands);
    }
    for (int op = 0; op < LZ_OP_COUNT; op++)
        for (int lib = 0; lib < 2; lib++)
            if (others[op][lib].calls) {
                all[i] = (lz_profile_step_entry){lz_op_name((lz_op)op), lib, "", others[op][lib].calls,
                                                 others[op][lib].ms, 0};
                snprintf(all[i++].operands, sizeof all[0].operands, "(other shapes)");
            }
    pthread_mutex_unlock(&lock);
    if (n) qsort(all, (size_t)n, sizeof *all, step_by_time);
    for (int k = 0; k < n && k < max && out; k++) out[k] = all[k];
    free(all);
    return n;
}
