/* Capture's own header: the tables a trace keeps and the steps each file of
 * capture does, shared by src/engine/capture*.c and nothing else.
 *
 * Capture and replay: trace a step function once, keep its executable,
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
 * before it enqueues anything, so a failure leaves the state untouched.
 *
 * The files, in the order a call flows: capture.c (lz_call: a direct call,
 * a replay or a trace), capture_key.c (which trace a call finds, and the
 * guard), capture_replay.c, capture_trace.c (the function run and its graph
 * cut and compiled), capture_snapshot.c (the tensors alive when a trace
 * starts), capture_bind.c (where each input of the executable comes from on
 * a replay), capture_check.c (LZ_CAPTURE_CHECK); capture_hooks.c keeps what
 * the rest of the library tells capture. */
#ifndef LZ_CAPTURE_INTERNAL_H
#define LZ_CAPTURE_INTERNAL_H

#include <stdint.h>

#include "backend/buffer.h"
#include "compile/executable.h"
#include "engine/capture_hooks.h"
#include "engine/tensor.h"
#include "ir/graph.h"

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
    uint64_t leaf_epoch;     /* lz_requires_grad_changes() when traced */
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

/* capture_key.c: which trace a call finds, and whether a replay may run */
int lz_capture_key_matches(const lz_fn *f, const trace *tr, lz_tensor *const *in);
trace *lz_capture_new_trace(lz_fn *f, lz_tensor *const *in, lz_buffer *const *inbuf);
void lz_capture_free_trace(trace *tr);
int lz_capture_guard_holds(const trace *tr, lz_tensor *const *in);

/* capture_replay.c */
int lz_capture_replay(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out);

/* capture_trace.c: the function run, lazily or traced */
int lz_capture_run_function(lz_fn *f, lz_tensor *const *in, lz_tensor **out, char *kept_out);
int lz_capture_run_uncaptured(const lz_fn *f, lz_tensor **out, uint64_t serial0, snapshot *s);
int lz_capture_trace(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out, int checking);

/* capture_snapshot.c: what a trace saw alive, and what it left pending */
int lz_capture_take_snapshot(snapshot *s, lz_tensor *const *in, int n_in);
void lz_capture_release_snapshot(snapshot *s);
void lz_capture_drop_snapshot(snapshot *s);
int lz_capture_snapshot_index(const snapshot *s, const lz_tensor *t);
int lz_capture_trace_is_steady(const snapshot *s, lz_tensor *const *out, int n_out);
int lz_capture_trace_roots(const lz_fn *f, lz_tensor **out, uint32_t epoch, lz_node ***roots,
                           lz_tensor ***state, int *n_state);

/* capture_bind.c: what a capture holds, and where a replay reads from */
int lz_capture_record_leaves(trace *tr, const snapshot *s, lz_buffer *const *grad_read, int n_read);
void lz_capture_clear_leaves(trace *tr);
void lz_capture_clear(trace *tr);
int lz_capture_bind(lz_fn *f, trace *tr, const lz_graph *g, lz_executable *exe, lz_tensor *const *in,
                    lz_tensor **out, const char *kept, const snapshot *s, lz_tensor **live, int n_live,
                    lz_tensor **freed);

/* capture_check.c: LZ_CAPTURE_CHECK, every N-th call traced again */
int64_t lz_capture_check_every(void);
/* Before tr's capture is bound to g, the graph traced again for the same
   call: the first difference from the capture's graph or constants fails
   the call. What each slot of the capture reads from (tr->n_slots), or
   NULL with the error set, g executed to fail its roots and exe dropped. */
const void **lz_capture_check_before(const trace *tr, const lz_graph *g, lz_executable *exe);
/* Once bound anew: 0 if every slot reads from what it did (was), else -1
   with the error naming the first that does not, g executed to fail its
   roots; later replays read what the function reads now. */
int lz_capture_check_after(const trace *tr, const lz_graph *g, const void *const *was, int n_was);

#endif
