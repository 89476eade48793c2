/* A replay: the capture's input slots bound to this call's buffers, every
 * node and handle it hands out made first, then one execution enqueued and
 * the state pointed at its new values. No IR, no hash. */
#include "engine/capture_internal.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "engine/autocast.h"
#include "engine/step.h"
#include "runtime/executor.h"

static lz_tensor *grad_of(const trace *tr, int leaf) { return tr->leaves[leaf].t->grad; }

/* The tensor state i lives in now (NULL: a gradient a replay makes). */
static lz_tensor *state_tensor(const trace *tr, const state *st, lz_tensor *const *in)
{
    switch (st->kind) {
    case ST_TENSOR: return st->t;
    case ST_INPUT: return in[st->index];
    case ST_GRAD: return grad_of(tr, st->index);
    default: return NULL;
    }
}

/* The tensor a binding reads through (NULL: an input or a constant). */
static lz_tensor *bound_tensor(const trace *tr, const binding *b)
{
    return b->kind == SRC_TENSOR ? b->t : b->kind == SRC_GRAD ? grad_of(tr, b->index) : NULL;
}

/* Inputs, slots and the sources of returned handles (RET_WRAP) must be
   data; anything the caller left pending is synced first (one extra graph,
   only when it happens). */
static int sync_pending_bindings(const lz_fn *f, const trace *tr, lz_tensor *const *in)
{
    int n = 0, cap = f->n_in + tr->n_slots + tr->n_returned;
    lz_tensor **ts = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < f->n_in; k++)
            if (!in[k]->node->buf) { if (pass) ts[n] = in[k]; n++; }
        for (int i = 0; i < tr->n_slots; i++) {
            lz_tensor *t = bound_tensor(tr, &tr->slots[i]);
            if (t && !t->node->buf) { if (pass) ts[n] = t; n++; }
        }
        for (int j = 0; j < tr->n_returned; j++) {
            lz_tensor *t = tr->returned[j].kind == RET_WRAP ? bound_tensor(tr, &tr->returned[j].wrap) : NULL;
            if (t && !t->node->buf) { if (pass) ts[n] = t; n++; }
        }
        if (!pass) {
            if (!n) return 0;
            ts = lz_host_malloc(sizeof *ts * (size_t)(cap + 1));
            if (!ts) return lz_errorf_int("lz_call: out of memory syncing %d pending inputs", n);
            n = 0;
        }
    }
    int rc = lz_sync_tensors(ts, n, 0);
    free(ts);
    return rc;
}

/* The buffer of state i if this replay may write its new value there: the
   executable does not read the old value (a gradient remade every step),
   or reads it only before it writes the new one (a parameter or a
   momentum buffer: donated), and nothing else can read it after (no other
   node or tensor holds it; executions in flight run first:
   lz_executor_overwritable). Reusing it keeps a replay from holding the
   state's old and new values at once, and skips an allocation. */
static lz_buffer *reusable_state_buffer(const lz_fn *f, const trace *tr, lz_tensor *const *in, const state *st)
{
    if (st->kind != ST_TENSOR && st->kind != ST_GRAD) return NULL;
    lz_tensor *t = state_tensor(tr, st, in);
    if (!t) return NULL;
    int o = st->slot;
    const lz_node *n = t->node;
    if (o < 0 || (st->read && !st->donates) || n->refs != 1 || !n->buf ||
        !lz_executor_overwritable(n->buf, tr->outputs[o].nbytes))
        return NULL;
    for (int k = 0; k < f->n_in; k++)
        if (in[k]->node->buf == n->buf) return NULL;
    return n->buf;
}

static lz_node *output_node(const trace *tr, lz_buffer *buf, int o)
{
    const out_desc *d = &tr->outputs[o];
    return lz_node_new_data(buf, (lz_dtype)d->dtype, d->ndim, d->shape);
}

/* A new handle on the buffer a returned tensor's binding reads now, shaped
   as the tensor was when traced. */
static lz_tensor *wrap_binding(const trace *tr, const ret *r, lz_tensor *const *in)
{
    const binding *b = &r->wrap;
    const lz_tensor *like = b->kind == SRC_INPUT ? in[b->index] : b->kind == SRC_TENSOR ? b->t
                          : b->kind == SRC_GRAD ? grad_of(tr, b->index) : NULL;
    lz_buffer *buf = like ? like->node->buf : b->buf;
    return lz_tensor_wrap(lz_node_new_data(buf, (lz_dtype)r->desc.dtype, r->desc.ndim, r->desc.shape));
}

/* Drops what a failed replay made before enqueuing anything. */
static void drop_made(trace *tr, const lz_fn *f, lz_tensor **out, int n_state)
{
    for (int j = 0; j < f->n_out; j++) {
        lz_free(out[j]);   /* only new handles are set this early */
        out[j] = NULL;
    }
    for (int i = 0; i < n_state; i++) {
        if (tr->new_node[i]) lz_node_unref(tr->new_node[i]);
        lz_free(tr->new_grad[i]);
    }
}

/* Every node and handle this replay hands out, made before anything is
   enqueued so that a failure leaves the state untouched: the returned
   tensors, the output buffers (a state's own where it may be written
   over), and the state's new nodes. 0, or -1 with *made_state the states
   whose new node or gradient was made (drop_made). */
static int make_outputs(const lz_fn *f, const trace *tr, lz_tensor *const *in, lz_tensor **out,
                        int *made_state)
{
    /* locals: the stores below could alias tr's fields */
    lz_buffer **outb = tr->outb;
    char *reuse = tr->reuse;
    const state *states = tr->state;
    const ret *returned = tr->returned;
    lz_node **new_node = tr->new_node;
    lz_tensor **new_grad = tr->new_grad;
    const int n_state = tr->n_state, n_outputs = tr->n_outputs, n_out = f->n_out;
    int rc = 0, made = 0;
    /* A returned tensor the step did not compute holds the value its source
       had when the call began, as in a direct call: made first, it also
       keeps that buffer from being written over. */
    for (int j = 0; j < n_out; j++) {
        out[j] = NULL;
        if (rc == 0 && returned[j].kind == RET_WRAP && !(out[j] = wrap_binding(tr, &returned[j], in))) rc = -1;
        /* an lz_retain handle the step made is the caller's, in no scope */
        if (out[j] && returned[j].retain) lz_scope_forget(out[j]);
    }
    memset(reuse, 0, (size_t)n_outputs);
    for (int o = 0; o < n_outputs; o++) outb[o] = NULL;
    for (int i = 0; i < n_state && rc == 0; i++) {
        lz_buffer *b = reusable_state_buffer(f, tr, in, &states[i]);
        int o = states[i].slot;
        if (b && !outb[o]) { outb[o] = b; reuse[o] = 1; }
    }
    /* reused buffers are changed only once nothing can fail */
    for (int o = 0; o < n_outputs && rc == 0; o++) {
        if (reuse[o]) continue;
        outb[o] = lz_buffer_placeholder(tr->outputs[o].nbytes);
        if (!outb[o]) rc = -1;
    }
    for (; made < n_state && rc == 0; made++) {
        const state *st = &states[made];
        lz_node *n = NULL;
        lz_tensor *g = NULL;
        if (st->kind != ST_NONE && st->slot >= 0) {
            n = output_node(tr, outb[st->slot], st->slot);
            if (!n) rc = -1;
            else if (st->kind == ST_GRAD && !grad_of(tr, st->index)) {
                /* the leaf had no gradient: backward makes a new one */
                g = lz_tensor_wrap(n);   /* frees the node if it fails */
                n = NULL;
                if (!g) rc = -1;
                else lz_scope_forget(g);
            }
        }
        new_node[made] = n;
        new_grad[made] = g;
        if (rc) break;
    }
    *made_state = made;
    for (int j = 0; j < n_out && rc == 0; j++) {
        const ret *r = &returned[j];
        if (r->kind == RET_NEW) {
            if (!(out[j] = lz_tensor_wrap(output_node(tr, outb[r->index], r->index)))) rc = -1;
            else if (r->retain) lz_scope_forget(out[j]);   /* as the lz_retain handle the step made */
            if (rc == 0 && r->had_record) lz_ag_mark_replayed(out[j]);
        }
        /* an lz_retain handle follows its tensor to the new value */
        else if (r->retain && (r->kind == RET_SAME_INPUT || r->kind == RET_SAME_TENSOR) &&
                 !(out[j] = lz_retain(r->kind == RET_SAME_INPUT ? in[r->index] : r->t)))
            rc = -1;
    }
    return rc;
}

/* Enqueues the execution, then points the state at its new values and
   hands out the returned tensors. Nothing here can fail. */
static void commit(const lz_fn *f, const trace *tr, lz_tensor *const *in, lz_tensor **out)
{
    lz_buffer **outb = tr->outb;
    const char *reuse = tr->reuse;
    const state *states = tr->state;
    const ret *returned = tr->returned;
    lz_node *const *new_node = tr->new_node;
    lz_tensor *const *new_grad = tr->new_grad;
    const int n_state = tr->n_state, n_outputs = tr->n_outputs, n_out = f->n_out;
    for (int o = 0; o < n_outputs; o++)
        if (reuse[o]) {
            lz_buffer_ref(outb[o]);
            lz_buffer_refill(outb[o]);
            lz_counters.in_place_writes++;
        }
    lz_executor_enqueue(tr->exe, tr->inb, outb, tr->keep);
    lz_counters.executions++;
    lz_counters.flops += tr->exe->prog.flops;
    lz_counters.kernels += tr->exe->prog.n_instrs;
    lz_counters.capture_replays++;
    /* new values of the state, then the returned tensors (a returned
       state tensor is returned at its new value, as when traced) */
    for (int i = 0; i < n_state; i++) {
        if (new_grad[i]) tr->leaves[states[i].index].t->grad = new_grad[i];
        else if (new_node[i]) lz_tensor_set_node(state_tensor(tr, &states[i], in), new_node[i]);
    }
    /* copies the replay wrote from the parameters' values it wrote */
    for (int i = 0; i < n_state; i++)
        if (states[i].copy_current) lz_autocast_copy_rebase(states[i].t);
    for (int j = 0; j < n_out; j++) {
        const ret *r = &returned[j];
        if (r->retain) { /* made above */ }
        else if (r->kind == RET_SAME_INPUT) out[j] = in[r->index];
        else if (r->kind == RET_SAME_TENSOR) out[j] = r->t;
        if (r->keep) lz_keep(out[j]);
    }
}

/* A call replayed from tr's capture: 0, or -1 with the error set and the
   state untouched. */
int lz_capture_replay(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out)
{
    if (sync_pending_bindings(f, tr, in)) return -1;
    /* locals: the stores below could alias tr's fields */
    lz_buffer **inb = tr->inb, **outb = tr->outb;
    const char *reuse = tr->reuse;
    const int n_outputs = tr->n_outputs;
    for (int i = 0; i < tr->n_slots; i++) {
        const binding *b = &tr->slots[i];
        inb[i] = b->kind == SRC_INPUT ? in[b->index]->node->buf
               : b->kind == SRC_TENSOR ? b->t->node->buf
               : b->kind == SRC_GRAD ? grad_of(tr, b->index)->node->buf : b->buf;
    }
    int made_state = 0;
    int rc = make_outputs(f, tr, in, out, &made_state);
    if (rc != 0) drop_made(tr, f, out, made_state);
    else commit(f, tr, in, out);
    for (int o = 0; o < n_outputs; o++)
        if (outb[o] && (rc == 0 || !reuse[o])) lz_buffer_unref(outb[o]);
    if (rc != 0) {
        /* nothing enqueued: the state was not touched and keeps its values */
        lz_executor_note_error(lz_last_error());
    }
    return rc;
}
