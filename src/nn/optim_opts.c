#include "nn/optim_opts.h"

#include "core/error.h"
#include "core/tensor.h"

int lz_optim_check_params(const char *fn, lz_tensor *const *params, int n)
{
    if (n < 0)
        return lz_errorf_int("%s: negative parameter count %d", fn, n);
    if (n > 0 && !params)
        return lz_errorf_int("%s: %d parameters given with a NULL array", fn, n);
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return lz_errorf_int("%s: parameter %d is NULL", fn, i);
        if (lz_tensor_dtype(params[i]) != LZ_F32)
            return lz_errorf_int("%s: parameter %d is %s, expected f32", fn, i,
                                 lz_dtype_name(lz_tensor_dtype(params[i])));
        /* it would never get a gradient, so the step would silently skip it */
        if (!params[i]->requires_grad)
            return lz_errorf_int("%s: parameter %d does not require grad (call "
                                 "lz_requires_grad(t, 1), or leave a frozen tensor out)", fn, i);
        /* twice in the list would be updated twice per step */
        for (int j = 0; j < i; j++)
            if (params[j] == params[i])
                return lz_errorf_int("%s: parameter %d is parameter %d again", fn, i, j);
    }
    return 0;
}
