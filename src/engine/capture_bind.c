/* Binding a capture: where each input slot of its executable reads from
 * on a replay, where each new value of state goes, what each returned
 * tensor is, and the tensors the guard checks; and letting go of them. */
#include "engine/capture_internal.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"
#include "engine/autocast.h"

/* A reference held by a capture: not the program's. */
static void hold(lz_tensor *t)
{
    lz_tensor_ref(t);
    t->capture_refs++;
}

static void release(lz_tensor *t)
{
    if (!t) return;
    t->capture_refs--;
    lz_tensor_unref(t);
}

static void release_binding(binding *b)
{
    if (b->t) release(b->t);
    if (b->buf) lz_buffer_unref(b->buf);
    b->t = NULL;
    b->buf = NULL;
}

void lz_capture_clear_leaves(trace *tr)
{
    for (int i = 0; i < tr->n_leaves; i++) release(tr->leaves[i].t);
    free(tr->leaves);
    tr->leaves = NULL;
    tr->n_leaves = 0;
}

/* Drops what a capture holds, keeping the key. */
void lz_capture_clear(trace *tr)
{
    for (int i = 0; i < tr->n_slots; i++) release_binding(&tr->slots[i]);
    for (int i = 0; i < tr->n_state; i++) release(tr->state[i].t);
    for (int j = 0; tr->returned && j < tr->n_returned; j++) {
        release_binding(&tr->returned[j].wrap);
        release(tr->returned[j].t);
    }
    free(tr->returned);
    tr->returned = NULL;
    free(tr->slots); free(tr->outputs); free(tr->state); free(tr->keep);
    for (int i = 0; i < tr->n_alias; i++) { release(tr->aliases[i].a); release(tr->aliases[i].b); }
    free(tr->aliases);
    free(tr->live_check);
    free(tr->inb); free(tr->outb); free(tr->reuse); free(tr->new_node); free(tr->new_grad);
    tr->inb = tr->outb = NULL; tr->reuse = NULL; tr->new_node = NULL; tr->new_grad = NULL;
    tr->live_check = NULL;
    tr->n_live_check = 0;
    tr->slots = NULL; tr->outputs = NULL; tr->state = NULL; tr->keep = NULL; tr->aliases = NULL;
    tr->n_slots = tr->n_outputs = tr->n_state = tr->n_alias = 0;
    tr->captured = 0;
}

/* The key's leaves: every tensor alive at the start whose gradient the
   trace read, replaced or updated (grad_read: buffers the graph reads). */
int lz_capture_record_leaves(trace *tr, const snapshot *s, lz_buffer *const *grad_read, int n_read)
{
    lz_capture_clear_leaves(tr);
    int n = 0;
    leaf_key *lk = lz_host_malloc(sizeof *lk * (size_t)(s->n + 1));
    if (!lk) return lz_errorf_int("lz_call: out of memory keying a trace by the gradients it reads");
    for (int i = 0; i < s->n; i++) {
        lz_tensor *t = s->t[i], *g0 = s->grad[i];
        int used = t->grad != g0 || (t->grad && !t->grad->node->buf);
        for (int r = 0; r < n_read && !used && s->gbuf[i]; r++) used = grad_read[r] == s->gbuf[i];
        if (!used) continue;
        hold(t);
        lk[n++] = (leaf_key){t, g0 != NULL};
    }
    tr->leaves = lk;
    tr->n_leaves = n;
    return 0;
}

static int output_slot(const lz_graph *g, const lz_node *n)
{
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] == n) return o;
    return -1;
}

static int leaf_index(trace *tr, lz_tensor *t)
{
    for (int i = 0; i < tr->n_leaves; i++)
        if (tr->leaves[i].t == t) return i;
    return -1;
}

/* Where a data leaf's buffer comes from on a replay. Sets *freed_state to
   the tensor when the buffer is that of a tensor the program held at the
   start and the function let go of (state kept by replacing a handle). */
static binding bind_leaf(trace *tr, const lz_fn *f, lz_tensor *const *in, const snapshot *s,
                         lz_tensor *prefer, lz_buffer *buf, lz_tensor **freed_state)
{
    (void)in;
    for (int k = 0; k < f->n_in; k++)
        if (s->inbuf[k] == buf) return (binding){.kind = SRC_INPUT, .index = k};
    /* a leaf's gradient is re-read through the leaf on every call */
    for (int i = 0; i < s->n; i++)
        if (s->gbuf[i] == buf) {
            int l = leaf_index(tr, s->t[i]);
            if (l >= 0) return (binding){.kind = SRC_GRAD, .index = l};
        }
    lz_tensor *alive = NULL, *dead = NULL;
    for (int i = 0; i < s->n; i++) {
        if (s->buf[i] != buf) continue;
        if (!lz_tensor_held(s->t[i], 1)) {
            if (s->alive[i] && s->t[i]->node->buf == NULL) dead = s->t[i];
            else if (s->alive[i] && !dead) dead = s->t[i];
            continue;
        }
        if (!alive || s->t[i] == prefer || (s->t[i]->node->buf == NULL && alive != prefer)) alive = s->t[i];
    }
    if (alive) {
        hold(alive);
        return (binding){.kind = SRC_TENSOR, .t = alive};
    }
    if (dead && freed_state) *freed_state = dead;
    /* made in the function and kept alive after it: state it made */
    int n_notes;
    const lz_capture_note *notes = lz_capture_notes(&n_notes);
    for (int i = 0; i < n_notes; i++)
        if (notes[i].buf == buf && notes[i].t->node->buf == buf && lz_tensor_held(notes[i].t, 1)) {
            hold(notes[i].t);
            return (binding){.kind = SRC_TENSOR, .t = notes[i].t};
        }
    lz_buffer_ref(buf);
    return (binding){.kind = SRC_CONST, .buf = buf};
}

static int state_reads_slot(const trace *tr, const state *st, int k)
{
    const binding *b = &tr->slots[k];
    switch (st->kind) {
    case ST_TENSOR: return b->kind == SRC_TENSOR && b->t == st->t;
    case ST_INPUT: return b->kind == SRC_INPUT && b->index == tr->alias[st->index];
    case ST_GRAD: return b->kind == SRC_GRAD && b->index == st->index;
    default: return 0;
    }
}

/* Pairs of tensors on one buffer when traced, beside the one bound: a
   replay is right only while they still share it. */
static int record_aliases(trace *tr, const snapshot *s, lz_tensor *const *in, int n_in)
{
    int n = 0, cap = 0;
    alias_check *a = NULL;
    /* the slots, then the sources of returned handles */
    for (int k = 0; k < tr->n_slots + tr->n_returned; k++) {
        const ret *r = k < tr->n_slots ? NULL : &tr->returned[k - tr->n_slots];
        if (r && r->kind != RET_WRAP) continue;
        const binding *b = r ? &r->wrap : &tr->slots[k];
        if (b->kind != SRC_INPUT && b->kind != SRC_TENSOR) continue;
        int si = b->kind == SRC_TENSOR ? lz_capture_snapshot_index(s, b->t) : -1;
        lz_buffer *buf = b->kind == SRC_INPUT ? s->inbuf[b->index] : si >= 0 ? s->buf[si] : b->t->node->buf;
        for (int i = 0; i < s->n; i++) {
            lz_tensor *t = s->t[i];
            if (s->buf[i] != buf || t == b->t || !lz_tensor_held(t, 1)) continue;
            int is_input = 0;
            for (int j = 0; j < n_in; j++) is_input |= lz_tensor_of(in[j]) == t;
            if (is_input) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4;
                alias_check *na = lz_host_realloc(a, sizeof *a * (size_t)cap);
                if (!na) {
                    /* what is held so far is the capture's to release */
                    tr->aliases = a;
                    tr->n_alias = n;
                    return lz_errorf_int("lz_call: out of memory recording the aliases a replay checks");
                }
                a = na;
            }
            a[n].input = b->kind == SRC_INPUT ? b->index : -1;
            a[n].a = b->kind == SRC_TENSOR ? b->t : NULL;
            a[n].b = t;
            if (a[n].a) hold(a[n].a);
            hold(t);
            n++;
        }
    }
    tr->aliases = a;
    tr->n_alias = n;
    return 0;
}

static int add_check(lz_tensor **list, int n, lz_tensor *t)
{
    for (int i = 0; i < n; i++)
        if (list[i] == t) return n;
    list[n] = t;
    return n + 1;
}

/* The tensors lz_capture_guard_holds checks are alive, each once (a
   parameter is both read and updated), into tr->live_check (room for all). */
static void collect_live_checks(trace *tr)
{
    lz_tensor **list = tr->live_check;
    int n = 0;
    for (int i = 0; i < tr->n_slots; i++)
        if (tr->slots[i].kind == SRC_TENSOR) n = add_check(list, n, tr->slots[i].t);
    for (int i = 0; i < tr->n_state; i++)
        if (tr->state[i].kind == ST_TENSOR) n = add_check(list, n, tr->state[i].t);
    for (int i = 0; i < tr->n_leaves; i++) n = add_check(list, n, tr->leaves[i].t);
    for (int j = 0; j < tr->n_returned; j++)
        if (tr->returned[j].kind == RET_SAME_TENSOR) n = add_check(list, n, tr->returned[j].t);
    tr->n_live_check = n;
}

/* The capture's tables and a replay's scratch, all or none (tr has none:
   lz_capture_clear). */
static int alloc_capture(trace *tr, const lz_graph *g, int n_returned, int n_live)
{
    size_t ni = (size_t)g->n_inputs + 1, no = (size_t)g->n_outputs + 1, ns = (size_t)n_live + 1;
    binding *slots = lz_host_calloc(ni, sizeof *slots);
    out_desc *outputs = lz_host_calloc(no, sizeof *outputs);
    ret *returned = lz_host_calloc((size_t)n_returned + 1, sizeof *returned);
    state *st = lz_host_calloc(ns, sizeof *st);
    int *keep = lz_host_malloc(sizeof *keep * no);
    lz_tensor **live_check = lz_host_malloc(sizeof *live_check *
                                            (ni + ns + (size_t)tr->n_leaves + (size_t)n_returned));
    lz_buffer **inb = lz_host_malloc(sizeof *inb * ni), **outb = lz_host_malloc(sizeof *outb * no);
    char *reuse = lz_host_malloc(no);
    lz_node **new_node = lz_host_malloc(sizeof *new_node * ns);
    lz_tensor **new_grad = lz_host_malloc(sizeof *new_grad * ns);
    if (!slots || !outputs || !returned || !st || !keep || !live_check || !inb || !outb || !reuse ||
        !new_node || !new_grad) {
        free(slots); free(outputs); free(returned); free(st); free(keep); free(live_check);
        free(inb); free(outb); free(reuse); free(new_node); free(new_grad);
        return lz_errorf_int("lz_call: out of memory binding a capture of %d inputs, %d outputs",
                             g->n_inputs, g->n_outputs);
    }
    tr->n_slots = g->n_inputs;
    tr->slots = slots;
    tr->n_outputs = g->n_outputs;
    tr->outputs = outputs;
    tr->n_returned = n_returned;
    tr->returned = returned;
    tr->n_state = 0;
    tr->state = st;
    tr->keep = keep;
    tr->live_check = live_check;
    tr->inb = inb;
    tr->outb = outb;
    tr->reuse = reuse;
    tr->new_node = new_node;
    tr->new_grad = new_grad;
    return 0;
}

/* The key's leaves (lz_capture_record_leaves), given the buffers g reads. */
static int key_leaves(trace *tr, const lz_graph *g, const snapshot *s)
{
    lz_buffer **bufs = lz_host_malloc(sizeof *bufs * (size_t)(g->n_inputs + 1));
    if (!bufs) return lz_errorf_int("lz_call: out of memory binding a capture of %d inputs", g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) bufs[i] = g->inputs[i]->buf;
    int rc = lz_capture_record_leaves(tr, s, bufs, g->n_inputs);
    free(bufs);
    if (rc) return -1;
    tr->leaf_epoch = lz_requires_grad_changes();
    return 0;
}

/* The capture's tables, and where each input slot of g reads from (*freed
   as bind_leaf sets it). */
static int bind_slots(const lz_fn *f, trace *tr, const lz_graph *g, lz_tensor *const *in, const snapshot *s,
                      int n_live, lz_tensor **freed)
{
    /* a slot read by a tensor the function updated binds to that tensor
       (its state), found through the cut's slot of each buffer */
    lz_tensor **prefer = lz_host_calloc((size_t)g->n_inputs + 1, sizeof *prefer);
    if (!prefer) return lz_errorf_int("lz_call: out of memory binding a capture of %d inputs", g->n_inputs);
    if (alloc_capture(tr, g, f->n_out, n_live)) {
        free(prefer);
        return -1;
    }
    for (int i = 0; i < s->n; i++) {
        lz_buffer *b = s->buf[i];
        if (s->t[i]->in_live && b && b->cut_slot >= 0 && b->cut_slot < g->n_inputs &&
            g->inputs[b->cut_slot]->buf == b && !prefer[b->cut_slot])
            prefer[b->cut_slot] = s->t[i];
    }
    for (int i = 0; i < g->n_inputs; i++)
        tr->slots[i] = bind_leaf(tr, f, in, s, prefer[i], g->inputs[i]->buf, freed);
    free(prefer);
    return 0;
}

static void describe_outputs(trace *tr, const lz_graph *g)
{
    for (int o = 0; o < g->n_outputs; o++) {
        const lz_node *n = g->outputs[o];
        out_desc *d = &tr->outputs[o];
        d->dtype = n->dtype;
        d->ndim = n->ndim;
        memcpy(d->shape, n->shape, sizeof d->shape);
        d->nbytes = (size_t)lz_node_numel(n) * lz_dtype_size((lz_dtype)n->dtype);
        tr->keep[o] = -1;
    }
}

/* What each tensor the function returned is on a replay: a value of the
   graph, an input or a tensor it was given, or a handle on a buffer. */
static void bind_returned(const lz_fn *f, trace *tr, const lz_graph *g, lz_tensor *const *in, lz_tensor **out,
                          const char *kept, const snapshot *s)
{
    for (int j = 0; j < f->n_out; j++) {
        /* an lz_retain handle the step made on a tensor alive before it: a
           replay returns a new handle on that tensor, live, as the step does */
        lz_tensor *t = lz_tensor_of(out[j]);
        ret *r = &tr->returned[j];
        r->keep = kept ? kept[j] : 0;
        if (t->capture_epoch == s->epoch) {
            int k = -1;
            for (int q = 0; q < f->n_in && k < 0; q++)
                if (lz_tensor_of(in[q]) == t) k = q;
            r->retain = out[j] != t;
            r->kind = k >= 0 ? RET_SAME_INPUT : RET_SAME_TENSOR;
            r->index = k;
            if (k < 0) { r->t = t; hold(t); }
        } else if (!t->node->buf) {
            *r = (ret){.kind = RET_NEW, .index = output_slot(g, t->node), .keep = r->keep,
                       .retain = out[j] != t, .had_record = t->ag && t->ag->state == LZ_AG_LIVE};
        } else {
            r->retain = out[j] != t;
            r->kind = RET_WRAP;
            r->wrap = bind_leaf(tr, f, in, s, NULL, t->node->buf, NULL);
            r->desc = (out_desc){.dtype = t->node->dtype, .ndim = t->node->ndim};
            memcpy(r->desc.shape, t->node->shape, sizeof r->desc.shape);
        }
    }
}

/* Where the new value of each tensor the trace left pending (live) goes on
   a replay, and whether it may be written over the old one. */
static void bind_state(const lz_fn *f, trace *tr, const lz_graph *g, const lz_executable *exe,
                       lz_tensor *const *in, const snapshot *s, lz_tensor **live, int n_live)
{
    tr->n_state = 0;
    for (int i = 0; i < n_live; i++) {
        lz_tensor *t = live[i];
        state *st = &tr->state[tr->n_state++];
        st->slot = output_slot(g, t->node);
        int k = -1, l = -1;
        for (int q = 0; q < f->n_in && k < 0; q++)
            if (lz_tensor_of(in[q]) == t) k = q;
        for (int q = 0; q < tr->n_leaves && l < 0 && k < 0; q++)
            if (tr->leaves[q].t->grad == t) l = q;
        if (!lz_tensor_held(t, t->capture_epoch == s->epoch)) st->kind = ST_NONE;   /* nobody can read it */
        else if (k >= 0) { st->kind = ST_INPUT; st->index = k; }
        else if (l >= 0) { st->kind = ST_GRAD; st->index = l; }
        else { st->kind = ST_TENSOR; st->t = t; hold(t); }
        st->copy_current = st->kind == ST_TENSOR && t->bf16_copy && !lz_autocast_copy_stale(t);
        /* a failed replay leaves the state at the value it read */
        for (int q = 0; q < tr->n_slots; q++)
            if (state_reads_slot(tr, st, q)) {
                st->read = 1;
                if (st->slot >= 0) tr->keep[st->slot] = q;
            }
    }
    for (int i = 0; i < tr->n_state && exe; i++) {
        state *st = &tr->state[i];
        st->donates = st->slot >= 0 && tr->keep[st->slot] >= 0 &&
                      lz_program_may_overwrite(&exe->prog, st->slot, tr->keep[st->slot]);
    }
}

/* Binds everything a replay of g needs. 0; 1 when the function frees a
   tensor alive across calls after reading it (it cannot be replayed: the
   caller falls back to tracing every call); -1 on out of memory (what is
   bound so far is the capture's: lz_capture_clear releases it). */
int lz_capture_bind(lz_fn *f, trace *tr, const lz_graph *g, lz_executable *exe, lz_tensor *const *in,
                    lz_tensor **out, const char *kept, const snapshot *s, lz_tensor **live, int n_live,
                    lz_tensor **freed)
{
    if (key_leaves(tr, g, s) || bind_slots(f, tr, g, in, s, n_live, freed)) return -1;
    if (*freed) return 1;
    describe_outputs(tr, g);
    bind_returned(f, tr, g, in, out, kept, s);
    bind_state(f, tr, g, exe, in, s, live, n_live);
    if (record_aliases(tr, s, in, f->n_in)) return -1;
    collect_live_checks(tr);
    return 0;
}
