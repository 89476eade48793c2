#include "init.h"

#include <math.h>
#include <stdlib.h>

static double next_unit(lz_init_rng *r)
{
    /* xorshift64*: enough for initial weights, reproducible everywhere */
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return (double)((r->s * 0x2545F4914F6CDD1Dull) >> 11) / (double)(1ull << 53);
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static lz_tensor *add_host(lz_params *p, const char *name, const float *v, int ndim, const int64_t *shape, int trainable)
{
    lz_tensor *t = lz_from_host(v, LZ_F32, ndim, shape);
    return t ? lz_params_add(p, name, t, trainable) : NULL;
}

lz_tensor *lz_init_uniform(lz_params *p, lz_init_rng *r, const char *name,
                           int ndim, const int64_t *shape, float bound)
{
    int64_t n = numel(ndim, shape);
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = (float)((2 * next_unit(r) - 1) * bound);
    lz_tensor *t = add_host(p, name, v, ndim, shape, 1);
    free(v);
    return t;
}

lz_tensor *lz_init_normal(lz_params *p, lz_init_rng *r, const char *name,
                          int ndim, const int64_t *shape, float std)
{
    int64_t n = numel(ndim, shape);
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) {
        double u1 = next_unit(r), u2 = next_unit(r);
        v[i] = (float)(std * sqrt(-2 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(2 * M_PI * u2));
    }
    lz_tensor *t = add_host(p, name, v, ndim, shape, 1);
    free(v);
    return t;
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
