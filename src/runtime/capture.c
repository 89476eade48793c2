/* Capture and replay (issue 3): not yet built; calls fail cleanly. */
#include "core/error.h"

lz_fn *lz_capture(lz_step_fn fn, void *ctx, int n_in, int n_out)
{
    (void)fn; (void)ctx; (void)n_in; (void)n_out;
    return lz_errorf("lz_capture: not implemented yet");
}

int lz_call(lz_fn *f, lz_tensor *const *in, lz_tensor **out)
{
    (void)f; (void)in; (void)out;
    return lz_errorf_int("lz_call: not implemented yet");
}

void lz_fn_free(lz_fn *f) { (void)f; }
