/* How a kernel walks an operand: the strides that read it broadcast to
 * the output's shape, in the output's element order (plain, or
 * channel-blocked). The element-wise, fused and shape kernels share them. */
#include "backends/cpu/kernels.h"

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
