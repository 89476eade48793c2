/* The CPU kernel table: an op's kernel is the first that a family's
 * lookup hands out. */
#include "backends/cpu/kernels.h"

lz_kernel lz_cpu_kernel_for(lz_op op)
{
    lz_kernel (*const families[])(lz_op) = {
        lz_cpu_elementwise_kernel, lz_cpu_reduce_kernel, lz_cpu_shape_kernel,
        lz_cpu_linalg_kernel, lz_cpu_misc_kernel, lz_cpu_nn_kernel, lz_cpu_conv_kernel,
        lz_cpu_batch_norm_kernel, lz_cpu_layer_norm_kernel, lz_cpu_fused_kernel,
        lz_cpu_dist_kernel, lz_cpu_index_kernel, lz_cpu_loss_ext_kernel,
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
