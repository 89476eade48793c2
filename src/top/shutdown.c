/* lz_shutdown: each part of the library releases its own global state
 * (its *_shutdown function); this file only orders the calls. The executor
 * goes first, since finished executions hand buffers and executables back;
 * the backend's memory cache goes last, since everything before it frees
 * into it. Nothing here frees a handle the caller holds. */
#include "lazyc.h"

#include "autograd/autograd.h"
#include "backend/memory.h"
#include "base/error.h"
#include "base/thread.h"
#include "engine/autocast.h"
#include "engine/cache.h"
#include "engine/step.h"
#include "engine/tensor.h"
#include "ops/nn_internal.h"
#include "runtime/executor.h"

void lz_shutdown(void)
{
    if (lz_owner_check("lz_shutdown")) return;
    if (lz_capture_tracing()) {
        lz_errorf("lz_shutdown: called from a step function that is being traced; "
                  "nothing was shut down");
        return;
    }
    lz_executor_shutdown();
    lz_autocast_shutdown();   /* its cached casts before the scopes go */
    lz_scope_shutdown();
    lz_autograd_shutdown();
    lz_nn_consts_shutdown();
    lz_random_shutdown();
    lz_cache_clear();
    lz_cache_set_capacity(0);   /* LZ_CACHE_CAPACITY is read again */
    lz_step_shutdown();
    lz_device_trim();
    lz_metrics_reset();
    lz_profile_enable(0);
    lz_profile_reset();
    lz_clear_error();
    lz_owner_release();   /* any thread may record next */
}
