/* lazyc_optim: one interface over every optimizer.
 *
 * An lz_optimizer is made by one of the constructors below and then used
 * through the same calls whatever it is, so a training loop (or the CLI)
 * names the optimizer once. Each constructor takes the options struct of
 * lazyc.h (lz_sgd_opts, lz_adamw_opts) and behaves as its lz_*_new does:
 * the same checks, the same updates to the bit. The per-optimizer calls of
 * lazyc.h (lz_sgd_*, lz_adamw_*) stay as they are.
 *
 * Every call refuses a NULL optimizer with an error naming the call;
 * step, zero_grad and set_lr also refuse a call from a thread other than
 * the recording one (docs/threads.md). */
#ifndef LAZYC_OPTIM_H
#define LAZYC_OPTIM_H

#include "lazyc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_optimizer lz_optimizer;

/* torch.optim.SGD, as lz_sgd_new. */
LZ_API lz_optimizer *lz_optimizer_sgd(lz_tensor *const *params, int n, lz_sgd_opts opts);
/* torch.optim.AdamW (opts.decoupled = 1) or Adam, as lz_adamw_new. */
LZ_API lz_optimizer *lz_optimizer_adamw(lz_tensor *const *params, int n, lz_adamw_opts opts);

/* Records the update of every parameter that has a gradient (one without
   is skipped, as torch does). All or nothing: on -1 no tensor changed. */
LZ_API int          lz_optimizer_step(lz_optimizer *opt);
/* Drops every parameter's gradient. */
LZ_API void         lz_optimizer_zero_grad(lz_optimizer *opt);
/* A new rate is new data in the rate's 0-d tensor: never a new graph.
   0 is 0; a negative or non-finite rate is refused (-1, the rate stays). */
LZ_API int          lz_optimizer_set_lr(lz_optimizer *opt, float lr);
/* The current rate; NAN and an error for a NULL optimizer. */
LZ_API float        lz_optimizer_lr(const lz_optimizer *opt);
/* Adds new handles of the state tensors to `into` as prefix.NAME
   (non-trainable; the names of lz_sgd_state and lz_adamw_state). Loading
   values into them (lz_safetensors_load) restores the optimizer. */
LZ_API int          lz_optimizer_state(lz_optimizer *opt, lz_params *into, const char *prefix);
/* "sgd", "adam" or "adamw"; NULL and an error for a NULL optimizer. */
LZ_API const char  *lz_optimizer_name(const lz_optimizer *opt);
/* Frees the optimizer and its state, and drops its references to the
   parameters; NULL is ignored. */
LZ_API void         lz_optimizer_free(lz_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
