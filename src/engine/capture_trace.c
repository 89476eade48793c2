/* A trace: the step function run on the real inputs in its own scope,
 * then, by what it did, a graph break, a warm-up or a capture (its graph
 * cut, compiled, bound and executed); a call that is not captured runs as
 * the lazy step it recorded. */
#include "engine/capture_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/autograd.h"
#include "backend/buffer.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "engine/autocast.h"
#include "engine/step.h"

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
int lz_capture_run_function(lz_fn *f, lz_tensor *const *in, lz_tensor **out, char *kept_out)
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

/* One warning naming every tensor the function made from host memory whose
   value a replay reuses. */
static void warn_host_values(lz_fn *f, const trace *tr)
{
    if (f->warned_host) return;
    char list[1024];
    size_t len = 0;
    int n = 0;
    list[0] = 0;
    int n_notes;
    const lz_capture_note *notes = lz_capture_notes(&n_notes);
    for (int i = 0; i < tr->n_slots; i++) {
        if (tr->slots[i].kind != SRC_CONST) continue;
        const lz_capture_note *hn = NULL;
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

/* Runs what a call recorded as a lazy step (a graph break, a function
   traced on every call, or short of memory to capture it: a later call
   traces again); if that fails, nothing stays pending and the outputs it
   made are dropped. */
int lz_capture_run_uncaptured(const lz_fn *f, lz_tensor **out, uint64_t serial0, snapshot *s)
{
    if (s) lz_capture_release_snapshot(s);
    int rc = lz_step_all();
    if (rc != 0) {
        fail_pending();
        drop_made_outputs(f, out, serial0);
    }
    return rc;
}

/* Cuts the traced step's graph (its roots: lz_capture_trace_roots) and
   finds or compiles its executable (*exe NULL if that failed). 0, or -1
   short of memory to cut it: then nothing is cut and *live is NULL. */
static int cut_and_compile(const lz_fn *f, lz_tensor **out, const snapshot *s, lz_graph *g,
                           lz_executable **exe, lz_tensor ***live, int *n_live)
{
    lz_node **roots;
    int n_roots = lz_capture_trace_roots(f, out, s->epoch, &roots, live, n_live);
    if (n_roots < 0) return -1;
    double t0 = lz_now_ms();
    if (lz_graph_cut(g, roots, n_roots) != 0) {
        free(roots);
        free(*live);
        *live = NULL;
        return -1;
    }
    lz_counters.graphs++;
    lz_counters.trace_ms += lz_now_ms() - t0;
    free(roots);
    *exe = lz_find_or_compile(g);
    return 0;
}

/* A step that frees state it read cannot be replayed: said once, and the
   function is traced on every call from now on. */
static void refuse_freed_state(lz_fn *f, trace *tr, const lz_tensor *freed)
{
    char shape[96];
    lz_warning("the captured step function reads a tensor alive across calls (%s %s) and then "
               "frees it (state kept by replacing a handle); it will be traced on every call. "
               "Keep such state in one tensor and update it with lz_assign",
               lz_shape_str(shape, freed->node->ndim, freed->node->shape),
               lz_dtype_name((lz_dtype)freed->node->dtype));
    f->fallback = 1;
    lz_counters.capture_fallbacks++;
    lz_capture_clear(tr);
}

/* A steady trace becomes tr's capture: its graph cut and compiled, the
   capture bound to it in place of the one tr held, and this call's step
   executed. Under LZ_CAPTURE_CHECK (checking) the new trace is compared
   with the capture first. */
static int capture_steady(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out, const char *kept,
                          snapshot *s, uint64_t serial0, int checking)
{
    lz_tensor **live = NULL;
    int n_live = 0;
    lz_graph g;
    lz_executable *exe;
    if (cut_and_compile(f, out, s, &g, &exe, &live, &n_live))
        return lz_capture_run_uncaptured(f, out, serial0, s);
    /* LZ_CAPTURE_CHECK: what each slot was read from, compared by identity
       once bound anew (every tensor bound now was alive before the old
       capture is dropped, so no address is reused) */
    const void **was = NULL;
    int n_was = checking && tr->captured ? tr->n_slots : 0;
    int rc = 0;
    if (!exe) {
        lz_capture_release_snapshot(s);
        rc = lz_execute_graph(&g, NULL);   /* fails the roots: nothing stays pending */
    } else if (checking && tr->captured && !(was = lz_capture_check_before(tr, &g, exe))) {
        rc = -1;
    }
    if (rc != 0) {
        lz_graph_release(&g);
        free(live);
        drop_made_outputs(f, out, serial0);
        return rc;
    }
    lz_capture_clear(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    tr->exe = exe;
    exe->pinned++;
    lz_tensor *freed = NULL;
    int bound = lz_capture_bind(f, tr, &g, exe, in, out, kept, s, live, n_live, &freed);
    free(live);
    if (was && bound == 0 && lz_capture_check_after(tr, &g, was, n_was)) {
        free(was);
        lz_graph_release(&g);
        tr->captured = 1;
        drop_made_outputs(f, out, serial0);
        return -1;
    }
    free(was);
    if (bound == 1) refuse_freed_state(f, tr, freed);
    else if (bound == 0) warn_host_values(f, tr);
    lz_capture_release_snapshot(s);
    rc = lz_execute_step_graph(&g, exe);
    lz_graph_release(&g);
    tr->captured = rc == 0 && bound == 0;
    if (bound < 0) lz_capture_clear(tr);
    if (rc != 0) drop_made_outputs(f, out, serial0);
    return rc;
}

/* A trace that made state the next call finds made runs as a warm-up: its
   roots as one lazy step, cut as the capture that follows cuts them. */
static int warm_up(const lz_fn *f, trace *tr, lz_tensor **out, snapshot *s, uint64_t serial0)
{
    /* without its leaves recorded, the next call warms up again */
    tr->warmed_up = lz_capture_record_leaves(tr, s, NULL, 0) == 0;
    tr->leaf_epoch = lz_requires_grad_changes();
    lz_node **roots = NULL;
    int n_roots = lz_capture_trace_roots(f, out, s->epoch, &roots, NULL, NULL);
    if (n_roots < 0) return lz_capture_run_uncaptured(f, out, serial0, s);
    lz_capture_release_snapshot(s);
    int rc = n_roots > 0 ? lz_run_roots(roots, n_roots) : 0;
    free(roots);
    if (rc != 0) { fail_pending(); drop_made_outputs(f, out, serial0); }
    return rc;
}

/* What a traced call that ran becomes: a graph break (traced on every call
   from now on), the lazy step it recorded (short of memory to capture it),
   a warm-up, or tr's capture (tr NULL: a new trace for its key). */
static int after_run(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out, const char *kept,
                     snapshot *s, uint64_t serial0, int checking, const char *break_reason)
{
    if (break_reason) {
        lz_warning("the captured step function calls %s while it is traced (a graph break); it "
                   "will be traced on every call", break_reason);
        f->fallback = 1;
        lz_counters.capture_fallbacks++;
        return lz_capture_run_uncaptured(f, out, serial0, s);
    }
    /* a tensor made here from host memory went unnoted: not bindable */
    if (lz_capture_notes_lost()) return lz_capture_run_uncaptured(f, out, serial0, s);
    if (!tr && !(tr = lz_capture_new_trace(f, in, s->inbuf)))
        return lz_capture_run_uncaptured(f, out, serial0, s);
    if (lz_capture_internal_state_made() || (!tr->warmed_up && !lz_capture_trace_is_steady(s, out, f->n_out)))
        return warm_up(f, tr, out, s, serial0);
    tr->warmed_up = 1;
    return capture_steady(f, tr, in, out, kept, s, serial0, checking);
}

/* A call traced (tr: the trace its key found, or NULL): the function run
   and what it recorded executed, as a capture of tr where it can be. 0, or
   -1 with the error set, as lz_call. */
int lz_capture_trace(lz_fn *f, trace *tr, lz_tensor *const *in, lz_tensor **out, int checking)
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
    if (lz_capture_take_snapshot(&s, in, f->n_in)) return -1;
    char kept_small[16], *kept = f->n_out <= 16 ? kept_small : lz_host_malloc((size_t)f->n_out);
    if (!kept) {
        lz_capture_drop_snapshot(&s);
        return lz_errorf_int("lz_call: out of memory starting a trace of %d outputs", f->n_out);
    }
    lz_trace_begin();
    lz_capture_notes_begin();
    int rc = lz_capture_run_function(f, in, out, kept);
    lz_autocast_cache_clear();   /* not outputs of the trace */
    const char *break_reason = lz_trace_end();
    if (rc == 0) rc = after_run(f, tr, in, out, kept, &s, serial0, checking, break_reason);
    lz_capture_notes_end();
    lz_capture_drop_snapshot(&s);
    if (kept != kept_small) free(kept);
    return rc;
}
