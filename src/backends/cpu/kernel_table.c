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

int lz_order_strides(const lz_value *in, const lz_value *out, int64_t *shape, int64_t *st)
{
    const int64_t b = out->block;
    if (!b) {
        for (int d = 0; d < out->ndim; d++) shape[d] = out->shape[d];
        lz_broadcast_strides(in, out, st);
        return out->ndim;
    }
    const int64_t H = out->shape[2], W = out->shape[3];
    shape[0] = out->shape[0];
    shape[1] = out->shape[1] / b;
    shape[2] = H;
    shape[3] = W;
    shape[4] = b;
    if (in->block) {   /* the group's own layout: contiguous */
        const int64_t c[5] = {shape[1] * H * W * b, H * W * b, W * b, b, 1};
        for (int d = 0; d < 5; d++) st[d] = c[d];
        return 5;
    }
    int64_t full[LZ_MAX_DIMS];
    lz_broadcast_strides(in, out, full);
    st[0] = full[0];
    st[1] = full[1] * b;   /* a block of channels, then the lane inside it */
    st[2] = full[2];
    st[3] = full[3];
    st[4] = full[1];
    return 5;
}
