/* Memory planning in one pass over the schedule (like ggml-alloc): each
 * temporary takes the best-fitting free block when it is produced and gives
 * it back after its last use, so activations reuse freed memory. An instruction's
 * scratch is a temporary that lives for that instruction alone. */
#include <stdlib.h>

#include "base/fault.h"
#include "compile/executable.h"

#define ALIGN 64

typedef struct block { size_t off, size; } block;

typedef struct freelist { block *v; int n, cap; size_t end; } freelist;

static size_t take(freelist *f, size_t size)
{
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->v[i].size >= size && (best < 0 || f->v[i].size < f->v[best].size)) best = i;
    if (best < 0) {
        /* grow: a free block ending the arena is extended in place */
        for (int i = 0; i < f->n; i++)
            if (f->v[i].off + f->v[i].size == f->end) {
                size_t off = f->v[i].off;
                f->end = off + size;
                f->v[i] = f->v[--f->n];
                return off;
            }
        size_t off = f->end;
        f->end += size;
        return off;
    }
    size_t off = f->v[best].off;
    f->v[best].off += size;
    f->v[best].size -= size;
    if (!f->v[best].size) f->v[best] = f->v[--f->n];
    return off;
}

static void give(freelist *f, size_t off, size_t size)
{
    /* merge with neighbours so fragmentation does not grow the arena */
    for (int i = 0; i < f->n; i++) {
        if (f->v[i].off + f->v[i].size == off) { off = f->v[i].off; size += f->v[i].size; f->v[i--] = f->v[--f->n]; }
        else if (off + size == f->v[i].off) { size += f->v[i].size; f->v[i--] = f->v[--f->n]; }
    }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 32;
        block *v = lz_host_realloc(f->v, sizeof *f->v * (size_t)cap);
        if (!v) return;   /* out of memory: the block is never reused, the arena grows */
        f->v = v, f->cap = cap;
    }
    f->v[f->n++] = (block){off, size};
}

static int n_extra(const lz_instr *s) { return s->fused ? s->fused->n_extra : 0; }

static size_t aligned(size_t nbytes) { return (nbytes + ALIGN - 1) / ALIGN * ALIGN; }

void lz_plan_memory(lz_program *p)
{
    int *last_use = lz_host_malloc(sizeof *last_use * (size_t)(p->n_values ? p->n_values : 1));
    if (!last_use) {
        p->out_of_memory = 1;
        return;
    }
    for (int v = 0; v < p->n_values; v++) last_use[v] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        last_use[p->instrs[i].out] = i;
        for (int k = 0; k < n_extra(&p->instrs[i]); k++) last_use[p->instrs[i].fused->extra[k]] = i;
        /* a view's use keeps the memory it views */
        for (int k = 0; k < p->instrs[i].n_in; k++) last_use[lz_memory_of(p, p->instrs[i].in[k])] = i;
    }
    freelist f = {0};
    for (int i = 0; i < p->n_instrs; i++) {
        lz_instr *s = &p->instrs[i];
        /* a fused instruction writes its extra results too: all are placed
           before any input is freed */
        for (int k = -1; k < n_extra(s); k++) {
            lz_value *out = &p->values[k < 0 ? s->out : s->fused->extra[k]];
            if (out->kind == LZ_VALUE_TEMP)
                out->offset = take(&f, aligned(out->nbytes));
        }
        if (s->scratch_bytes) s->scratch_offset = take(&f, aligned(s->scratch_bytes));
        /* freed after the instruction, so no kernel writes over its own inputs */
        for (int k = -1 - n_extra(s); k < s->n_in; k++) {
            int v = k == -1 ? s->out : k < -1 ? s->fused->extra[-2 - k] : lz_memory_of(p, s->in[k]);
            lz_value *val = &p->values[v];
            if (val->kind != LZ_VALUE_TEMP || last_use[v] != i) continue;
            last_use[v] = -2; /* an input listed twice is freed once */
            give(&f, val->offset, aligned(val->nbytes));
        }
        if (s->scratch_bytes) give(&f, s->scratch_offset, aligned(s->scratch_bytes));
    }
    p->arena_bytes = f.end;
    free(f.v);
    free(last_use);
}
