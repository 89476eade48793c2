/* Where a data-parallel sum runs in the schedule. Lowering gives the
 * post-order of the graph, in which the sums over ranks come late (they
 * were recorded after backward), and so do most weight gradients (the
 * post-order reaches them after the whole chain of input gradients). Here
 * each ALLREDUCE_START, with the instructions making its inputs, moves up to run
 * as soon as its operands exist, so it is summed while backward still
 * computes the gradients of earlier layers, and each ALLREDUCE_WAIT moves
 * down to just before the first instruction reading the sum (the optimizer), so
 * the instructions between run while the data travels. Every rank compiles the
 * same graph the same way, so the collectives start in the same order
 * everywhere, as MPI requires. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "base/settings.h"
#include "compile/program.h"

/* Moves instruction `from` to position `to` (the others keep their order). */
static void move_step(lz_program *p, int from, int to)
{
    if (from == to) return;
    lz_instr s = p->instrs[from];
    if (from < to)
        memmove(&p->instrs[from], &p->instrs[from + 1], sizeof s * (size_t)(to - from));
    else
        memmove(&p->instrs[to + 1], &p->instrs[to], sizeof s * (size_t)(from - to));
    p->instrs[to] = s;
}

static int reads(const lz_instr *s, int v)
{
    for (int k = 0; k < s->n_in; k++)
        if (s->in[k] == v) return 1;
    return 0;
}

/* Reorders the instructions so that each start comes as early as its inputs
 * allow: a topological order (Kahn's) that always takes, among the instructions
 * whose inputs are ready, the one needed by the earliest start, and among
 * those the first in the lowered order. So the first bucket's start runs
 * as soon as backward has made its gradients (their weight-gradient instructions
 * pulled up to where their operands exist, rather than left where the
 * post-order put them, after the whole chain of input gradients), the
 * second's next, and what no start needs (the loss's value, the updates)
 * keeps its order after. Only data dependencies order instructions here: no
 * instruction writes another's value before the in-place pass runs. 0, or -1 when
 * out of memory (p unchanged). */
static int hoist_starts(lz_program *p)
{
    const int n = p->n_instrs, nv = p->n_values;
    int *producer = lz_host_malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    int *group = lz_host_malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *waiting = lz_host_calloc((size_t)(n ? n : 1), sizeof(int));
    int *order = lz_host_malloc(sizeof(int) * (size_t)(n ? n : 1));
    char *done = lz_host_calloc((size_t)(n ? n : 1), 1);
    lz_instr *steps = lz_host_malloc(sizeof(lz_instr) * (size_t)(n ? n : 1));
    int rc = -1;
    if (!producer || !group || !waiting || !order || !done || !steps) goto out;
    for (int v = 0; v < nv; v++) producer[v] = -1;
    for (int i = 0; i < n; i++) producer[p->instrs[i].out] = i;
    /* group: the rank (0, 1, ...) of the first start needing the instruction;
       n for none. Walking back from each start marks its ancestors. */
    for (int i = 0; i < n; i++) group[i] = n;
    int g = 0;
    for (int i = 0; i < n; i++) {
        if (p->instrs[i].op != LZ_OP_ALLREDUCE_START) continue;
        group[i] = g < group[i] ? g : group[i];
        /* ancestors lie before i in a topological order: one backward pass */
        for (int j = i; j >= 0; j--) {
            if (j != i && group[j] != g) continue;
            for (int k = 0; k < p->instrs[j].n_in; k++) {
                int q = producer[p->instrs[j].in[k]];
                if (q >= 0 && group[q] > g) group[q] = g;
            }
        }
        g++;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < p->instrs[i].n_in; k++)
            if (producer[p->instrs[i].in[k]] >= 0) waiting[i]++;
    /* an instruction reading one value twice counts it twice, and is released
       twice below: the counts match */
    for (int placed = 0; placed < n; placed++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!done[i] && !waiting[i] && (best < 0 || group[i] < group[best])) best = i;
        if (best < 0) goto out;   /* not a DAG: cannot happen; keep the lowered order */
        done[best] = 1;
        order[placed] = best;
        const int v = p->instrs[best].out;
        for (int i = 0; i < n; i++)
            if (!done[i])
                for (int k = 0; k < p->instrs[i].n_in; k++)
                    if (p->instrs[i].in[k] == v) waiting[i]--;
    }
    for (int i = 0; i < n; i++) steps[i] = p->instrs[order[i]];
    memcpy(p->instrs, steps, sizeof(lz_instr) * (size_t)n);
    rc = 0;
out:
    free(producer);
    free(group);
    free(waiting);
    free(order);
    free(done);
    free(steps);
    return rc;
}

void lz_schedule_collectives(lz_program *p, uint64_t graph_hash)
{
    int ordinal = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        lz_instr *s = &p->instrs[i];
        if (s->op != LZ_OP_ALLREDUCE_START) continue;
        s->iattr[0] = (int64_t)graph_hash;
        s->iattr[1] = ordinal++;
    }
    if (!ordinal || !lz_setting_int(LZ_SETTING_DIST_OVERLAP)) return;
    if (hoist_starts(p) != 0) return;   /* out of memory: the order stays as lowered */
    /* waits late, the last first: each goes right before its first reader
       (or to the end when only the caller reads the sum) */
    for (int i = p->n_instrs - 1; i >= 0; i--) {
        if (p->instrs[i].op != LZ_OP_ALLREDUCE_WAIT) continue;
        int to = p->n_instrs - 1;
        for (int j = i + 1; j < p->n_instrs; j++)
            if (reads(&p->instrs[j], p->instrs[i].out)) {
                to = j - 1;
                break;
            }
        move_step(p, i, to);
    }
}
