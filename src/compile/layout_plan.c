/* Blocked layouts: which 4-d temporaries the step's kernels keep in the
 * backend's channel-blocked layout (lz_value.block) instead of plain NCHW.
 *
 * oneDNN's convolutions run on blocked layouts (nChw16c with AVX-512);
 * fed plain memory they reorder every activation in and out
 * (docs/performance.md, "Blocked layouts"). A value goes blocked when every step
 * that writes or reads it has a kernel for that, so the reorders are left
 * only where a producer or consumer cannot (a reshape, a concatenation, a
 * broadcast the kernel does not map) and the conv at that boundary
 * reorders as before. Program inputs and outputs stay plain: what the
 * user reads, and what a replay binds, never changes layout.
 *
 * The backend says, per step, how its kernel takes each value
 * (lz_backend.operand_layouts): plain only, in the step's one layout (an
 * element-wise step reads its operands in the order it writes), or either
 * independently (a convolution). b may also be LZ_BLOCK_CHANNELS_LAST:
 * then a blocked value's block is its own channel count, [N, 1, H, W, C],
 * channels-last (what AMX's convolutions take), and the kernels are
 * asked with that b. Candidates start as every eligible
 * temporary; a value loses candidacy when a step needs it plain, or when a
 * step needs it in the layout of another of its values that lost it. That
 * runs to a fixed point: only removals, so it ends. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "compile/program.h"

/* f32, or bf16 (autocast's convolution operands: oneDNN's bf16 kernels
   take the same channel blocks) */
static int is_4d_float(const lz_value *v)
{
    return (v->dtype == LZ_F32 || v->dtype == LZ_BF16) && v->ndim == 4;
}

/* v's block under b: b, or its channels when b is channels-last */
static int64_t block_of(const lz_value *v, int b)
{
    return b == LZ_BLOCK_CHANNELS_LAST ? v->shape[1] : b;
}

/* Whether v's channels fill whole blocks (and fit lz_value.block) */
static int fills_blocks(const lz_value *v, int b)
{
    const int64_t vb = block_of(v, b);
    return vb > 0 && vb <= UINT16_MAX && v->shape[1] % vb == 0;
}

/* Same bytes in both layouts: one pixel a channel (a global pool's output). */
static int neutral(const lz_value *v, int b)
{
    return is_4d_float(v) && v->shape[2] * v->shape[3] == 1 && fills_blocks(v, b);
}

static int eligible(const lz_value *v, int b)
{
    return v->kind == LZ_VALUE_TEMP && is_4d_float(v) && fills_blocks(v, b) &&
           v->shape[2] * v->shape[3] > 1;
}

/* The values of instruction s and how its kernel takes each: its inputs, its
   output, and a fused instruction's other stored results (taken as its output). */
static int step_values(const lz_instr *s, const uint8_t *how, int *v, uint8_t *h)
{
    int n = 0;
    for (int k = 0; k < s->n_in; k++) { v[n] = s->in[k]; h[n++] = how[k]; }
    v[n] = s->out;
    h[n++] = how[s->n_in];
    for (int e = 0; s->fused && e < s->fused->n_extra; e++) {
        v[n] = s->fused->extra[e];
        h[n++] = how[s->n_in];
    }
    return n;
}

/* One pass over the instructions; whether any value lost candidacy. v and h
   hold an instruction's values (step_values). */
static int drop_candidates(const lz_program *p, uint8_t *const *how, char *cand, int b, int *v,
                           uint8_t *h)
{
    int changed = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const int n = step_values(&p->instrs[i], how[i], v, h);
        int group_ok = 1;
        for (int k = 0; k < n; k++) {
            if (h[k] == LZ_TAKES_PLAIN && cand[v[k]]) {
                cand[v[k]] = 0;
                changed = 1;
            }
            if (h[k] == LZ_TAKES_STEP_LAYOUT && !cand[v[k]] && !neutral(&p->values[v[k]], b))
                group_ok = 0;
        }
        for (int k = 0; k < n && !group_ok; k++)
            if (h[k] == LZ_TAKES_STEP_LAYOUT && cand[v[k]]) {
                cand[v[k]] = 0;
                changed = 1;
            }
    }
    return changed;
}

void lz_plan_layouts(lz_program *p, const lz_backend *be)
{
    if (!lz_blocked_layouts_enabled() || !be->layout_block || !be->operand_layouts) return;
    const int b = be->layout_block(p);
    if ((b <= 0 && b != LZ_BLOCK_CHANNELS_LAST) || p->n_values == 0) return;
    int most = 1;   /* values of the instruction with the most */
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        const int n = s->n_in + 1 + (s->fused ? s->fused->n_extra : 0);
        if (n > most) most = n;
    }
    char *cand = calloc((size_t)p->n_values, 1);
    uint8_t **how = calloc((size_t)(p->n_instrs ? p->n_instrs : 1), sizeof *how);
    int *vals = malloc(sizeof *vals * (size_t)most);   /* one instruction's values, and how */
    uint8_t *hows = malloc((size_t)most);
    int ok = cand && how && vals && hows;
    for (int v = 0; ok && v < p->n_values; v++) cand[v] = (char)eligible(&p->values[v], b);
    for (int v = 0; ok && v < p->n_values; v++)   /* a view reads its source plain */
        if (p->values[v].kind == LZ_VALUE_VIEW) cand[p->values[v].view_of] = 0;
    for (int i = 0; ok && i < p->n_instrs; i++) {
        how[i] = malloc((size_t)p->instrs[i].n_in + 1);
        ok = how[i] != NULL;
        if (ok) be->operand_layouts(p, &p->instrs[i], b, how[i]);
    }
    if (ok) {
        /* a fused instruction's unstored results are in no memory: not blocked */
        char *seen = calloc((size_t)p->n_values, 1);
        ok = seen != NULL;
        for (int i = 0; ok && i < p->n_instrs; i++) {
            const int n = step_values(&p->instrs[i], how[i], vals, hows);
            for (int k = 0; k < n; k++) seen[vals[k]] = 1;
        }
        for (int k = 0; ok && k < p->n_values; k++) cand[k] &= seen[k];
        free(seen);
    }
    if (ok)
        while (drop_candidates(p, how, cand, b, vals, hows)) {}
    for (int v = 0; ok && v < p->n_values; v++)
        p->values[v].block = cand[v] ? (uint16_t)block_of(&p->values[v], b) : 0;
    for (int i = 0; how && i < p->n_instrs; i++) free(how[i]);
    free(how);
    free(cand);
    free(vals);
    free(hows);
}
