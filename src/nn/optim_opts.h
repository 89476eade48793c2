/* What the optimizers' constructors share: reading an options field whose
 * zero means torch's default, and checking the parameter list. */
#ifndef LZ_OPTIM_OPTS_H
#define LZ_OPTIM_OPTS_H

#include "lazyc.h"

/* v, with 0 read as dflt and LZ_OPT_ZERO as an explicit 0. */
static inline float lz_opt_or(float v, float dflt)
{
    return v == 0.0f ? dflt : v == LZ_OPT_ZERO ? 0.0f : v;
}

/* 0, or -1 with an error naming fn and the parameter: a NULL array or
   entry, a dtype other than f32, a tensor that does not require grad, or
   one listed twice. */
int lz_optim_check_params(const char *fn, lz_tensor *const *params, int n);

#endif
