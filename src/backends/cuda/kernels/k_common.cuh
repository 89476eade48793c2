/* What every CUDA kernel source of the backend includes (NVRTC compiles
 * each family file, k_*.cu, and the generated element-wise source with
 * this header): bf16 conversions with lazyc's rounding, grid-stride
 * loops, warp and block reductions, and the status word for bad data. */
#ifndef LZ_CU_K_COMMON_CUH
#define LZ_CU_K_COMMON_CUH

#include "k_args.h"

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define LZ_INF __int_as_float(0x7f800000)
#define LZ_NAN __int_as_float(0x7fffffff)

/* base/bf16.h's rounding, on the bits: to nearest, ties to even; NaN stays
   a quiet NaN with its sign and upper payload (the hardware's conversion
   gives a canonical NaN), so both devices store the same bits */
static __device__ __forceinline__ u16 lz_f32_to_bf16(float f)
{
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

static __device__ __forceinline__ float lz_bf16_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }

/* i over [0, n) in steps of the whole grid */
#define LZ_GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

static __device__ __forceinline__ float lz_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double lz_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max that lets NaN win, as torch.amax */
static __device__ __forceinline__ float lz_nan_max(float a, float b) { return (b != b || b > a) ? b : a; }

/* max ignoring NaN, as the CPU's softmax row max (fmaxf) */
static __device__ __forceinline__ float lz_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024);
   every thread gets the result. sh: 32 floats of shared memory. */
static __device__ __forceinline__ float lz_block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = lz_warp_sum(v);
    __syncthreads();   /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return lz_warp_sum(v);
}

static __device__ __forceinline__ double lz_block_sum_d(double v, double *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = lz_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return lz_warp_sum_d(v);
}

static __device__ __forceinline__ float lz_block_max(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = lz_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -LZ_INF;
    return lz_warp_max(v);
}

/* The first bad datum of a run wins; later ones are dropped. */
static __device__ void lz_report(lz_cu_status *st, int code, i64 what, i64 value, i64 limit)
{
    if (!st) return;
    if (atomicCAS(&st->code, 0, -1) == 0) {
        st->what = what;
        st->value = value;
        st->limit = limit;
        __threadfence_system();
        atomicExch(&st->code, code);
    }
}

static __device__ __forceinline__ i64 lz_index_at(const void *idx, int is64, i64 i)
{
    return is64 ? ((const i64 *)idx)[i] : (i64)((const int *)idx)[i];
}

#endif
