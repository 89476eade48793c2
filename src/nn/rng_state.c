/* lz_rng_state: the random generator's state as named parameters, so a
 * checkpoint saves and restores it. On the nn floor with parameter sets;
 * the generator itself is an op (ops/random.c), a floor below. */
#include <stdio.h>

#include "base/error.h"
#include "ops/nn_internal.h"

int lz_rng_state(lz_params *into, const char *prefix)
{
    if (!into || !prefix) return lz_errorf_int("lz_rng_state: NULL argument");
    lz_tensor *seed, *counter;
    if (lz_random_state(&seed, &counter) != 0) return -1;
    char name[512];
    snprintf(name, sizeof name, "%s.seed", prefix);
    if (!lz_params_add(into, name, lz_retain(seed), 0)) return -1;
    snprintf(name, sizeof name, "%s.counter", prefix);
    return lz_params_add(into, name, lz_retain(counter), 0) ? 0 : -1;
}
