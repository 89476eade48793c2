/* Helpers shared by the composed neural-network ops (layer norm, attention,
 * dropout). */
#ifndef LZ_OPS_NN_INTERNAL_H
#define LZ_OPS_NN_INTERNAL_H

#include "engine/tensor.h"

/* A 0-d f32 data tensor holding value, owned by the library and shared by
   every caller asking for the same value (borrowed: do not free). A
   hyperparameter such as layer norm's eps is data, not a baked constant,
   and a shared tensor costs no transfer per call and binds to a capture
   as state that stays alive. NULL + error if it cannot be made. */
lz_tensor *lz_nn_const_scalar(float value);

/* A new handle on x's node (no IR recorded) whose gradient passes straight
   to x. A tensor of its own with its own record (an lz_retain handle
   would share x's), in the current scope like any op's result. */
lz_tensor *lz_nn_alias(const char *name, lz_tensor *x);

/* lz_shutdown: drop the library's handles on the shared scalars and on the
   random generator's state (a capture that binds one keeps its own
   reference); the next use makes them again. */
void lz_nn_consts_shutdown(void);
void lz_random_shutdown(void);
/* The random generator's state tensors (made on first use), borrowed:
   what lz_rng_state (nn/rng_state.c) names in a parameter set. 0, or -1
   with the error set. */
int  lz_random_state(lz_tensor **seed, lz_tensor **counter);

#endif
