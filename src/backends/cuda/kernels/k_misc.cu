/* Kernels without much arithmetic: fills, conversions, strided gathers
 * (permute, expand), hardtanh, embedding and the generator's counter. */
#include "k_common.cuh"

extern "C" __global__ void lz_fill(const lz_cu_fill_args a)
{
    if (a.width == 2) {
        u16 v = (u16)a.value;
        LZ_GRID_LOOP(i, a.n) ((u16 *)a.dst)[i] = v;
    } else if (a.width == 4) {
        u32 v = (u32)a.value;
        LZ_GRID_LOOP(i, a.n) ((u32 *)a.dst)[i] = v;
    } else if (a.width == 8) {
        LZ_GRID_LOOP(i, a.n) ((u64 *)a.dst)[i] = a.value;
    } else {
        unsigned char v = (unsigned char)a.value;
        LZ_GRID_LOOP(i, a.n) ((unsigned char *)a.dst)[i] = v;
    }
}

extern "C" __global__ void lz_to_bf16(const lz_cu_convert_args a)
{
    const float *s = (const float *)a.src;
    u16 *d = (u16 *)a.dst;
    LZ_GRID_LOOP(i, a.n) d[i] = lz_f32_to_bf16(s[i]);
}

/* a bf16 product (cuDNN's) widened into the float32 result lazyc defines */
extern "C" __global__ void lz_widen_bf16(const lz_cu_convert_args a)
{
    const u16 *s = (const u16 *)a.src;
    float *d = (float *)a.dst;
    LZ_GRID_LOOP(i, a.n) d[i] = lz_bf16_to_f32(s[i]);
}

extern "C" __global__ void lz_gather(const lz_cu_gather_args a)
{
    LZ_GRID_LOOP(e, a.numel) {
        i64 r = e, off = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            const i64 n = a.size[d];
            off += (r % n) * a.stride[d];
            r /= n;
        }
        if (a.to_bf16) ((u16 *)a.dst)[e] = lz_f32_to_bf16(((const float *)a.src)[off]);
        else if (a.esize == 4) ((u32 *)a.dst)[e] = ((const u32 *)a.src)[off];
        else if (a.esize == 8) ((u64 *)a.dst)[e] = ((const u64 *)a.src)[off];
        else ((u16 *)a.dst)[e] = ((const u16 *)a.src)[off];
    }
}

/* NaN passes through, as in torch (backends/cpu/activation.h's rules) */
extern "C" __global__ void lz_hardtanh(const lz_cu_hardtanh_args a)
{
    LZ_GRID_LOOP(i, a.n) {
        const float x = a.x[i];
        a.y[i] = x < a.lo ? a.lo : x > a.hi ? a.hi : x;
    }
}

/* torch's rule: 0 at the bounds as well as outside */
extern "C" __global__ void lz_hardtanh_grad(const lz_cu_hardtanh_args a)
{
    LZ_GRID_LOOP(i, a.n) {
        const float x = a.x[i];
        a.y[i] = (x > a.lo) & (x < a.hi) ? a.g[i] : 0.0f;
    }
}

/* one thread per output element; a bad index reports and writes NaN */
extern "C" __global__ void lz_embedding(const lz_cu_embedding_args a)
{
    LZ_GRID_LOOP(e, a.n * a.d) {
        const i64 i = e / a.d, c = e - i * a.d;
        const i64 k = lz_index_at(a.idx, a.is64, i);
        if (k < 0 || k >= a.rows) {
            if (c == 0) lz_report(a.status, LZ_CU_BAD_EMBEDDING, i, k, a.rows);
            a.out[e] = LZ_NAN;
            continue;
        }
        a.out[e] = a.w_or_g[k * a.d + c];
    }
}

/* dw (zeroed before) += each g row at its index's row. atomicAdd: rows
   hit by several indices sum in an order that may change between runs. */
extern "C" __global__ void lz_embedding_grad(const lz_cu_embedding_args a)
{
    LZ_GRID_LOOP(e, a.n * a.d) {
        const i64 i = e / a.d, c = e - i * a.d;
        const i64 k = lz_index_at(a.idx, a.is64, i);
        if (k < 0 || k >= a.rows) {
            if (c == 0) lz_report(a.status, LZ_CU_BAD_EMBEDDING_GRAD, i, k, a.rows);
            continue;
        }
        atomicAdd(&a.out[k * a.d + c], a.w_or_g[e]);
    }
}

extern "C" __global__ void lz_rng_advance(const lz_cu_rng_advance_args a)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) a.out[0] = a.in[0] + a.add;
}
