/* Capture and replay: trace a step function once, keep its executable,
 * replay it with new inputs.
 *
 * A trace runs the function on the real inputs and cuts one graph whose
 * inputs are every data leaf it reached and whose outputs are the returned
 * tensors plus every tensor left pending (parameters, gradients, optimizer
 * state updated in place). Each input slot is bound to where its buffer
 * comes from on a replay: an explicit input, a tensor alive across calls
 * (state, a learning-rate scalar), a leaf's current gradient, or a constant
 * buffer. A replay only binds buffers, enqueues the pinned executable and
 * points the state at the new buffers (donation: no copy). It records no IR
 * and computes no hash.
 *
 * The guard: a replay computes what the function would compute lazily only
 * while what the trace saw still holds. Part of it selects the trace (the
 * key: the inputs' dtypes, shapes and aliasing, and which leaves have a
 * gradient); the rest is checked before every replay and re-traces when it
 * fails (every bound tensor is still held by someone besides captures;
 * tensors that shared a buffer when traced still share it; no tensor's
 * requires-grad flag changed since; an autocast bf16 copy of a parameter
 * still holds the parameter's value: engine/autocast.c). Each is an
 * integer or pointer comparison per bound tensor. What cannot be guarded (host values made
 * inside the function, a context pointer swapped to another existing
 * tensor) is named in a warning when traced, or found by LZ_CAPTURE_CHECK=N,
 * which re-traces every N-th call and compares graph, constants and what
 * each input is read from.
 *
 * A trace that created state (a leaf's first gradient, lazily made
 * optimizer buffers) is not steady: it runs as a warm-up and the next call
 * with that key traces again. A trace that reads a value on the host, or
 * that frees a tensor alive across calls after reading it (state kept by
 * replacing a handle), is traced on every call.
 *
 * Short of host memory, a call that cannot be captured runs as the lazy
 * step it recorded, and a replay makes every node and handle it hands out
 * before it enqueues anything, so a failure leaves the state untouched. */
#include "engine/capture.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backend/buffer.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/settings.h"
#include "base/thread.h"
#include "engine/autocast.h"
#include "engine/step.h"
#include "engine/tensor.h"
#include "ir/graph.h"
#include "runtime/executor.h"

/* where an input slot's buffer comes from */
enum { SRC_INPUT, SRC_TENSOR, SRC_CONST, SRC_GRAD };
/* where a state value goes */
enum { ST_TENSOR, ST_INPUT, ST_GRAD, ST_NONE };
/* what a returned tensor is */
enum { RET_NEW, RET_WRAP, RET_SAME_INPUT, RET_SAME_TENSOR };

typedef struct binding {
    int kind;
    int index;               /* SRC_INPUT: explicit input; SRC_GRAD: leaf */
    lz_tensor *t;            /* SRC_TENSOR (held) */
    lz_buffer *buf;          /* SRC_CONST (owned reference) */
} binding;

typedef struct out_desc {
    uint8_t dtype, ndim;
    int64_t shape[LZ_MAX_DIMS];
    size_t nbytes;
} out_desc;

typedef struct state {
    int kind;
    int index;               /* ST_INPUT: explicit input; ST_GRAD: leaf */
    lz_tensor *t;            /* ST_TENSOR (held) */
    int slot;                /* graph output slot of its new value */
    char read;               /* its old value is an input slot (keep[slot]) */
    char donates;            /* the new value may be written over the old one
                                (lz_program_may_overwrite) */
    char copy_current;       /* an autocast copy of a parameter (engine/autocast.c)
                                that holds the parameter's value at the trace's end:
                                so does it after each replay */
} state;

typedef struct ret {
    int kind;
    int index;               /* RET_NEW: output slot; RET_SAME_INPUT: input */
    lz_tensor *t;            /* RET_SAME_TENSOR (held) */
    binding wrap;            /* RET_WRAP: a new handle on this buffer, */
    out_desc desc;           /* shaped as the tensor returned when traced */
    char retain, keep;       /* the step took a reference / lz_keep'd it */
    char had_record;         /* RET_NEW: it had an autograd record when traced */
} ret;

typedef struct leaf_key {
    lz_tensor *t;            /* held */
    char had_grad;
} leaf_key;

/* buffers that were one when traced: in[input] (or a) and b */
typedef struct alias_check {
    int input;
    lz_tensor *a, *b;        /* held */
} alias_check;

typedef struct trace {
    /* key: the explicit inputs' dtypes, shapes and aliasing */
    uint8_t *dtype, *ndim;
    int64_t (*shape)[LZ_MAX_DIMS];
    int *alias;              /* per input: the first input on its buffer */
    uint8_t *dead;           /* per input: it carried a dead autograd record (a
                                backward reaching it fails, as in a direct call) */
    /* key: which leaves had a gradient */
    int n_leaves;
    leaf_key *leaves;
    int warmed_up, captured;
    uint64_t leaf_epoch;     /* lz_capture_leaves_changed count when traced */
    int autocast;            /* the autocast region's dtype at the call (key) */
    lz_executable *exe;      /* pinned */
    int n_slots;
    binding *slots;          /* per input slot of exe */
    int n_outputs;
    out_desc *outputs;       /* per output slot of exe */
    int n_returned;
    ret *returned;           /* per returned tensor */
    int n_state;
    state *state;
    int *keep;               /* per output slot: the input slot of the state value it
                                replaces, or -1 (lz_executor_enqueue) */
    int n_alias;
    alias_check *aliases;
    int n_live_check;
    lz_tensor **live_check;  /* every tensor above, once: must stay the program's */
    /* a replay's scratch, made with the capture: a replay allocates only
       the buffers, nodes and handles it hands out */
    lz_buffer **inb, **outb; /* per input / output slot */
    char *reuse;             /* per output slot: written over a state's buffer */
    lz_node **new_node;      /* per state: its new value */
    lz_tensor **new_grad;    /* per state: the gradient a replay makes */
    struct trace *next;
} trace;

struct lz_fn {
    lz_step_fn fn;
    void *ctx;
    int n_in, n_out;
    trace *traces;
    int fallback;            /* a graph break was seen: trace every call */
    int running;             /* the function is being run (lz_fn_free refuses) */
    int warned_record;       /* the input-with-a-record warning was printed */
    int warned_host;         /* the host-values warning was printed */
    int64_t calls;           /* for LZ_CAPTURE_CHECK */
};

/* A data tensor made from host memory while a function is traced. */
typedef struct host_note {
    lz_tensor *t;            /* a plain reference */
    lz_buffer *buf;          /* its buffer when made */
    const char *op;
} host_note;

static int library_state_made;   /* during this trace (lz_capture_note_library_state) */
static host_note *notes;
static int n_notes, cap_notes;
static int notes_lost;       /* a note found no memory: this trace cannot be bound */
static uint64_t leaf_epoch;

void lz_capture_note_library_state(void)
{
    if (lz_capture_tracing()) library_state_made = 1;
}

void lz_capture_leaves_changed(void) { leaf_epoch++; }

void lz_capture_note_host_data(lz_tensor *t, const char *op)
{
    if (!lz_capture_tracing() || !t) return;
    if (n_notes == cap_notes) {
        int cap = cap_notes ? cap_notes * 2 : 16;
        host_note *n = lz_host_realloc(notes, sizeof *n * (size_t)cap);
        if (!n) {
            /* bind_leaf would take a tensor made here for a constant */
            notes_lost = 1;
            return;
        }
        notes = n;
        cap_notes = cap;
    }
    lz_tensor_ref(t);
    lz_buffer_ref(t->node->buf);
    notes[n_notes++] = (host_note){t, t->node->buf, op};
}

static void drop_notes(void)
{
    for (int i = 0; i < n_notes; i++) {
        lz_tensor_unref(notes[i].t);
        lz_buffer_unref(notes[i].buf);
    }
    /* freed, not kept: one allocation per trace that makes host data, and
       nothing left over at exit */
    free(notes);
    notes = NULL;
    n_notes = cap_notes = 0;
    notes_lost = 0;
}

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

/* LZ_CAPTURE_CHECK=N: trace every N-th call again and compare (0: off). */
static int64_t check_every(void)
{
    static int64_t every = -1;
    if (every < 0) every = lz_setting_int(LZ_SETTING_CAPTURE_CHECK);
    return every;
}

lz_fn *lz_capture(lz_step_fn fn, void *ctx, int n_in, int n_out)
{
    if (!fn) return lz_errorf("lz_capture: step function is NULL");
    if (n_in < 0 || n_out < 0) return lz_errorf("lz_capture: negative input or output count (%d, %d)", n_in, n_out);
    lz_fn *f = lz_host_calloc(1, sizeof *f);
    if (!f) return lz_errorf("lz_capture: out of memory");
    f->fn = fn;
    f->ctx = ctx;
    f->n_in = n_in;
    f->n_out = n_out;
    return f;
}

static int first_alias(lz_buffer *const *buf, int k)
{
    for (int j = 0; j < k; j++)
        if (buf[j] == buf[k]) return j;
    return k;
}

/* An input made by ops whose graph is gone (a backward freed it, or a
   replay returned it): a backward that reaches it must fail. */
static uint8_t carries_dead_record(const lz_tensor *x)
{
    const lz_ag *ag = lz_tensor_of(x)->ag;
    return ag && ag->state != LZ_AG_LIVE && lz_grad_enabled();
}

/* The key: does this call look like the one tr was traced on? */
static int key_matches(const lz_fn *f, const trace *tr, lz_tensor *const *in)
{
    if (tr->autocast != (int)lz_autocast_dtype()) return 0;
    for (int k = 0; k < f->n_in; k++) {
        const lz_node *n = in[k]->node;
        if (n->dtype != tr->dtype[k] || n->ndim != tr->ndim[k] ||
            memcmp(n->shape, tr->shape[k], sizeof(int64_t) * n->ndim))
            return 0;
        if (tr->alias[k] != k && in[tr->alias[k]]->node->buf != n->buf) return 0;
        if (tr->dead[k] != carries_dead_record(in[k])) return 0;
        if (tr->alias[k] == k)
            for (int j = 0; j < k; j++)
                if (in[j]->node->buf == n->buf) return 0;
    }
    for (int i = 0; i < tr->n_leaves; i++)
        if ((tr->leaves[i].t->grad != NULL) != tr->leaves[i].had_grad) return 0;
    return 1;
}

/* A trace keyed by the inputs as they were when the call began (inbuf:
   their buffers then); NULL with the error set when out of memory. */
static trace *new_trace(lz_fn *f, lz_tensor *const *in, lz_buffer *const *inbuf)
{
    trace *tr = lz_host_calloc(1, sizeof *tr);
    if (tr) {
        tr->dtype = lz_host_malloc((size_t)f->n_in + 1);
        tr->ndim = lz_host_malloc((size_t)f->n_in + 1);
        tr->shape = lz_host_malloc(sizeof *tr->shape * (size_t)(f->n_in + 1));
        tr->alias = lz_host_malloc(sizeof *tr->alias * (size_t)(f->n_in + 1));
        tr->dead = lz_host_malloc((size_t)f->n_in + 1);
    }
    if (!tr || !tr->dtype || !tr->ndim || !tr->shape || !tr->alias || !tr->dead) {
        if (tr) { free(tr->dtype); free(tr->ndim); free(tr->shape); free(tr->alias); free(tr->dead); }
        free(tr);
        return lz_errorf("lz_call: out of memory keeping a new trace");
    }
    for (int k = 0; k < f->n_in; k++) {
        tr->dtype[k] = in[k]->node->dtype;
        tr->ndim[k] = in[k]->node->ndim;
        memcpy(tr->shape[k], in[k]->node->shape, sizeof tr->shape[k]);
        tr->alias[k] = first_alias(inbuf, k);
        tr->dead[k] = carries_dead_record(in[k]);
    }
    tr->autocast = (int)lz_autocast_dtype();
    tr->next = f->traces;
    f->traces = tr;
    return tr;
}

static void release_binding(binding *b)
{
    if (b->t) release(b->t);
    if (b->buf) lz_buffer_unref(b->buf);
    b->t = NULL;
    b->buf = NULL;
}

static void clear_leaves(trace *tr)
{
    for (int i = 0; i < tr->n_leaves; i++) release(tr->leaves[i].t);
    free(tr->leaves);
    tr->leaves = NULL;
    tr->n_leaves = 0;
}

/* Drops what a capture holds, keeping the key. */
static void clear_capture(trace *tr)
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

static void free_trace(trace *tr)
{
    clear_capture(tr);
    clear_leaves(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    free(tr->dtype); free(tr->ndim); free(tr->shape); free(tr->alias); free(tr->dead);
    free(tr);
}

void lz_fn_free(lz_fn *f)
{
    if (!f || lz_owner_check("lz_fn_free")) return;
    if (f->running) {
        lz_errorf("lz_fn_free: the captured function is being called (lz_fn_free from inside its "
                  "own step function); free it after lz_call returns");
        return;
    }
    for (trace *tr = f->traces, *next; tr; tr = next) {
        next = tr->next;
        free_trace(tr);
    }
    free(f);
}

/* A step leaves the caller's modes as it found them: a region or no-grad
   section it opened and did not close would silently change the caller's
   later ops (design.md, capture). Puts them back; rc, or -1 with an error
   when the step had succeeded. */
static int check_modes_closed(int rc, const lz_autocast_regions *regions, int no_grad)
{
    const int depth_now = lz_autocast_regions_open();
    const int autocast_same = lz_autocast_check_restore(regions);
    const int no_grad_now = lz_no_grad_depth();
    lz_no_grad_restore(no_grad);
    if (rc != 0) return rc;
    if (!autocast_same)
        return lz_errorf_int("lz_call: the step function left the autocast regions changed "
                             "(%d open when it was called, %d when it returned): a region opened "
                             "in a captured step must be closed in it, and one open at the call "
                             "left open", regions->depth, depth_now);
    if (no_grad_now > no_grad)
        return lz_errorf_int("lz_call: the step function left %d lz_no_grad_begin section(s) "
                             "open: a section opened in a captured step must be closed in it",
                             no_grad_now - no_grad);
    if (no_grad_now < no_grad)
        return lz_errorf_int("lz_call: the step function closed %d lz_no_grad_begin section(s) "
                             "it did not open", no_grad - no_grad_now);
    return 0;
}

/* Runs the function lazily in a scope that ends as if the function had run
   in the caller's (lz_scope_end_call); the returned tensors survive it.
   kept_out (may be NULL): per output, whether the step lz_keep'd it. */
static int run_function(lz_fn *f, lz_tensor *const *in, lz_tensor **out, char *kept_out)
{
    for (int j = 0; j < f->n_out; j++) out[j] = NULL;
    lz_clear_error();
    if (lz_scope_open("lz_call") != 0) return -1;
    lz_autocast_regions regions;
    lz_autocast_save(&regions);
    const int no_grad = lz_no_grad_depth();
    f->running++;
    int rc = f->fn(f->ctx, in, out);
    f->running--;
    rc = check_modes_closed(rc, &regions, no_grad);
    if (lz_scope_end_call(out, f->n_out, kept_out) != 0 && rc == 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", lz_last_error());
        rc = lz_errorf_int("lz_call: %s", msg);
    }
    for (int j = 0; rc == 0 && j < f->n_out; j++)
        if (!out[j]) {
            /* an op the function did not check failed: its message is the cause */
            const char *why = lz_last_error();
            if (why) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", why);
                rc = lz_errorf_int("lz_call: the step function returned 0 but left output %d NULL "
                                   "after an error it did not check: %s", j, msg);
            } else {
                rc = lz_errorf_int("lz_call: the step function returned 0 but left output %d NULL", j);
            }
        }
    if (rc != 0) {
        for (int j = 0; j < f->n_out; j++) { lz_free(out[j]); out[j] = NULL; }
        if (!lz_last_error()) lz_errorf("lz_call: the step function failed");
        return -1;
    }
    return 0;
}

/* The tensors alive when a trace starts, each held for the trace, and
   their buffers then, held too: the function may drop a buffer (an
   assignment, autocast's copy refreshed by an optimizer), and a new one
   made at its address must not be taken for it. */
typedef struct snapshot {
    lz_tensor **t;
    lz_buffer **buf;         /* its buffer then */
    lz_tensor **grad;        /* its gradient then */
    lz_buffer **gbuf;        /* that gradient's buffer then */
    char *alive;             /* held by the program then */
    lz_buffer **inbuf;       /* each explicit input's buffer then */
    int n, n_in;
    int holds_buffers;
    uint32_t epoch;
} snapshot;

static uint32_t snapshot_epoch;

static lz_buffer *hold_buffer(lz_buffer *b)
{
    if (b) lz_buffer_ref(b);
    return b;
}

static int take_snapshot(snapshot *s, lz_tensor *const *in, int n_in)
{
    int n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    memset(s, 0, sizeof *s);
    s->t = lz_host_malloc(sizeof *s->t * (size_t)(n + 1));
    s->buf = lz_host_malloc(sizeof *s->buf * (size_t)(n + 1));
    s->grad = lz_host_malloc(sizeof *s->grad * (size_t)(n + 1));
    s->gbuf = lz_host_malloc(sizeof *s->gbuf * (size_t)(n + 1));
    s->alive = lz_host_malloc((size_t)n + 1);
    s->inbuf = lz_host_malloc(sizeof *s->inbuf * (size_t)(n_in + 1));
    if (!s->t || !s->buf || !s->grad || !s->gbuf || !s->alive || !s->inbuf) {
        free(s->t); free(s->buf); free(s->grad); free(s->gbuf); free(s->alive);
        free(s->inbuf);
        memset(s, 0, sizeof *s);
        return lz_errorf_int("lz_call: out of memory starting a trace (%d tensors alive)", n);
    }
    s->epoch = ++snapshot_epoch;
    s->n_in = n_in;
    s->holds_buffers = 1;
    for (int k = 0; k < n_in; k++) s->inbuf[k] = hold_buffer(in[k]->node->buf);
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) {
        s->alive[s->n] = lz_tensor_held(t, 0);
        lz_tensor_ref(t);
        t->capture_epoch = s->epoch;
        s->t[s->n] = t;
        s->buf[s->n] = hold_buffer(t->node->buf);
        s->grad[s->n] = t->grad;
        s->gbuf[s->n] = hold_buffer(t->grad ? t->grad->node->buf : NULL);
        s->n++;
    }
    return 0;
}

/* Before anything executes (a held buffer could not be written in
   place): the binding that compares them is done by then. */
static void release_snapshot_buffers(snapshot *s)
{
    if (!s->holds_buffers) return;
    s->holds_buffers = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->buf[i]) lz_buffer_unref(s->buf[i]);
        if (s->gbuf[i]) lz_buffer_unref(s->gbuf[i]);
    }
    for (int k = 0; k < s->n_in; k++)
        if (s->inbuf[k]) lz_buffer_unref(s->inbuf[k]);
}

static void drop_snapshot(snapshot *s)
{
    release_snapshot_buffers(s);
    for (int i = 0; i < s->n; i++) lz_tensor_unref(s->t[i]);
    free(s->t); free(s->buf); free(s->grad); free(s->gbuf); free(s->alive);
    free(s->inbuf);
}

static int snapshot_index(const snapshot *s, const lz_tensor *t)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i] == t) return i;
    return -1;
}

static int is_returned(lz_tensor *t, lz_tensor *const *out, int n_out)
{
    for (int j = 0; j < n_out; j++)
        if (out[j] && lz_tensor_of(out[j]) == t) return 1;
    return 0;
}

/* Steady: the trace made no state that the next call would find already
   made (a leaf's first gradient, lazily created optimizer buffers). */
static int trace_is_steady(const snapshot *s, lz_tensor *const *out, int n_out)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i]->requires_grad && !s->grad[i] && s->t[i]->grad) return 0;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) {
        if (t->capture_epoch == s->epoch || is_returned(t, out, n_out) || t->internal) continue;
        int is_grad = 0;
        for (int i = 0; i < s->n && !is_grad; i++) is_grad = s->t[i]->grad == t;
        if (!is_grad) return 0;
    }
    return 1;
}

/* The key's leaves: every tensor alive at the start whose gradient the
   trace read, replaced or updated (grad_read: buffers the graph reads). */
static int record_leaves(trace *tr, const snapshot *s, lz_buffer *const *grad_read, int n_read)
{
    clear_leaves(tr);
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
    for (int i = 0; i < n_notes; i++)
        if (notes[i].buf == buf && notes[i].t->node->buf == buf && lz_tensor_held(notes[i].t, 1)) {
            hold(notes[i].t);
            return (binding){.kind = SRC_TENSOR, .t = notes[i].t};
        }
    lz_buffer_ref(buf);
    return (binding){.kind = SRC_CONST, .buf = buf};
}

/* The roots of a trace's graph: the returned pending tensors first, then
   every other pending tensor, which is state (into state, if given) unless
   it is a value an autograd record saved. A
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
        return lz_errorf_int("lz_call: out of memory collecting the traced step's %d pending tensors", n_live);
    }
    for (int j = 0; j < f->n_out; j++)
        if (!out[j]->node->buf) (*roots)[n_roots++] = out[j]->node;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) {
        if (is_returned(t, out, f->n_out) && t->capture_epoch != epoch) continue;
        (*roots)[n_roots++] = t->node;
        /* a record's saved value is computed in this execution, but it is
           this call's: a replay must not write its values into it */
        if (!t->internal) st[ns++] = t;
    }
    if (state) { *state = st; *n_state = ns; }
    else free(st);
    return n_roots;
}

/* One warning naming every tensor the function made from host memory whose
   value a replay reuses. */
static void warn_host_values(lz_fn *f, const trace *tr)
{
    if (f->warned_host) return;
    char list[1024];
    size_t len = 0;
    int n = 0;
    list[0] = 0;
    for (int i = 0; i < tr->n_slots; i++) {
        if (tr->slots[i].kind != SRC_CONST) continue;
        const host_note *hn = NULL;
        for (int k = 0; k < n_notes && !hn; k++)
            if (notes[k].buf == tr->slots[i].buf) hn = &notes[k];
        if (!hn) continue;
        const lz_node *nd = hn->t->node;
        char shape[96], val[64] = "";
        /* made from host data: nothing to wait for, read from the device */
        union { float f; int64_t i64; int32_t i32; uint16_t bf16; } v;
        if (lz_node_numel(nd) == 1 && !hn->buf->error &&
            lz_buffer_read("lz_call", hn->buf, &v, lz_dtype_size((lz_dtype)nd->dtype)) == 0) {
            if (nd->dtype == LZ_F32) snprintf(val, sizeof val, " = %g", (double)v.f);
            else if (nd->dtype == LZ_I64) snprintf(val, sizeof val, " = %" PRId64, v.i64);
            else if (nd->dtype == LZ_BF16) snprintf(val, sizeof val, " = %g", (double)lz_bf16_to_f32(v.bf16));
            else snprintf(val, sizeof val, " = %" PRId32, v.i32);
        }
        if (len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %s %s%s", n ? ", " : "", hn->op,
                                    lz_shape_str(shape, nd->ndim, nd->shape),
                                    lz_dtype_name((lz_dtype)nd->dtype), val);
        n++;
    }
    if (!n) return;
    f->warned_host = 1;
    lz_warning("the captured step function made %d tensor%s from host memory while it was traced "
               "(%s); every replay reuses the values %s had then. Pass each as an input of "
               "lz_call, or keep it as a tensor alive across calls and change it with lz_assign "
               "or lz_copy_from_host",
               n, n > 1 ? "s" : "", list, n > 1 ? "they" : "it");
}

/* The first difference between the capture tr holds and the graph g just
   traced for the same call (LZ_CAPTURE_CHECK): 0 if none, else -1 with
   the error set. */
static int compare_capture(const trace *tr, const lz_graph *g)
{
    char what[512];
    if (lz_graph_sig_diff(tr->exe->sig, tr->exe->sig_len, g->sig, g->sig_len, what, sizeof what))
        return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: the step function recorded a different graph "
                             "than when it was captured: %s", what);
    for (int i = 0; i < g->n_inputs && i < tr->n_slots; i++) {
        if (tr->slots[i].kind != SRC_CONST) continue;
        const lz_buffer *old = tr->slots[i].buf, *now = g->inputs[i]->buf;
        if (old->nbytes != now->nbytes || old->error || now->error) continue;
        /* both made from host data: read them back from the device */
        char *host = lz_host_malloc(2 * old->nbytes + 1);
        if (!host)
            return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: out of memory reading constant input %d "
                                 "(%zu bytes) to compare it", i, old->nbytes);
        const char *was = host, *is = host + old->nbytes;
        if (lz_buffer_read("lz_call", old, host, old->nbytes) ||
            lz_buffer_read("lz_call", now, host + old->nbytes, old->nbytes)) {
            free(host);
            return -1;
        }
        if (memcmp(was, is, old->nbytes) == 0) {
            free(host);
            continue;
        }
        const lz_node *n = g->inputs[i];
        size_t es = lz_dtype_size((lz_dtype)n->dtype), e = 0;
        while (e * es < old->nbytes && !memcmp(was + e * es, is + e * es, es)) e++;
        char shape[96], ov[48], nv[48];
        const char *od = was + e * es, *ndt = is + e * es;
        if (n->dtype == LZ_F32) {
            snprintf(ov, sizeof ov, "%.9g", (double)*(const float *)od);
            snprintf(nv, sizeof nv, "%.9g", (double)*(const float *)ndt);
        } else if (n->dtype == LZ_I64) {
            snprintf(ov, sizeof ov, "%" PRId64, *(const int64_t *)od);
            snprintf(nv, sizeof nv, "%" PRId64, *(const int64_t *)ndt);
        } else if (n->dtype == LZ_BF16) {
            snprintf(ov, sizeof ov, "%.9g", (double)lz_bf16_to_f32(*(const uint16_t *)od));
            snprintf(nv, sizeof nv, "%.9g", (double)lz_bf16_to_f32(*(const uint16_t *)ndt));
        } else {
            snprintf(ov, sizeof ov, "%" PRId32, *(const int32_t *)od);
            snprintf(nv, sizeof nv, "%" PRId32, *(const int32_t *)ndt);
        }
        free(host);
        return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: constant input %d (%s %s, made from host memory "
                             "inside the step function) changed since the capture: element %zu was %s, "
                             "is now %s", i, lz_shape_str(shape, n->ndim, n->shape),
                             lz_dtype_name((lz_dtype)n->dtype), e, ov, nv);
    }
    return 0;
}

/* Pending work of a failed trace fails with it: nothing stays pending
   (short of memory to cut it, it stays pending for the next barrier). */
static void fail_pending(void)
{
    lz_node **roots;
    int n = 0;
    lz_live_prune();
    if (!lz_live_count()) return;
    roots = lz_host_malloc(sizeof *roots * (size_t)lz_live_count());
    if (!roots) return;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) roots[n++] = t->node;
    lz_graph g;
    if (lz_graph_cut(&g, roots, n) != 0) {
        free(roots);
        return;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lz_last_error() ? lz_last_error() : "lz_call failed");
    lz_execute_graph(&g, NULL);
    lz_errorf("%s", msg);
    lz_graph_release(&g);
    free(roots);
}

/* Frees the outputs the function made in this call (serial at or after
   serial0); handles it was given are the caller's. */
static void drop_made_outputs(const lz_fn *f, lz_tensor **out, uint64_t serial0)
{
    for (int j = 0; j < f->n_out; j++) {
        if (out[j] && out[j]->serial >= serial0) lz_free(out[j]);
        out[j] = NULL;
    }
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
        int si = b->kind == SRC_TENSOR ? snapshot_index(s, b->t) : -1;
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

/* The tensors guard_holds checks are alive, each once (a parameter is both
   read and updated), into tr->live_check (room for all). */
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

/* What a slot reads, as an identity: the tensor, the input index or the
   leaf whose gradient, or the constant buffer. */
static const void *binding_source(const trace *tr, const binding *b)
{
    switch (b->kind) {
    case SRC_INPUT: return (const void *)(uintptr_t)(1 + b->index);   /* not a heap address */
    case SRC_TENSOR: return b->t;
    case SRC_GRAD: return tr->leaves[b->index].t;
    default: return NULL;
    }
}

/* The capture's tables and a replay's scratch, all or none (tr has none:
   clear_capture). */
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

/* Binds everything a replay of g needs. 0; 1 when the function frees a
   tensor alive across calls after reading it (it cannot be replayed: the
   caller falls back to tracing every call); -1 on out of memory (what is
   bound so far is the capture's: clear_capture releases it). */
static int bind_capture(lz_fn *f, trace *tr, const lz_graph *g, lz_executable *exe, lz_tensor *const *in,
                        lz_tensor **out, const char *kept, const snapshot *s, lz_tensor **live, int n_live,
                        lz_tensor **freed)
{
    lz_buffer **bufs = lz_host_malloc(sizeof *bufs * (size_t)(g->n_inputs + 1));
    if (!bufs) return lz_errorf_int("lz_call: out of memory binding a capture of %d inputs", g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) bufs[i] = g->inputs[i]->buf;
    int rc = record_leaves(tr, s, bufs, g->n_inputs);
    free(bufs);
    if (rc) return -1;
    tr->leaf_epoch = leaf_epoch;
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
    if (*freed) return 1;
    for (int o = 0; o < g->n_outputs; o++) {
        const lz_node *n = g->outputs[o];
        out_desc *d = &tr->outputs[o];
        d->dtype = n->dtype;
        d->ndim = n->ndim;
        memcpy(d->shape, n->shape, sizeof d->shape);
        d->nbytes = (size_t)lz_node_numel(n) * lz_dtype_size((lz_dtype)n->dtype);
        tr->keep[o] = -1;
    }
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
    if (record_aliases(tr, s, in, f->n_in)) return -1;
    collect_live_checks(tr);
    return 0;
}

/* Runs what a call recorded as a lazy step (a graph break, a function
   traced on every call, or short of memory to capture it: a later call
   traces again); if that fails, nothing stays pending and the outputs it
   made are dropped. */
static int run_uncaptured(const lz_fn *f, lz_tensor **out, uint64_t serial0, snapshot *s)
{
    if (s) release_snapshot_buffers(s);
    int rc = lz_step_all();
    if (rc != 0) {
        fail_pending();
        drop_made_outputs(f, out, serial0);
    }
    return rc;
}

static int capture_trace(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out, int checking)
{
    /* trace only this call's work; casts autocast kept from before the
       call would be bound as values, not made by the trace */
    lz_autocast_cache_clear();
    if (lz_live_count()) {
        lz_live_prune();
        if (lz_live_count()) {
            lz_counters.mark_steps--;   /* not the user's barrier */
            lz_mark_step();
        }
    }
    uint64_t serial0 = lz_tensor_serial();
    snapshot s;
    if (take_snapshot(&s, in, f->n_in)) return -1;
    char kept_small[16], *kept = f->n_out <= 16 ? kept_small : lz_host_malloc((size_t)f->n_out);
    if (!kept) {
        drop_snapshot(&s);
        return lz_errorf_int("lz_call: out of memory starting a trace of %d outputs", f->n_out);
    }
    lz_trace_begin();
    library_state_made = 0;
    drop_notes();
    int rc = run_function(f, in, out, kept);
    lz_autocast_cache_clear();   /* not outputs of the trace */
    const char *break_reason = lz_trace_end();
    if (rc != 0) goto done;

    if (break_reason) {
        lz_warning("the captured step function calls %s while it is traced (a graph break); it "
                   "will be traced on every call", break_reason);
        f->fallback = 1;
        lz_counters.capture_fallbacks++;
        rc = run_uncaptured(f, out, serial0, &s);
        goto done;
    }
    /* a tensor made here from host memory went unnoted: not bindable */
    if (notes_lost) { rc = run_uncaptured(f, out, serial0, &s); goto done; }
    if (!tr && !(tr = new_trace(f, in, s.inbuf))) { rc = run_uncaptured(f, out, serial0, &s); goto done; }
    if (library_state_made || (!tr->warmed_up && !trace_is_steady(&s, out, f->n_out))) {
        /* without its leaves recorded, the next call warms up again */
        tr->warmed_up = record_leaves(tr, &s, NULL, 0) == 0;
        tr->leaf_epoch = leaf_epoch;
        lz_node **roots = NULL;
        int n_roots = trace_roots(f, out, s.epoch, &roots, NULL, NULL);
        if (n_roots < 0) { rc = run_uncaptured(f, out, serial0, &s); goto done; }
        release_snapshot_buffers(&s);
        rc = n_roots > 0 ? lz_run_roots(roots, n_roots) : 0;
        free(roots);
        if (rc != 0) { fail_pending(); drop_made_outputs(f, out, serial0); }
        goto done;
    }
    tr->warmed_up = 1;

    lz_node **roots;
    lz_tensor **live = NULL;
    int n_live = 0;
    int n_roots = trace_roots(f, out, s.epoch, &roots, &live, &n_live);
    if (n_roots < 0) { rc = run_uncaptured(f, out, serial0, &s); goto done; }
    double t0 = lz_now_ms();
    lz_graph g;
    if (lz_graph_cut(&g, roots, n_roots) != 0) {
        free(roots);
        free(live);
        rc = run_uncaptured(f, out, serial0, &s);
        goto done;
    }
    lz_counters.graphs++;
    lz_counters.trace_ms += lz_now_ms() - t0;
    free(roots);
    lz_executable *exe = lz_find_or_compile(&g);
    /* LZ_CAPTURE_CHECK: what each slot was read from, compared by identity
       once bound anew (every tensor bound now was alive before the old
       capture is dropped, so no address is reused) */
    const void **was = NULL;
    int n_was = checking && tr->captured ? tr->n_slots : 0;
    if (!exe) {
        release_snapshot_buffers(&s);
        rc = lz_execute_graph(&g, NULL);   /* fails the roots: nothing stays pending */
    } else if (checking && tr->captured) {
        if (compare_capture(tr, &g) == 0 && !(was = lz_host_malloc(sizeof *was * (size_t)(n_was + 1))))
            lz_errorf("lz_call: LZ_CAPTURE_CHECK: out of memory comparing the capture's %d inputs", n_was);
        if (!was) {
            /* the call fails; the capture stays as it was */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", lz_last_error());
            lz_execute_graph(&g, NULL);
            lz_errorf("%s", msg);
            lz_executable_unref(exe);
            rc = -1;
        }
    }
    if (rc != 0) {
        lz_graph_release(&g);
        free(live);
        drop_made_outputs(f, out, serial0);
        goto done;
    }
    for (int i = 0; was && i < n_was; i++) was[i] = binding_source(tr, &tr->slots[i]);
    clear_capture(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    tr->exe = exe;
    exe->pinned++;
    lz_tensor *freed = NULL;
    int bound = bind_capture(f, tr, &g, exe, in, out, kept, &s, live, n_live, &freed);
    free(live);
    int rebound = -1;
    for (int i = 0; was && bound == 0 && i < n_was && i < tr->n_slots && rebound < 0; i++)
        if (was[i] != binding_source(tr, &tr->slots[i])) rebound = i;
    free(was);
    if (rebound >= 0) {
        /* the capture is bound anew (later replays read what the function
           reads now); this call fails and its state keeps its values */
        char shape[96];
        const lz_node *n = g.inputs[rebound];
        lz_errorf("lz_call: LZ_CAPTURE_CHECK: input %d of the captured graph (%s %s) is read from a "
                  "different tensor than when the step function was captured (it reaches another "
                  "tensor through its context now)", rebound, lz_shape_str(shape, n->ndim, n->shape),
                  lz_dtype_name((lz_dtype)n->dtype));
        char msg[512];
        snprintf(msg, sizeof msg, "%s", lz_last_error());
        lz_execute_graph(&g, NULL);
        lz_errorf("%s", msg);
        lz_graph_release(&g);
        tr->captured = 1;
        drop_made_outputs(f, out, serial0);
        rc = -1;
        goto done;
    }
    if (bound == 1) {
        char shape[96];
        lz_warning("the captured step function reads a tensor alive across calls (%s %s) and then "
                   "frees it (state kept by replacing a handle); it will be traced on every call. "
                   "Keep such state in one tensor and update it with lz_assign",
                   lz_shape_str(shape, freed->node->ndim, freed->node->shape),
                   lz_dtype_name((lz_dtype)freed->node->dtype));
        f->fallback = 1;
        lz_counters.capture_fallbacks++;
        clear_capture(tr);
    } else if (bound == 0) {
        warn_host_values(f, tr);
    }
    release_snapshot_buffers(&s);
    rc = lz_execute_step_graph(&g, exe);
    lz_graph_release(&g);
    tr->captured = rc == 0 && bound == 0;
    if (bound < 0) clear_capture(tr);
    if (rc != 0) drop_made_outputs(f, out, serial0);
done:
    drop_notes();
    drop_snapshot(&s);
    if (kept != kept_small) free(kept);
    return rc;
}

/* The rest of the guard, checked before each replay: every tensor the
   capture bound is still the program's, tensors that shared a buffer
   still do, no requires-grad flag changed, and no bf16 copy of a
   parameter lags behind it (the parameter was assigned since). */
static int guard_holds(const trace *tr, lz_tensor *const *in)
{
    if (tr->leaf_epoch != leaf_epoch) return 0;
    for (int i = 0; i < tr->n_live_check; i++)
        if (!lz_tensor_held(tr->live_check[i], 0) || lz_autocast_copy_stale(tr->live_check[i])) return 0;
    for (int i = 0; i < tr->n_alias; i++) {
        const alias_check *a = &tr->aliases[i];
        const lz_buffer *x = (a->input >= 0 ? in[a->input] : a->a)->node->buf;
        if (!x || x != a->b->node->buf) return 0;
    }
    return 1;
}

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

static int replay(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out)
{
    if (sync_pending_bindings(f, tr, in)) return -1;
    /* locals: the stores below could alias tr's fields */
    lz_buffer **inb = tr->inb, **outb = tr->outb;
    char *reuse = tr->reuse;
    const state *states = tr->state;
    const ret *returned = tr->returned;
    lz_node **new_node = tr->new_node;
    lz_tensor **new_grad = tr->new_grad;
    const int n_state = tr->n_state, n_outputs = tr->n_outputs, n_out = f->n_out;
    int rc = 0, made_state = 0;
    for (int i = 0; i < tr->n_slots; i++) {
        const binding *b = &tr->slots[i];
        inb[i] = b->kind == SRC_INPUT ? in[b->index]->node->buf
               : b->kind == SRC_TENSOR ? b->t->node->buf
               : b->kind == SRC_GRAD ? grad_of(tr, b->index)->node->buf : b->buf;
    }
    /* Every node and handle this replay hands out is made before anything
       is enqueued, so that a failure leaves the state untouched. A returned
       tensor the step did not compute holds the value its source had when
       the call began, as in a direct call: made first, it also keeps that
       buffer from being written over. */
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
    for (; made_state < n_state && rc == 0; made_state++) {
        const state *st = &states[made_state];
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
        new_node[made_state] = n;
        new_grad[made_state] = g;
        if (rc) break;
    }
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
    if (rc != 0) {
        drop_made(tr, f, out, made_state);
    } else {
        for (int o = 0; o < n_outputs; o++)
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
    for (int o = 0; o < n_outputs; o++)
        if (outb[o] && (rc == 0 || !reuse[o])) lz_buffer_unref(outb[o]);
    if (rc != 0) {
        /* nothing enqueued: the state was not touched and keeps its values */
        lz_executor_note_error(lz_last_error());
    }
    return rc;
}

/* The first input made by ops whose graph is alive (a backward inside the
   step could go on into it), or -1. */
static int input_with_record(const lz_fn *f, lz_tensor *const *in)
{
    if (!lz_grad_enabled()) return -1;
    for (int k = 0; k < f->n_in; k++) {
        const lz_ag *ag = lz_tensor_of(in[k])->ag;
        if (ag && ag->state == LZ_AG_LIVE) return k;
    }
    return -1;
}

/* The call run as a direct call would run: the function, then its step. */
static int run_direct(lz_fn *f, lz_tensor *const *in, lz_tensor **out)
{
    uint64_t serial0 = lz_tensor_serial();
    int rc = run_function(f, in, out, NULL);
    return rc == 0 ? run_uncaptured(f, out, serial0, NULL) : rc;
}

/* A replay binds an input as data, so it cannot differentiate into the
   graph that made it: such a call runs directly, said once per function. */
static int run_direct_for_record(lz_fn *f, lz_tensor *const *in, lz_tensor **out, int k)
{
    if (!f->warned_record) {
        f->warned_record = 1;
        lz_warning("input %d of a captured step carries an autograd record (it was computed "
                   "from tensors that require grad), so a backward in the step may reach the ops "
                   "that made it: calls with such an input run as direct calls, traced each time. "
                   "Pass lz_detach(x) if no gradient should flow back into it", k);
    }
    lz_counters.capture_fallbacks++;
    return run_direct(f, in, out);
}

int lz_call(lz_fn *f, lz_tensor *const *in, lz_tensor **out)
{
    if (!f) return lz_errorf_int("lz_call: captured function is NULL");
    if (lz_owner_check("lz_call")) return -1;
    if ((f->n_in && !in) || (f->n_out && !out))
        return lz_errorf_int("lz_call: %s array is NULL", f->n_in && !in ? "input" : "output");
    for (int k = 0; k < f->n_in; k++)
        if (!in[k]) return lz_errorf_int("lz_call: input %d is NULL", k);
    if (lz_capture_tracing()) return lz_errorf_int("lz_call: a captured function cannot be called while another is traced");
    f->calls++;
    if (f->fallback || lz_is_eager()) {
        if (f->fallback) lz_counters.capture_fallbacks++;
        return run_direct(f, in, out);
    }
    const int k = input_with_record(f, in);
    if (k >= 0) return run_direct_for_record(f, in, out, k);
    trace *tr = f->traces;
    while (tr && !key_matches(f, tr, in)) tr = tr->next;
    int64_t every = check_every();
    int check = every > 0 && f->calls % every == 0;
    if (tr && tr->captured && !check && guard_holds(tr, in)) return replay(f, tr, in, out);
    return capture_trace(f, tr, in, out, check && tr && tr->captured && guard_holds(tr, in));
}
