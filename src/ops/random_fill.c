/* lz_from_random_opt: lz_from_random's fill with its distribution
 * named and its parameters in an options struct. */
#include <math.h>

#include "lazyc.h"
#include "base/error.h"
#include "base/opt_or.h"

/* 0, or -1 with an error naming fn: a field the distribution does not
   read would be a silent mistake, so it is refused. */
static int check_opts(const char *fn, lz_random_opts o, float high, float std)
{
    if (o.dist == LZ_RANDOM_UNIFORM) {
        if (o.mean != 0.0f || o.std != 0.0f)
            return lz_errorf_int("%s: mean and std are for LZ_RANDOM_NORMAL; uniform reads low "
                                 "and high", fn);
        if (!isfinite(o.low) || !isfinite(high) || o.low > high)
            return lz_errorf_int("%s: invalid uniform range [%g, %g): low and high must be "
                                 "finite, low <= high", fn, (double)o.low, (double)high);
        return 0;
    }
    if (o.dist == LZ_RANDOM_NORMAL) {
        if (o.low != 0.0f || o.high != 0.0f)
            return lz_errorf_int("%s: low and high are for LZ_RANDOM_UNIFORM; normal reads mean "
                                 "and std", fn);
        if (!isfinite(o.mean) || !isfinite(std) || std < 0.0f)
            return lz_errorf_int("%s: invalid normal mean %g, std %g: both finite, std >= 0", fn,
                                 (double)o.mean, (double)std);
        return 0;
    }
    return lz_errorf_int("%s: dist %d is neither LZ_RANDOM_UNIFORM (0) nor LZ_RANDOM_NORMAL (1)",
                         fn, (int)o.dist);
}

lz_tensor *lz_from_random_opt(int ndim, const int64_t *shape, lz_random_opts o)
{
    const char *fn = "lz_from_random_opt";
    /* zero fields: torch.rand's [0, 1) and torch.randn's standard normal */
    float high = lz_opt_or(o.high, 1.0f), std = lz_opt_or(o.std, 1.0f);
    if (check_opts(fn, o, high, std) != 0)
        return NULL;
    int uniform = o.dist == LZ_RANDOM_UNIFORM;
    lz_tensor *t = lz_from_random(o.seed, (int)o.dist, uniform ? o.low : o.mean,
                                  uniform ? high : std, ndim, shape);
    if (!t)
        lz_error_rename("lz_from_random", fn);
    return t;
}
