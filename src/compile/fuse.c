/* Fusion of element-wise chains: a run of consecutive element-wise f32
 * instructions over the same number of elements (the last ones may be casts of
 * their results to bf16) becomes one instruction that makes a
 * single pass over memory (the CPU kernel is backends/cpu/k_fused.c). A
 * result is written to memory only when something outside the run needs
 * it: a graph output, or a later instruction. The others stay in the kernel's
 * tiles, which is where the memory traffic of an optimizer update or a
 * bias-add-activation chain goes away.
 *
 * Only consecutive instructions are fused, so the schedule order (and with it
 * every instruction outside a run) is unchanged. Operands from outside the run
 * are read in the group's element order (same number of elements: a
 * broadcast that adds no elements moves none), as one element (scalars)
 * or through broadcast strides (per-channel terms).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "compile/executable.h"

static int fusable(const lz_program *p, const lz_instr *s)
{
    /* the element-wise kernel's formulas; where (3 operands) stays unfused */
    if (!lz_op_is_elementwise((lz_op)s->op) || s->n_in < 1 || s->n_in > LZ_FUSED_MAX_IN) return 0;
    const lz_value *o = &p->values[s->out];
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype != LZ_F32) return 0;
    /* autocast's cast of a chain's result for a bf16 product joins the
       chain, so the float32 result it reads need not go to memory; no
       micro-op reads bf16, so the cast's own result always does */
    const int bf16_cast = s->op == LZ_OP_CAST && o->dtype == LZ_BF16;
    return (o->dtype == LZ_F32 || bf16_cast) && o->numel > 0;
}

/* Builds the fused instruction for the instructions old[idx[0..n)] into *dst. uses[v]
   counts the operand slots that read value v in the whole program. -1 when
   out of memory (*dst untouched). */
static int fuse_run(const lz_program *p, const lz_instr *old, const int *idx, int n,
                    const int *uses, lz_instr *dst)
{
    lz_fused *f = lz_host_calloc(1, sizeof *f);
    int *ext = lz_host_malloc(sizeof *ext * (size_t)(n * LZ_FUSED_MAX_IN));
    if (!f || !ext) {
        free(f);
        free(ext);
        return -1;
    }
    f->n_ops = n;
    f->numel = p->values[old[idx[0]].out].numel;
    int n_ext = 0;
    for (int k = 0; k < n; k++) {
        const lz_instr *s = &old[idx[k]];
        f->ops[k] = *s;
        for (int a = 0; a < s->n_in; a++) {
            int v = s->in[a], prod = -1;
            for (int j = k - 1; j >= 0 && prod < 0; j--)
                if (f->ops[j].out == v) prod = j;
            if (prod >= 0) {
                f->args[k][a] = (lz_fused_arg){LZ_FUSED_TILE, prod};
                continue;
            }
            int64_t numel = p->values[v].numel;
            int kind = numel == f->numel ? LZ_FUSED_CONTIG
                     : numel == 1        ? LZ_FUSED_SCALAR : LZ_FUSED_BCAST;
            f->args[k][a] = (lz_fused_arg){kind, v};
            int seen = 0;
            for (int e = 0; e < n_ext && !seen; e++) seen = ext[e] == v;
            if (!seen) ext[n_ext++] = v;
        }
    }
    /* a result is stored when some read of it is outside the group */
    for (int k = 0; k < n; k++) {
        int v = f->ops[k].out, inside = 0;
        for (int j = k + 1; j < n; j++)
            for (int a = 0; a < f->ops[j].n_in; a++) inside += f->ops[j].in[a] == v;
        f->store[k] = k == n - 1 || p->values[v].kind == LZ_VALUE_OUTPUT || uses[v] > inside ||
                      p->values[v].dtype != LZ_F32;   /* tiles hold floats */
        if (f->store[k] && k != n - 1) f->extra[f->n_extra++] = v;
    }
    memset(dst, 0, sizeof *dst);
    dst->op = LZ_OP_FUSED_ELEMENTWISE;
    dst->out = f->ops[n - 1].out;
    dst->n_in = n_ext;
    dst->in = ext;
    dst->fused = f;
    return 0;
}

/* Groups being collected. A group is emitted (and so runs) when an instruction
   outside it reads one of its results, so every instruction emitted while it is
   open reads none of them and may run before it: that is what lets a
   chain fuse across the instructions interleaved with it (the reshape of a
   per-channel weight, the whole backward pass between an optimizer's
   momentum decay and the gradient it is added to). */
#define MAX_OPEN 32

typedef struct group {
    int n, idx[LZ_FUSED_MAX_OPS];
    int64_t numel;
    long opened;             /* order of opening; 0: the slot is free */
} group;

typedef struct fuser {
    const lz_program *p;
    const lz_instr *old;
    const int *uses;
    int *pending;            /* value -> reads by instructions not yet seen */
    int *owner;              /* value -> open group producing it, or -1 */
    group open[MAX_OPEN];
    long opened;
    lz_instr *out;
    int n_out;
} fuser;

static void emit(fuser *fz, int gi)
{
    group *g = &fz->open[gi];
    /* out of memory, a group runs unfused: the same instructions in order */
    if (g->n == 1 || fuse_run(fz->p, fz->old, g->idx, g->n, fz->uses, &fz->out[fz->n_out]) != 0)
        for (int k = 0; k < g->n; k++) fz->out[fz->n_out++] = fz->old[g->idx[k]];
    else
        fz->n_out++;
    for (int k = 0; k < g->n; k++) fz->owner[fz->old[g->idx[k]].out] = -1;
    g->n = 0;
    g->opened = 0;
}

static int open_group(fuser *fz, int64_t numel)
{
    int slot = -1, oldest = 0;
    for (int i = 0; i < MAX_OPEN && slot < 0; i++)
        if (!fz->open[i].opened) slot = i;
        else if (fz->open[i].opened < fz->open[oldest].opened) oldest = i;
    if (slot < 0) {
        emit(fz, oldest);
        slot = oldest;
    }
    fz->open[slot] = (group){.numel = numel, .opened = ++fz->opened};
    return slot;
}

/* Moves each bf16 cast of an element-wise instruction's result to just after
   that instruction. Autograd records a product's cast where the product is, and
   in the backward pass a reduction often comes between (a bias's
   gradient sums the same values the convolution's cast reads): the group
   would run before the cast arrived, and the cast would read the float32
   result back from memory as a kernel of its own. Moving it up is a valid
   order (its one input is ready there); its result lives a few instructions
   longer. */
static void hoist_casts(lz_program *p)
{
    const int n = p->n_instrs;
    int *cast_of = lz_host_malloc(sizeof *cast_of * (size_t)(p->n_values ? p->n_values : 1));
    int *next = lz_host_malloc(sizeof *next * (size_t)n);
    char *moved = lz_host_calloc((size_t)n, 1);
    lz_instr *order = lz_host_malloc(sizeof *order * (size_t)n);
    if (!cast_of || !next || !moved || !order) {   /* the order stays */
        free(cast_of); free(next); free(moved); free(order);
        return;
    }
    /* cast_of[v]: the first cast instruction reading v, next[i]: the one after i */
    for (int v = 0; v < p->n_values; v++) cast_of[v] = -1;
    for (int i = n - 1; i >= 0; i--) {
        const lz_instr *s = &p->instrs[i];
        next[i] = -1;
        if (s->op != LZ_OP_CAST || s->n_in != 1 || !fusable(p, s)) continue;
        next[i] = cast_of[s->in[0]];
        cast_of[s->in[0]] = i;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (moved[i]) continue;
        order[k++] = p->instrs[i];
        if (!fusable(p, &p->instrs[i])) continue;
        for (int c = cast_of[p->instrs[i].out]; c >= 0; c = next[c])
            if (c > i) {
                order[k++] = p->instrs[c];
                moved[c] = 1;
            }
    }
    assert(k == n);
    memcpy(p->instrs, order, sizeof *order * (size_t)n);
    free(cast_of); free(next); free(moved); free(order);
}

void lz_fuse(lz_program *p)
{
    if (!lz_fusion_enabled() || p->n_instrs < 2) return;
    hoist_casts(p);
    fuser fz = {.p = p, .old = p->instrs};
    int *uses = lz_host_calloc((size_t)(p->n_values ? p->n_values : 1), sizeof *uses);
    fz.owner = lz_host_malloc(sizeof *fz.owner * (size_t)(p->n_values ? p->n_values : 1));
    fz.pending = lz_host_malloc(sizeof *fz.pending * (size_t)(p->n_values ? p->n_values : 1));
    fz.out = lz_host_calloc((size_t)p->n_instrs, sizeof *fz.out);
    if (!uses || !fz.owner || !fz.pending || !fz.out) {   /* the program stays unfused */
        free(uses); free(fz.owner); free(fz.pending); free(fz.out);
        return;
    }
    fz.uses = uses;
    for (int v = 0; v < p->n_values; v++) fz.owner[v] = -1;
    for (int i = 0; i < p->n_instrs; i++)
        for (int a = 0; a < p->instrs[i].n_in; a++) uses[p->instrs[i].in[a]]++;
    memcpy(fz.pending, uses, sizeof *uses * (size_t)p->n_values);

    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        int ok = fusable(p, s), join = -1;
        int64_t numel = p->values[s->out].numel;
        for (int a = 0; a < s->n_in; a++) fz.pending[s->in[a]]--;
        for (int a = 0; ok && a < s->n_in && join < 0; a++) {
            int g = fz.owner[s->in[a]];
            if (g >= 0 && fz.open[g].numel == numel) join = g;
        }
        /* the groups it reads from run first, but the one it joins */
        for (int a = 0; a < s->n_in; a++) {
            int g = fz.owner[s->in[a]];
            if (g >= 0 && g != join) emit(&fz, g);
        }
        if (!ok) {
            fz.out[fz.n_out++] = *s;
            continue;
        }
        if (join < 0) join = open_group(&fz, numel);
        group *g = &fz.open[join];
        g->idx[g->n++] = i;
        fz.owner[s->out] = join;
        /* only an instruction that reads a group's result can join it: with none
           left to come, waiting would only keep its operands alive */
        int waiting = 0;
        for (int k = 0; k < g->n && !waiting; k++) waiting = fz.pending[p->instrs[g->idx[k]].out] > 0;
        if (g->n == LZ_FUSED_MAX_OPS || !waiting) emit(&fz, join);
    }
    /* open groups read nothing of each other: any order will do */
    for (;;) {
        int first = -1;
        for (int i = 0; i < MAX_OPEN; i++)
            if (fz.open[i].opened && (first < 0 || fz.open[i].opened < fz.open[first].opened))
                first = i;
        if (first < 0) break;
        emit(&fz, first);
    }
    assert(fz.n_out <= p->n_instrs);
    free(p->instrs);
    p->instrs = fz.out;
    p->n_instrs = fz.n_out;
    free(fz.owner);
    free(fz.pending);
    free(uses);
}
