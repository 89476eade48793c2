/* What a trace saw: the tensors alive when it starts, their buffers and
 * gradients then, and against them what it left pending (state to update,
 * or state it made: a warm-up) as the roots of its graph. */
#include "engine/capture_internal.h"

#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "base/error.h"
#include "base/fault.h"

static uint32_t snapshot_epoch;

static lz_buffer *hold_buffer(lz_buffer *b)
{
    if (b) lz_buffer_ref(b);
    return b;
}

int lz_capture_take_snapshot(snapshot *s, lz_tensor *const *in, int n_in)
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
void lz_capture_release_snapshot(snapshot *s)
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

void lz_capture_drop_snapshot(snapshot *s)
{
    lz_capture_release_snapshot(s);
    for (int i = 0; i < s->n; i++) lz_tensor_unref(s->t[i]);
    free(s->t); free(s->buf); free(s->grad); free(s->gbuf); free(s->alive);
    free(s->inbuf);
}

int lz_capture_snapshot_index(const snapshot *s, const lz_tensor *t)
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
int lz_capture_trace_is_steady(const snapshot *s, lz_tensor *const *out, int n_out)
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

/* The roots of a trace's graph: the returned pending tensors first, then
   every other pending tensor, which is state (into state, if given) unless
   it is a value an autograd record saved. A
   warm-up trace cuts the same roots in the same order as the capture that
   follows, so the two are one graph and compile once. */
int lz_capture_trace_roots(const lz_fn *f, lz_tensor **out, uint32_t epoch, lz_node ***roots,
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
