/* Options structs' zero fields: 0 means the default, LZ_OPT_ZERO a real 0
 * (lazyc.h, "Options fields"). */
#ifndef LZ_OPT_OR_H
#define LZ_OPT_OR_H

#include "lazyc.h"

/* v, with 0 read as dflt and LZ_OPT_ZERO as an explicit 0. */
static inline float lz_opt_or(float v, float dflt)
{
    return v == 0.0f ? dflt : v == LZ_OPT_ZERO ? 0.0f : v;
}

#endif
