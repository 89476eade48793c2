#include "init.h"

#include <math.h>

/* Each tensor draws from its own stream of the counter-based generator
   (lz_from_random): the stream is the state, which then steps on, so the
   values of a tensor depend on the seed and its place in the model, never
   on the thread count. */
static uint64_t next_stream(lz_init_rng *r)
{
    uint64_t s = r->s;
    r->s += 0x9E3779B97F4A7C15ull;
    return s;
}

static lz_tensor *add_random(lz_params *p, lz_init_rng *r, const char *name, lz_random_dist dist,
                             float a, float b, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_from_random(next_stream(r), dist, a, b, ndim, shape);
    return t ? lz_params_add(p, name, t, 1) : NULL;
}

lz_tensor *lz_init_uniform(lz_params *p, lz_init_rng *r, const char *name,
                           int ndim, const int64_t *shape, float bound)
{
    return add_random(p, r, name, LZ_RANDOM_UNIFORM, -bound, bound, ndim, shape);
}

lz_tensor *lz_init_normal(lz_params *p, lz_init_rng *r, const char *name,
                          int ndim, const int64_t *shape, float std)
{
    return add_random(p, r, name, LZ_RANDOM_NORMAL, 0.0f, std, ndim, shape);
}

lz_tensor *lz_init_const(lz_params *p, const char *name, lz_dtype dtype,
                         int ndim, const int64_t *shape, double value, int trainable)
{
    lz_tensor *t = lz_full(dtype, ndim, shape, value);
    return t ? lz_params_add(p, name, t, trainable) : NULL;
}

float lz_init_default_bound(int64_t fan_in)
{
    return fan_in > 0 ? 1.0f / sqrtf((float)fan_in) : 0.0f;
}
