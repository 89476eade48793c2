/* oneDNN gives a weight gradient in its blocked weight layout, OIhw16i16o
 * with AVX-512 (OIhw8i8o below): per pair of 16-channel blocks (output o,
 * input i), the taps, then 16 i, then 16 o innermost. Its reorder back to
 * the program's OIHW wrote at a quarter of memory speed wherever a plain
 * row (I * taps floats) is 4 KiB or a larger power of two, as the 16 rows
 * of an output block then fall into one cache set, as in resnet50's last
 * stage (docs/performance.md, "Weight gradients out of blocks"). Here each pair of blocks is turned
 * around in a local tile and written out a whole plain row at a time. */
#include "backends/cpu/weight_unblock.h"

#include <string.h>

#include "backends/cpu/kernels.h"

int lz_cpu_unblock_fits(const dnnl_memory_desc_t *md)
{
    if (md->ndims != 4 || md->data_type != dnnl_f32 || md->format_kind != dnnl_blocked ||
        md->offset0 != 0)
        return 0;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    const int64_t b = bd->inner_nblks == 2 ? bd->inner_blks[0] : 0;
    if ((b != 16 && b != 8) || bd->inner_blks[1] != b || bd->inner_idxs[0] != 1 ||
        bd->inner_idxs[1] != 0)
        return 0;
    const int64_t O = md->dims[0], I = md->dims[1], H = md->dims[2], W = md->dims[3];
    if (O % b || I % b || H * W > LZ_UNBLOCK_MAX_TAPS) return 0;
    for (int d = 0; d < 4; d++)
        if (md->padded_dims[d] != md->dims[d]) return 0;
    /* dense: O blocks, I blocks, H, W, then the b x b tile */
    const int64_t want[4] = {I / b * H * W * b * b, H * W * b * b, W * b * b, b * b};
    for (int d = 0; d < 4; d++)
        if (bd->strides[d] != want[d]) return 0;
    return (int)b;
}

void lz_cpu_weight_unblock(const float *src, float *dst, int64_t O, int64_t I, int64_t taps, int b)
{
    const int64_t nob = O / b, nib = I / b, tile = (int64_t)b * b * taps;
    LZ_PAR_FOR(nob * nib > 1 && O * I * taps > 16384, q, nob * nib, {
        const int64_t ob = q / nib, ib = q % nib;
        const float *t = src + q * tile;
        float *d0 = dst + (ob * b * I + ib * b) * taps;
        if (taps == 1) {
            for (int o = 0; o < b; o++)
                for (int i = 0; i < b; i++) d0[o * I + i] = t[i * b + o];
        } else {
            float loc[16 * 16 * LZ_UNBLOCK_MAX_TAPS];
            for (int64_t s = 0; s < taps; s++)
                for (int i = 0; i < b; i++)
                    for (int o = 0; o < b; o++) loc[(o * b + i) * taps + s] = t[(s * b + i) * b + o];
            for (int o = 0; o < b; o++)
                memcpy(d0 + o * I * taps, loc + o * b * taps, sizeof(float) * (size_t)(b * taps));
        }
    });
}
