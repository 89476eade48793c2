/* Where a data-parallel sum runs in the schedule. Lowering gives the
 * post-order of the graph, in which the sums over ranks come late (they
 * were recorded after backward). Here each ALLREDUCE_START moves up to
 * just after the last step making one of its inputs, so it is started
 * while backward still computes the gradients of earlier layers, and each
 * ALLREDUCE_WAIT moves down to just before the first step reading the sum
 * (the optimizer), so the steps between run while the data travels.
 * Every rank compiles the same graph the same way, so the collectives are
 * started in the same order everywhere, as MPI requires. */
#include <string.h>

#include "base/settings.h"
#include "compile/program.h"

/* Moves step `from` to position `to` (the others keep their order). */
static void move_step(lz_program *p, int from, int to)
{
    if (from == to) return;
    lz_instr s = p->steps[from];
    if (from < to)
        memmove(&p->steps[from], &p->steps[from + 1], sizeof s * (size_t)(to - from));
    else
        memmove(&p->steps[to + 1], &p->steps[to], sizeof s * (size_t)(from - to));
    p->steps[to] = s;
}

static int reads(const lz_instr *s, int v)
{
    for (int k = 0; k < s->n_in; k++)
        if (s->in[k] == v) return 1;
    return 0;
}

void lz_schedule_collectives(lz_program *p, uint64_t graph_hash)
{
    int ordinal = 0;
    for (int i = 0; i < p->n_steps; i++) {
        lz_instr *s = &p->steps[i];
        if (s->op != LZ_OP_ALLREDUCE_START) continue;
        s->iattr[0] = (int64_t)graph_hash;
        s->iattr[1] = ordinal++;
    }
    if (!ordinal || !lz_setting_int(LZ_SETTING_DIST_OVERLAP)) return;
    /* starts early, in their order: each goes right after the latest
       producer of its inputs (a start placed earlier stays before) */
    for (int i = 0; i < p->n_steps; i++) {
        if (p->steps[i].op != LZ_OP_ALLREDUCE_START) continue;
        int to = 0;
        for (int j = i - 1; j >= 0 && !to; j--) {
            if (p->steps[j].op == LZ_OP_ALLREDUCE_START || reads(&p->steps[i], p->steps[j].out))
                to = j + 1;
        }
        move_step(p, i, to);
    }
    /* waits late, the last first: each goes right before its first reader
       (or to the end when only the caller reads the sum) */
    for (int i = p->n_steps - 1; i >= 0; i--) {
        if (p->steps[i].op != LZ_OP_ALLREDUCE_WAIT) continue;
        int to = p->n_steps - 1;
        for (int j = i + 1; j < p->n_steps; j++)
            if (reads(&p->steps[j], p->steps[i].out)) {
                to = j - 1;
                break;
            }
        move_step(p, i, to);
    }
}
