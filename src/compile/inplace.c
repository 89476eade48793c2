/* In-place updates (docs/design.md, semantic 7). A captured replay, or a lazy
 * full instruction, donates the buffers of the parameters and optimizer state it
 * updates: the new value is written over the old one, so an instruction holds one
 * copy of the model's state, not two. Which output may take which input's
 * memory is decided here, once per executable; the caller proposes the
 * pairs (the state it updates: engine/capture_bind.c, engine/step.c) and
 * lz_program_may_overwrite answers.
 *
 * An output may overwrite an input when the instruction writing it runs after
 * every read of the input, or is the input's last reader and reads it
 * element by element at the index it writes (a fused element-wise instruction:
 * the micro-op writing the output, and every one before it, reads the
 * input contiguously; none after it reads the input).
 *
 * The fused instructions that could do so move to the end of the schedule, with
 * every instruction that reads their results: the commit tail. Its kernels have
 * no failure of their own, and the backend checks the tail's injected
 * faults before the first of them runs, so an instruction that fails has written
 * nothing over its inputs: what it would have updated keeps its previous
 * value (test_fault). Moving them costs nothing: an update reads a
 * gradient and writes state, and both are kept anyway. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "compile/program.h"

static int reads_in_place(const lz_fused_arg *a, int64_t numel)
{
    return a->kind == LZ_FUSED_CONTIG || (a->kind == LZ_FUSED_SCALAR && numel == 1);
}

/* Whether the fused instruction s writes value out at micro-op m (returned) and
   reads value in only at micro-ops up to m, in place; -1 if not. */
static int same_index_writer(const lz_program *p, const lz_instr *s, int out, int in)
{
    const lz_fused *f = s->fused;
    if (!f) return -1;
    int m = -1;
    for (int k = 0; k < f->n_ops && m < 0; k++)
        if (f->ops[k].out == out && f->store[k]) m = k;
    if (m < 0) return -1;
    for (int k = 0; k < f->n_ops; k++)
        for (int a = 0; a < f->ops[k].n_in; a++) {
            const lz_fused_arg *arg = &f->args[k][a];
            if (arg->kind == LZ_FUSED_TILE || lz_memory_of(p, arg->ref) != in) continue;
            if (k > m || !reads_in_place(arg, f->numel)) return -1;
        }
    return m;
}

/* Instruction i writes an output that some same-sized input could give its
   memory to, were i its last reader. */
static int could_overwrite(const lz_program *p, int i)
{
    const lz_instr *s = &p->instrs[i];
    if (!s->fused) return 0;
    for (int k = -1; k < s->fused->n_extra; k++) {
        int o = k < 0 ? s->out : s->fused->extra[k];
        if (p->values[o].kind != LZ_VALUE_OUTPUT) continue;
        for (int a = 0; a < s->n_in; a++) {
            int in = lz_memory_of(p, s->in[a]);
            const lz_value *iv = &p->values[in];
            if (iv->kind == LZ_VALUE_INPUT && iv->nbytes == p->values[o].nbytes &&
                iv->dtype == p->values[o].dtype && same_index_writer(p, s, o, in) >= 0)
                return 1;
        }
    }
    return 0;
}

/* Adds instruction c to the tail with every later instruction that reads what they
   write, unless one of those is not a fused element-wise instruction. */
static void mark_with_readers(const lz_program *p, int c, char *tail, char *mine, char *made)
{
    memset(mine, 0, (size_t)p->n_instrs);
    memset(made, 0, (size_t)p->n_values);
    for (int j = c; j < p->n_instrs; j++) {
        const lz_instr *s = &p->instrs[j];
        int reached = j == c;
        for (int k = 0; k < s->n_in && !reached; k++) reached = made[lz_memory_of(p, s->in[k])];
        if (!reached) continue;
        if (!s->fused) return;
        mine[j] = 1;
        made[s->out] = 1;
        for (int k = 0; k < s->fused->n_extra; k++) made[s->fused->extra[k]] = 1;
    }
    for (int j = c; j < p->n_instrs; j++) tail[j] |= mine[j];
}

static void sink_tail(lz_program *p, const char *tail)
{
    lz_instr *order = lz_host_malloc(sizeof *order * (size_t)(p->n_instrs + 1));
    if (!order) {
        p->out_of_memory = 1;
        return;
    }
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->n_instrs; i++)
            if (!tail[i] == !pass) {
                if (pass && p->commit_from == p->n_instrs) p->commit_from = n;
                order[n++] = p->instrs[i];
            }
    memcpy(p->instrs, order, sizeof *order * (size_t)n);
    free(order);
}

static void record_uses(lz_program *p)
{
    p->written_by = lz_host_malloc(sizeof *p->written_by * (size_t)(p->n_outputs + 1));
    p->last_read_by = lz_host_malloc(sizeof *p->last_read_by * (size_t)(p->n_inputs + 1));
    p->output_value = lz_host_malloc(sizeof *p->output_value * (size_t)(p->n_outputs + 1));
    p->input_value = lz_host_malloc(sizeof *p->input_value * (size_t)(p->n_inputs + 1));
    if (!p->written_by || !p->last_read_by || !p->output_value || !p->input_value) {
        p->out_of_memory = 1;   /* lz_program_free frees what was allocated */
        return;
    }
    for (int o = 0; o < p->n_outputs; o++) p->written_by[o] = p->output_value[o] = -1;
    for (int k = 0; k < p->n_inputs; k++) p->last_read_by[k] = p->input_value[k] = -1;
    for (int v = 0; v < p->n_values; v++) {
        const lz_value *val = &p->values[v];
        if (val->kind == LZ_VALUE_OUTPUT) p->output_value[val->slot] = v;
        if (val->kind == LZ_VALUE_INPUT) p->input_value[val->slot] = v;
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        for (int k = -1; k < (s->fused ? s->fused->n_extra : 0); k++) {
            const lz_value *v = &p->values[k < 0 ? s->out : s->fused->extra[k]];
            if (v->kind == LZ_VALUE_OUTPUT) p->written_by[v->slot] = i;
        }
        for (int a = 0; a < s->n_in; a++) {
            int in = lz_memory_of(p, s->in[a]);
            if (p->values[in].kind == LZ_VALUE_INPUT) p->last_read_by[p->values[in].slot] = i;
        }
    }
}

void lz_plan_inplace(lz_program *p)
{
    p->commit_from = p->n_instrs;
    char *tail = lz_host_calloc((size_t)p->n_instrs + 1, 1);
    char *mine = lz_host_malloc((size_t)p->n_instrs + 1), *made = lz_host_malloc((size_t)p->n_values + 1);
    if (!tail || !mine || !made) {
        free(tail); free(mine); free(made);
        p->out_of_memory = 1;
        return;
    }
    for (int i = 0; i < p->n_instrs; i++)
        if (!tail[i] && could_overwrite(p, i)) mark_with_readers(p, i, tail, mine, made);
    sink_tail(p, tail);
    free(tail);
    free(mine);
    free(made);
    record_uses(p);
}

int lz_program_may_overwrite(const lz_program *p, int out_slot, int in_slot)
{
    if (!p->written_by || out_slot < 0 || out_slot >= p->n_outputs || in_slot < 0 ||
        in_slot >= p->n_inputs)
        return 0;
    int out = p->output_value[out_slot], in = p->input_value[in_slot];
    if (out < 0 || in < 0 || p->values[out].nbytes != p->values[in].nbytes ||
        p->values[out].dtype != p->values[in].dtype)
        return 0;
    int w = p->written_by[out_slot], r = p->last_read_by[in_slot];
    if (w < p->commit_from) return 0;   /* only the tail writes over inputs */
    if (r != w) return r < w;
    return same_index_writer(p, &p->instrs[w], out, in) >= 0;
}
