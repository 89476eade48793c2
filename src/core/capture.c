/* Capture and replay: trace a step function once, keep its executable,
 * replay it with new inputs.
 *
 * A trace runs the function on the real inputs and cuts one graph whose
 * inputs are every data leaf it reached and whose outputs are the returned
 * tensors plus every tensor left pending (parameters, gradients, optimizer
 * state updated in place). Each input slot is bound to where its buffer
 * came from: an explicit input, a tensor alive across calls (state, a
 * learning-rate scalar), or a constant buffer. A replay only binds buffers,
 * enqueues the pinned executable and points the state tensors at the new
 * buffers (donation: no copy). It records no IR and computes no hash.
 *
 * A trace that created state (a leaf's first gradient, lazily made
 * optimizer buffers) is not steady: it runs as a warm-up and the next call
 * traces again. A trace that reads a value on the host is a graph break:
 * the function is then traced on every call. */
#include "core/capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/fault.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/metrics.h"
#include "core/step.h"
#include "core/tensor.h"
#include "core/thread.h"
#include "runtime/executor.h"

enum { SRC_INPUT, SRC_TENSOR, SRC_CONST };

typedef struct binding {
    int kind;
    int index;               /* SRC_INPUT: explicit input; outputs: graph output slot */
    lz_tensor *t;            /* SRC_TENSOR (owned reference) */
    lz_buffer *buf;          /* SRC_CONST (owned reference) */
} binding;

typedef struct out_desc {
    uint8_t dtype, ndim;
    int64_t shape[LZ_MAX_DIMS];
    size_t nbytes;
} out_desc;

typedef struct trace {
    /* guard: the explicit inputs' dtypes and shapes */
    uint8_t *dtype, *ndim;
    int64_t (*shape)[LZ_MAX_DIMS];
    int warmed_up, captured;
    lz_executable *exe;      /* pinned */
    int n_slots;
    binding *slots;          /* per input slot of exe */
    int n_outputs;
    out_desc *outputs;       /* per output slot of exe */
    binding *returned;       /* per returned tensor: SRC_INPUT / SRC_CONST, or
                                kind -1 with index = output slot */
    int n_state;
    lz_tensor **state;       /* owned; updated in place on replay */
    int *state_slot;
    lz_tensor **grad_of;     /* per state tensor: the leaf whose grad it is (owned), or NULL */
    int *keep;               /* per output slot: the input slot of the state value it
                                replaces, or -1 (lz_executor_enqueue) */
    char *bound;             /* per state tensor: bound to an input slot (read by exe) */
    char *donates;           /* per bound state tensor: its new value may be written
                                over its old one (lz_program_may_overwrite) */
    struct trace *next;
} trace;

struct lz_fn {
    lz_step_fn fn;
    void *ctx;
    int n_in, n_out;
    trace *traces;
    int fallback;            /* a graph break was seen: trace every call */
};

static lz_fn *tracing;
static const char *break_reason;

int lz_capture_tracing(void) { return tracing != NULL; }

void lz_capture_note_break(const char *reason)
{
    if (tracing && !break_reason) break_reason = reason;
}

lz_fn *lz_capture(lz_step_fn fn, void *ctx, int n_in, int n_out)
{
    if (!fn) return lz_errorf("lz_capture: step function is NULL");
    if (n_in < 0 || n_out < 0) return lz_errorf("lz_capture: negative input or output count (%d, %d)", n_in, n_out);
    lz_fn *f = calloc(1, sizeof *f);
    if (!f) return lz_errorf("lz_capture: out of memory");
    f->fn = fn;
    f->ctx = ctx;
    f->n_in = n_in;
    f->n_out = n_out;
    return f;
}

static int guard_matches(const lz_fn *f, const trace *tr, lz_tensor *const *in)
{
    for (int k = 0; k < f->n_in; k++) {
        const lz_node *n = in[k]->node;
        if (n->dtype != tr->dtype[k] || n->ndim != tr->ndim[k] ||
            memcmp(n->shape, tr->shape[k], sizeof(int64_t) * n->ndim))
            return 0;
    }
    return 1;
}

static trace *new_trace(lz_fn *f, lz_tensor *const *in)
{
    trace *tr = lz_host_calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->dtype = lz_host_malloc((size_t)f->n_in + 1);
    tr->ndim = lz_host_malloc((size_t)f->n_in + 1);
    tr->shape = lz_host_malloc(sizeof *tr->shape * (size_t)(f->n_in + 1));
    if (!tr->dtype || !tr->ndim || !tr->shape) {
        free(tr->dtype); free(tr->ndim); free(tr->shape); free(tr);
        return NULL;
    }
    for (int k = 0; k < f->n_in; k++) {
        tr->dtype[k] = in[k]->node->dtype;
        tr->ndim[k] = in[k]->node->ndim;
        memcpy(tr->shape[k], in[k]->node->shape, sizeof tr->shape[k]);
    }
    tr->next = f->traces;
    f->traces = tr;
    return tr;
}

static void release_binding(binding *b)
{
    if (b->t) lz_tensor_unref(b->t);
    if (b->buf) lz_buffer_unref(b->buf);
    b->t = NULL;
    b->buf = NULL;
}

/* Drops what a capture holds, keeping the guard. */
static void clear_capture(trace *tr)
{
    for (int i = 0; i < tr->n_slots; i++) release_binding(&tr->slots[i]);
    for (int i = 0; i < tr->n_state; i++) {
        lz_tensor_unref(tr->state[i]);
        if (tr->grad_of[i]) lz_tensor_unref(tr->grad_of[i]);
    }
    free(tr->slots); free(tr->outputs); free(tr->returned); free(tr->state); free(tr->state_slot);
    free(tr->grad_of);
    free(tr->keep);
    free(tr->bound);
    free(tr->donates);
    tr->slots = NULL; tr->outputs = NULL; tr->returned = NULL; tr->state = NULL; tr->state_slot = NULL;
    tr->grad_of = NULL;
    tr->keep = NULL;
    tr->bound = NULL;
    tr->donates = NULL;
    tr->n_slots = tr->n_outputs = tr->n_state = 0;
    tr->captured = 0;
}

static void free_trace(trace *tr)
{
    clear_capture(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    free(tr->dtype); free(tr->ndim); free(tr->shape);
    free(tr);
}

void lz_fn_free(lz_fn *f)
{
    if (!f || lz_owner_check("lz_fn_free")) return;
    for (trace *tr = f->traces, *next; tr; tr = next) {
        next = tr->next;
        free_trace(tr);
    }
    free(f);
}

/* Runs the function lazily in a scope; the returned tensors survive it. */
static int run_function(lz_fn *f, lz_tensor *const *in, lz_tensor **out)
{
    for (int j = 0; j < f->n_out; j++) out[j] = NULL;
    lz_scope_begin();
    int rc = f->fn(f->ctx, in, out);
    for (int j = 0; j < f->n_out; j++) lz_keep(out[j]);
    lz_scope_end();
    for (int j = 0; rc == 0 && j < f->n_out; j++)
        if (!out[j]) rc = lz_errorf_int("lz_call: the step function returned 0 but left output %d NULL", j);
    if (rc != 0) {
        for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        if (!lz_last_error()) lz_errorf("lz_call: the step function failed");
        return -1;
    }
    return 0;
}

/* The tensors alive when a trace starts, each held for the trace. */
typedef struct snapshot {
    lz_tensor **t;
    lz_buffer **buf;         /* its buffer then */
    char *had_grad;
    int n;
    uint32_t epoch;
} snapshot;

static uint32_t snapshot_epoch;

static int take_snapshot(snapshot *s)
{
    int n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    s->t = lz_host_malloc(sizeof *s->t * (size_t)(n + 1));
    s->buf = lz_host_malloc(sizeof *s->buf * (size_t)(n + 1));
    s->had_grad = lz_host_malloc((size_t)n + 1);
    if (!s->t || !s->buf || !s->had_grad) {
        free(s->t); free(s->buf); free(s->had_grad);
        return lz_errorf_int("lz_call: out of memory starting a trace");
    }
    s->epoch = ++snapshot_epoch;
    s->n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) {
        lz_tensor_ref(t);
        t->capture_epoch = s->epoch;
        s->t[s->n] = t;
        s->buf[s->n] = t->node->buf;
        s->had_grad[s->n] = t->grad != NULL;
        s->n++;
    }
    return 0;
}

static void drop_snapshot(snapshot *s)
{
    for (int i = 0; i < s->n; i++) lz_tensor_unref(s->t[i]);
    free(s->t); free(s->buf); free(s->had_grad);
}

static int is_returned(lz_tensor *t, lz_tensor *const *out, int n_out)
{
    for (int j = 0; j < n_out; j++)
        if (out[j] == t) return 1;
    return 0;
}

/* Steady: the trace made no state that the next call would find already
   made (a leaf's first gradient, lazily created optimizer buffers). */
static int trace_is_steady(const snapshot *s, lz_tensor *const *out, int n_out)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i]->requires_grad && !s->had_grad[i] && s->t[i]->grad) return 0;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) {
        if (t->capture_epoch == s->epoch || is_returned(t, out, n_out)) continue;
        int is_grad = 0;
        for (int i = 0; i < s->n && !is_grad; i++) is_grad = s->t[i]->grad == t;
        if (!is_grad) return 0;
    }
    return 1;
}

static int output_slot(const lz_graph *g, const lz_node *n)
{
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] == n) return o;
    return -1;
}

/* Where a data leaf's buffer comes from on a replay. */
static binding bind_leaf(const lz_fn *f, lz_tensor *const *in, const snapshot *s,
                         lz_tensor *const *state, int n_state, lz_buffer *buf)
{
    binding b = {.kind = SRC_CONST};
    for (int k = 0; k < f->n_in; k++)
        if (in[k]->node->buf == buf) return (binding){.kind = SRC_INPUT, .index = k};
    lz_tensor *alive = NULL;
    for (int i = 0; i < s->n; i++) {
        if (s->buf[i] != buf) continue;
        for (int j = 0; j < n_state; j++)
            if (state[j] == s->t[i]) alive = s->t[i];
        if (!alive && s->t[i]->refs > 1) alive = s->t[i];   /* someone besides the snapshot */
        if (alive && alive->node->buf == NULL) break;          /* state found */
    }
    if (alive) {
        lz_tensor_ref(alive);
        return (binding){.kind = SRC_TENSOR, .t = alive};
    }
    lz_buffer_ref(buf);
    b.buf = buf;
    return b;
}

/* The roots of a trace's graph: the returned pending tensors first, then
   every other pending tensor, which is state (into state, if given). A
   warm-up trace cuts the same roots in the same order as the capture that
   follows, so the two are one graph and compile once. */
static int trace_roots(const lz_fn *f, lz_tensor **out, uint32_t epoch, lz_node ***roots,
                       lz_tensor ***state, int *n_state)
{
    int n_live = lz_live_count(), n_roots = 0, ns = 0;
    *roots = lz_host_malloc(sizeof **roots * (size_t)(f->n_out + n_live + 1));
    lz_tensor **st = lz_host_malloc(sizeof *st * (size_t)(n_live + 1));
    if (!*roots || !st) {
        free(*roots);
        free(st);
        *roots = NULL;
        /* what the function recorded stays pending, for the next barrier */
        return lz_errorf_int("lz_call: out of memory collecting the traced step's results");
    }
    for (int j = 0; j < f->n_out; j++)
        if (!out[j]->node->buf) (*roots)[n_roots++] = out[j]->node;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) {
        if (is_returned(t, out, f->n_out) && t->capture_epoch != epoch) continue;
        (*roots)[n_roots++] = t->node;
        st[ns++] = t;
    }
    if (state) { *state = st; *n_state = ns; }
    else free(st);
    return n_roots;
}

static int capture_trace(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out)
{
    /* trace only this call's work */
    if (lz_live_count()) {
        lz_live_prune();
        if (lz_live_count()) {
            lz_counters.mark_steps--;   /* not the user's barrier */
            lz_mark_step();
        }
    }
    snapshot s = {0};
    if (take_snapshot(&s) != 0) return -1;   /* nothing recorded yet */
    tracing = f;
    break_reason = NULL;
    int rc = run_function(f, in, out);
    tracing = NULL;
    if (rc != 0) { drop_snapshot(&s); return -1; }

    if (break_reason) {
        fprintf(stderr, "lazyc: warning: the captured step function calls %s while it is traced "
                        "(a graph break); it will be traced on every call\n", break_reason);
        f->fallback = 1;
        lz_counters.capture_fallbacks++;
        drop_snapshot(&s);
        rc = lz_step_all();
        if (rc != 0)
            for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        return rc;
    }
    if (!tr) tr = new_trace(f, in);
    /* without memory for a trace, this call runs as a warm-up does: lazily */
    if (!tr || (!tr->warmed_up && !trace_is_steady(&s, out, f->n_out))) {
        if (tr) tr->warmed_up = 1;
        lz_node **roots;
        int n_roots = trace_roots(f, out, s.epoch, &roots, NULL, NULL);
        rc = n_roots > 0 ? lz_run_roots(roots, n_roots) : n_roots;
        free(roots);
        drop_snapshot(&s);
        if (rc != 0)
            for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        return rc;
    }
    tr->warmed_up = 1;

    lz_node **roots;
    lz_tensor **state;
    int n_state;
    int n_roots = trace_roots(f, out, s.epoch, &roots, &state, &n_state);
    if (n_roots < 0) {
        drop_snapshot(&s);
        for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        return -1;
    }
    double t0 = lz_now_ms();
    lz_graph g;
    if (lz_graph_cut(&g, roots, n_roots) != 0) {
        /* no memory to capture it: this call runs as a lazy step */
        rc = lz_run_roots(roots, n_roots);
        free(roots);
        free(state);
        drop_snapshot(&s);
        if (rc != 0)
            for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        return rc;
    }
    lz_counters.graphs++;
    lz_counters.trace_ms += lz_now_ms() - t0;
    free(roots);
    lz_executable *exe = lz_find_or_compile(&g);
    if (!exe) rc = lz_execute_graph(&g, NULL);   /* fails the roots: nothing stays pending */
    else if (tr->exe && !lz_graph_same(tr->exe->sig, tr->exe->sig_len, g.sig, g.sig_len)) {
        rc = lz_errorf_int("lz_call: the step function recorded a different graph on a re-trace "
                           "with the same input shapes; a captured function must record the same ops");
        lz_executable_unref(exe);
    }
    /* the trace's tables, all or none, before the trace changes */
    size_t ns1 = (size_t)n_state + 1, no1 = (size_t)g.n_outputs + 1;
    binding *slots = rc ? NULL : lz_host_calloc((size_t)g.n_inputs + 1, sizeof *slots);
    out_desc *outputs = rc ? NULL : lz_host_calloc(no1, sizeof *outputs);
    binding *returned = rc ? NULL : lz_host_calloc((size_t)f->n_out + 1, sizeof *returned);
    int *state_slot = rc ? NULL : lz_host_malloc(sizeof *state_slot * ns1);
    lz_tensor **grad_of = rc ? NULL : lz_host_calloc(ns1, sizeof *grad_of);
    int *keep = rc ? NULL : lz_host_malloc(sizeof *keep * no1);
    char *bound = rc ? NULL : lz_host_calloc(ns1, 1), *donates = rc ? NULL : lz_host_calloc(ns1, 1);
    if (rc == 0 && !(slots && outputs && returned && state_slot && grad_of && keep && bound && donates)) {
        /* fails the roots as a failed compile does: nothing stays pending */
        lz_errorf("lz_call: out of memory recording the capture");
        rc = lz_execute_graph(&g, NULL);
        lz_executable_unref(exe);
    }
    if (rc != 0) {
        free(slots); free(outputs); free(returned); free(state_slot); free(grad_of);
        free(keep); free(bound); free(donates);
        lz_graph_release(&g);
        free(state);
        drop_snapshot(&s);
        for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        return -1;
    }
    clear_capture(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    tr->exe = exe;
    exe->pinned++;

    tr->n_slots = g.n_inputs;
    tr->slots = slots;
    for (int i = 0; i < g.n_inputs; i++)
        tr->slots[i] = bind_leaf(f, in, &s, state, n_state, g.inputs[i]->buf);
    tr->n_outputs = g.n_outputs;
    tr->outputs = outputs;
    for (int o = 0; o < g.n_outputs; o++) {
        const lz_node *n = g.outputs[o];
        out_desc *d = &tr->outputs[o];
        d->dtype = n->dtype;
        d->ndim = n->ndim;
        memcpy(d->shape, n->shape, sizeof d->shape);
        d->nbytes = (size_t)lz_node_numel(n) * lz_dtype_size((lz_dtype)n->dtype);
    }
    tr->returned = returned;
    for (int j = 0; j < f->n_out; j++) {
        if (!out[j]->node->buf) tr->returned[j] = (binding){.kind = -1, .index = output_slot(&g, out[j]->node)};
        else tr->returned[j] = bind_leaf(f, in, &s, NULL, 0, out[j]->node->buf);
    }
    tr->n_state = n_state;
    tr->state = state;
    tr->state_slot = state_slot;
    tr->grad_of = grad_of;
    for (int i = 0; i < n_state; i++) {
        lz_tensor_ref(state[i]);
        tr->state_slot[i] = output_slot(&g, state[i]->node);
        /* A gradient the function remade (zeroed, then backward): a replay
           hands it back to its leaf, which another trace may have given a
           gradient of its own meanwhile. */
        for (int k = 0; k < s.n && !tr->grad_of[i]; k++)
            if (s.t[k]->grad == state[i]) {
                tr->grad_of[i] = s.t[k];
                lz_tensor_ref(s.t[k]);
            }
    }
    /* a failed replay leaves each state tensor at the value it read */
    tr->keep = keep;
    tr->bound = bound;
    for (int o = 0; o < g.n_outputs; o++) tr->keep[o] = -1;
    for (int i = 0; i < n_state; i++)
        for (int k = 0; k < tr->n_slots; k++)
            if (tr->slots[k].kind == SRC_TENSOR && tr->slots[k].t == state[i]) {
                tr->bound[i] = 1;
                if (tr->state_slot[i] >= 0) tr->keep[tr->state_slot[i]] = k;
            }
    tr->donates = donates;
    for (int i = 0; i < n_state && exe; i++) {
        int o = tr->state_slot[i];
        tr->donates[i] = o >= 0 && tr->keep[o] >= 0 &&
                         lz_program_may_overwrite(&exe->prog, o, tr->keep[o]);
    }
    rc = lz_execute_graph(&g, exe);
    lz_graph_release(&g);
    drop_snapshot(&s);
    tr->captured = rc == 0;
    if (rc != 0)
        for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
    return rc;
}

/* Every tensor a replay binds still has a user besides the capture. */
static int bindings_alive(const trace *tr)
{
    for (int i = 0; i < tr->n_slots; i++)
        if (tr->slots[i].kind == SRC_TENSOR && tr->slots[i].t->refs <= 1) return 0;
    for (int i = 0; i < tr->n_state; i++) {
        const lz_tensor *holder = tr->grad_of[i] ? tr->grad_of[i] : tr->state[i];
        if (holder->refs <= 1) return 0;
    }
    return 1;
}

/* Inputs and state must be data; anything the caller left pending is
   synced first (one extra graph, only when it happens). */
static int sync_pending_bindings(const lz_fn *f, const trace *tr, lz_tensor *const *in)
{
    int n = 0, cap = f->n_in + tr->n_slots + tr->n_state;
    lz_tensor **ts = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < f->n_in; k++)
            if (!in[k]->node->buf) { if (pass) ts[n] = in[k]; n += !pass || 1; }
        for (int i = 0; i < tr->n_slots; i++)
            if (tr->slots[i].kind == SRC_TENSOR && !tr->slots[i].t->node->buf) { if (pass) ts[n] = tr->slots[i].t; n++; }
        if (!pass) {
            if (!n) return 0;
            ts = malloc(sizeof *ts * (size_t)(cap + 1));
            n = 0;
        }
    }
    int rc = lz_sync_tensors(ts, n, 0);
    free(ts);
    return rc;
}

/* The buffer of state tensor i if this replay may write its new value
   there: the executable does not read the old value (a gradient remade
   every step), or reads it only before it writes the new one (a parameter
   or a momentum buffer: donated, docs/design.md semantic 7), and nothing else
   can read it after (no other node or tensor holds it; executions in
   flight run first: lz_executor_overwritable).
   Reusing it keeps a replay from holding the state's old and new values at
   once, and skips an allocation. */
static lz_buffer *reusable_state_buffer(const lz_fn *f, const trace *tr, lz_tensor *const *in, int i)
{
    int o = tr->state_slot[i];
    const lz_node *n = tr->state[i]->node;
    if (o < 0 || (tr->bound[i] && !tr->donates[i]) || n->refs != 1 || !n->buf ||
        !lz_executor_overwritable(n->buf, tr->outputs[o].nbytes))
        return NULL;
    for (int k = 0; k < f->n_in; k++)
        if (in[k]->node->buf == n->buf) return NULL;
    return n->buf;
}

static int replay(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out)
{
    if (sync_pending_bindings(f, tr, in)) return -1;
    lz_buffer *in_small[64], **inb = in_small;
    lz_buffer *out_small[64], **outb = out_small;
    if (tr->n_slots > 64) inb = malloc(sizeof *inb * (size_t)tr->n_slots);
    if (tr->n_outputs > 64) outb = malloc(sizeof *outb * (size_t)tr->n_outputs);
    if (!inb || !outb) {
        if (inb != in_small) free(inb);
        if (outb != out_small) free(outb);
        return lz_errorf_int("lz_call: out of memory starting a replay");
    }
    for (int i = 0; i < tr->n_slots; i++) {
        const binding *b = &tr->slots[i];
        inb[i] = b->kind == SRC_INPUT ? in[b->index]->node->buf
               : b->kind == SRC_TENSOR ? b->t->node->buf : b->buf;
    }
    char reuse_small[64], *reuse = reuse_small;
    if (tr->n_outputs > 64 && !(reuse = lz_host_malloc((size_t)tr->n_outputs))) {
        if (inb != in_small) free(inb);
        if (outb != out_small) free(outb);
        return lz_errorf_int("lz_call: out of memory starting a replay");
    }
    memset(reuse, 0, (size_t)tr->n_outputs);
    for (int o = 0; o < tr->n_outputs; o++) outb[o] = NULL;
    for (int i = 0; i < tr->n_state; i++) {
        lz_buffer *b = reusable_state_buffer(f, tr, in, i);
        int o = tr->state_slot[i];
        if (b && !outb[o]) { outb[o] = b; reuse[o] = 1; }
    }
    /* reused buffers are changed only once nothing can fail */
    int rc = 0;
    for (int o = 0; o < tr->n_outputs && rc == 0; o++) {
        if (reuse[o]) continue;
        outb[o] = lz_buffer_placeholder(tr->outputs[o].nbytes);
        if (!outb[o]) rc = -1;
    }
    /* the results' handles and the state's new nodes too, before anything
       is enqueued: a failure to make one leaves nothing half-updated */
    lz_node *state_small[64], **state_nodes = state_small;
    if (rc == 0 && tr->n_state > 64 && !(state_nodes = lz_host_malloc(sizeof *state_nodes * (size_t)tr->n_state)))
        rc = lz_errorf_int("lz_call: out of memory starting a replay");
    int made_out = 0, made_state = 0;
    for (; rc == 0 && made_out < f->n_out; made_out++) {
        int j = made_out;
        const binding *b = &tr->returned[j];
        if (b->kind == SRC_INPUT) {
            out[j] = lz_retain(in[b->index]);
            if (lz_scope_register(out[j]) != 0) { lz_tensor_unref(out[j]); rc = -1; break; }
            continue;
        }
        lz_buffer *buf = b->kind == SRC_TENSOR ? b->t->node->buf : b->kind == SRC_CONST ? b->buf : outb[b->index];
        const out_desc *d = b->kind < 0 ? &tr->outputs[b->index] : NULL;
        const lz_node *like = b->kind == SRC_TENSOR ? b->t->node : NULL;
        lz_node *n = d ? lz_node_new_data(buf, (lz_dtype)d->dtype, d->ndim, d->shape)
                   : like ? lz_node_new_data(buf, (lz_dtype)like->dtype, like->ndim, like->shape)
                          : lz_node_new_data(buf, LZ_F32, 0, NULL);
        if (!(out[j] = lz_tensor_wrap(n))) { rc = -1; break; }
    }
    for (; rc == 0 && made_state < tr->n_state; made_state++) {
        const out_desc *d = &tr->outputs[tr->state_slot[made_state]];
        state_nodes[made_state] = lz_node_new_data(outb[tr->state_slot[made_state]], (lz_dtype)d->dtype,
                                                   d->ndim, d->shape);
        if (!state_nodes[made_state]) { rc = -1; break; }
    }
    if (rc != 0) {
        for (int j = 0; j < made_out; j++) lz_free(out[j]);
        for (int i = 0; i < made_state; i++) lz_node_unref(state_nodes[i]);
    }
    if (rc == 0) {
        for (int o = 0; o < tr->n_outputs; o++)
            if (reuse[o]) {
                lz_buffer_ref(outb[o]);
                lz_buffer_refill(outb[o]);
                lz_counters.in_place_writes++;
            }
        lz_executor_enqueue(tr->exe, inb, outb, tr->keep);
        lz_counters.executions++;
        lz_counters.flops += tr->exe->prog.flops;
        lz_counters.kernels += tr->exe->prog.n_steps;
        lz_counters.capture_replays++;
        for (int i = 0; i < tr->n_state; i++) {
            lz_tensor_set_node(tr->state[i], state_nodes[i]);
            lz_tensor *leaf = tr->grad_of[i];
            if (leaf && leaf->grad != tr->state[i]) {
                if (leaf->grad) lz_tensor_unref(leaf->grad);
                leaf->grad = tr->state[i];
                lz_tensor_ref(leaf->grad);
            }
        }
    }
    for (int o = 0; o < tr->n_outputs; o++)
        if (outb[o] && (rc == 0 || !reuse[o])) lz_buffer_unref(outb[o]);
    if (reuse != reuse_small) free(reuse);
    if (inb != in_small) free(inb);
    if (outb != out_small) free(outb);
    if (state_nodes != state_small) free(state_nodes);
    if (rc != 0) {
        /* nothing enqueued: the state was not touched and keeps its values */
        for (int j = 0; j < f->n_out; j++) out[j] = NULL;
        lz_executor_note_error(lz_last_error());
    }
    return rc;
}

int lz_call(lz_fn *f, lz_tensor *const *in, lz_tensor **out)
{
    if (!f) return lz_errorf_int("lz_call: captured function is NULL");
    if (lz_owner_check("lz_call")) return -1;
    if ((f->n_in && !in) || (f->n_out && !out))
        return lz_errorf_int("lz_call: %s array is NULL", f->n_in && !in ? "input" : "output");
    for (int k = 0; k < f->n_in; k++)
        if (!in[k]) return lz_errorf_int("lz_call: input %d is NULL", k);
    if (tracing) return lz_errorf_int("lz_call: a captured function cannot be called while another is traced");
    if (f->fallback || lz_is_eager()) {
        if (f->fallback) lz_counters.capture_fallbacks++;
        int rc = run_function(f, in, out);
        if (rc == 0 && lz_step_all() != 0) {
            for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
            rc = -1;
        }
        return rc;
    }
    trace *tr = f->traces;
    while (tr && !guard_matches(f, tr, in)) tr = tr->next;
    if (tr && tr->captured && bindings_alive(tr)) return replay(f, tr, in, out);
    return capture_trace(f, tr, in, out);
}
