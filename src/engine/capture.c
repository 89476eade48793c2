/* The capture API's entry points (lz_capture, lz_call, lz_fn_free) and
 * the flow of a call: run directly, replay the trace its key finds while
 * the guard holds, or trace (capture_internal.h: how the files fit). */
#include "engine/capture_internal.h"

#include <stdlib.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/thread.h"
#include "engine/step.h"

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
        lz_capture_free_trace(tr);
    }
    free(f);
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
    int rc = lz_capture_run_function(f, in, out, NULL);
    return rc == 0 ? lz_capture_run_uncaptured(f, out, serial0, NULL) : rc;
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
    while (tr && !lz_capture_key_matches(f, tr, in)) tr = tr->next;
    int64_t every = lz_capture_check_every();
    int check = every > 0 && f->calls % every == 0;
    if (tr && tr->captured && !check && lz_capture_guard_holds(tr, in))
        return lz_capture_replay(f, tr, in, out);
    return lz_capture_trace(f, tr, in, out, check && tr && tr->captured && lz_capture_guard_holds(tr, in));
}
