/* Parameter initialisation like PyTorch's defaults, from a seeded
 * generator (the values differ from torch's; the distributions match). */
#ifndef LZ_INIT_H
#define LZ_INIT_H

#include "lazyc.h"

typedef struct lz_init_rng { uint64_t s; } lz_init_rng;

/* uniform(-bound, bound), added to p under name as a trainable parameter;
   returns the tensor (borrowed from p), NULL + error on failure. */
lz_tensor *lz_init_uniform(lz_params *p, lz_init_rng *r, const char *name,
                           int ndim, const int64_t *shape, float bound);
/* normal(0, std) (Box-Muller), trainable. */
lz_tensor *lz_init_normal(lz_params *p, lz_init_rng *r, const char *name,
                          int ndim, const int64_t *shape, float std);
/* A constant tensor (ones for norm weights, zeros for biases and running
   means, ones for running vars): trainable or a buffer. */
lz_tensor *lz_init_const(lz_params *p, const char *name, lz_dtype dtype,
                         int ndim, const int64_t *shape, double value, int trainable);
/* kaiming_uniform(a=sqrt(5)) as nn.Linear/nn.Conv2d use: bound 1/sqrt(fan_in). */
static inline float lz_init_default_bound(int64_t fan_in) { return fan_in > 0 ? 1.0f / __builtin_sqrtf((float)fan_in) : 0.0f; }

#endif
