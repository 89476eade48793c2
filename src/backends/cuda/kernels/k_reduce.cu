/* SUM, MEAN and MAX over any set of axes (host side: f_reduce.c).
 *
 * The source is folded into kept and reduced axes; output j reads the
 * source at kept_offset(j) + red_offset(r). When the innermost axis is
 * reduced (rows), a warp folds each output's elements, lanes on adjacent
 * ones; when it is kept (cols: a bias gradient), a thread folds each
 * output, adjacent threads on adjacent outputs. Either way reads are
 * coalesced. A long reduction with few outputs is cut into `splits`
 * ranges whose partials a second kernel combines in split order.
 * Accumulators are 8 bytes, as the CPU's: double for f32, int64 for
 * integers (which wrap, as in torch); NaN wins a max. */
#include "k_common.cuh"

static __device__ __forceinline__ i64 kept_offset(const lz_cu_reduce_args &a, i64 j)
{
    i64 off = 0;
    for (int d = a.nk - 1; d >= 0; d--) {
        off += (j % a.ksize[d]) * a.kstride[d];
        j /= a.ksize[d];
    }
    return off;
}

static __device__ __forceinline__ i64 red_offset(const lz_cu_reduce_args &a, i64 r)
{
    if (a.nr == 1) return r * a.rstride[0];
    i64 off = 0;
    for (int d = a.nr - 1; d >= 0; d--) {
        off += (r % a.rsize[d]) * a.rstride[d];
        r /= a.rsize[d];
    }
    return off;
}

static __device__ __forceinline__ double red_init(int op, double) { return op == LZ_CU_RED_MAX ? -LZ_INF : 0.0; }
static __device__ __forceinline__ i64 red_init(int op, i64) { return op == LZ_CU_RED_MAX ? (i64)(1ull << 63) : 0; }

static __device__ __forceinline__ double red_comb(int op, double acc, double v)
{
    if (op == LZ_CU_RED_MAX) return (v != v || v > acc) ? v : acc;
    return acc + v;
}

static __device__ __forceinline__ i64 red_comb(int op, i64 acc, i64 v)
{
    if (op == LZ_CU_RED_MAX) return v > acc ? v : acc;
    return (i64)((u64)acc + (u64)v);
}

template <typename A> static __device__ __forceinline__ A warp_comb(int op, A v)
{
    for (int o = 16; o > 0; o >>= 1) v = red_comb(op, v, (A)__shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* the type the integer minimum of a max starts from: an i32 max over
   nothing is INT32_MIN on the CPU */
static __device__ __forceinline__ void red_store(const lz_cu_reduce_args &a, i64 j, double acc)
{
    const double v = a.op == LZ_CU_RED_MEAN ? acc * a.scale : acc;
    ((float *)a.y)[j] = (float)v;
}

static __device__ __forceinline__ void red_store(const lz_cu_reduce_args &a, i64 j, i64 acc)
{
    if (a.dtype == 1) ((i64 *)a.y)[j] = acc;
    else ((int *)a.y)[j] = (a.op == LZ_CU_RED_MAX && acc == (i64)(1ull << 63)) ? (int)0x80000000u : (int)acc;
}

static __device__ __forceinline__ void red_out(const lz_cu_reduce_args &a, i64 j, i64 s, double acc)
{
    if (a.splits > 1) a.partial[s * a.K + j] = acc;
    else red_store(a, j, acc);
}

/* integers never split (host side) */
static __device__ __forceinline__ void red_out(const lz_cu_reduce_args &a, i64 j, i64, i64 acc)
{
    red_store(a, j, acc);
}

template <typename T, typename A> static __device__ void rows(const lz_cu_reduce_args &a)
{
    const int lane = threadIdx.x & 31;
    const i64 items = a.K * a.splits, w0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 nw = ((i64)gridDim.x * blockDim.x) >> 5;
    const T *x = (const T *)a.x;
    for (i64 it = w0; it < items; it += nw) {   /* uniform across the warp */
        const i64 j = it % a.K, s = it / a.K;
        const i64 base = kept_offset(a, j), r0 = s * a.chunk;
        const i64 r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
        A acc = red_init(a.op, (A)0);
        for (i64 r = r0 + lane; r < r1; r += 32) acc = red_comb(a.op, acc, (A)x[base + red_offset(a, r)]);
        acc = warp_comb(a.op, acc);
        if (lane == 0) red_out(a, j, s, acc);
    }
}

template <typename T, typename A> static __device__ void cols(const lz_cu_reduce_args &a)
{
    const T *x = (const T *)a.x;
    LZ_GRID_LOOP(it, a.K * a.splits) {
        const i64 j = it % a.K, s = it / a.K;
        const i64 base = kept_offset(a, j), r0 = s * a.chunk;
        const i64 r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
        A acc = red_init(a.op, (A)0);
        for (i64 r = r0; r < r1; r++) acc = red_comb(a.op, acc, (A)x[base + red_offset(a, r)]);
        red_out(a, j, s, acc);
    }
}

extern "C" __global__ void lz_reduce_rows(const lz_cu_reduce_args a)
{
    if (a.dtype == 0) rows<float, double>(a);
    else if (a.dtype == 1) rows<i64, i64>(a);
    else rows<int, i64>(a);
}

extern "C" __global__ void lz_reduce_cols(const lz_cu_reduce_args a)
{
    if (a.dtype == 0) cols<float, double>(a);
    else if (a.dtype == 1) cols<i64, i64>(a);
    else cols<int, i64>(a);
}

/* the splits' partials, combined in split order (f32 only) */
extern "C" __global__ void lz_reduce_finish(const lz_cu_reduce_args a)
{
    LZ_GRID_LOOP(j, a.K) {
        double acc = red_init(a.op, 0.0);
        for (i64 s = 0; s < a.splits; s++) acc = red_comb(a.op, acc, a.partial[s * a.K + j]);
        red_store(a, j, acc);
    }
}
