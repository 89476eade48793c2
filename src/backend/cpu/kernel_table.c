#include "backend/cpu/kernels.h"

lz_kernel lz_cpu_kernel_for(lz_op op)
{
    lz_kernel (*const families[])(lz_op) = {
        lz_cpu_elementwise_kernel, lz_cpu_reduce_kernel, lz_cpu_shape_kernel,
        lz_cpu_linalg_kernel, lz_cpu_misc_kernel, lz_cpu_nn_kernel, lz_cpu_conv_kernel,
        lz_cpu_batch_norm_kernel, lz_cpu_fused_kernel,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        lz_kernel k = families[i](op);
        if (k) return k;
    }
    return NULL;
}

const lz_stateful_kernel *lz_cpu_stateful_kernel_for(lz_op op)
{
    return lz_cpu_dnnl_conv_kernel(op);
}

void lz_broadcast_strides(const lz_value *in, const lz_value *out, int64_t *strides)
{
    int off = out->ndim - in->ndim;
    int64_t s = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        int id = d - off;
        if (id < 0) { strides[d] = 0; continue; }
        strides[d] = in->shape[id] == 1 && out->shape[d] != 1 ? 0 : s;
        s *= in->shape[id];
    }
}
