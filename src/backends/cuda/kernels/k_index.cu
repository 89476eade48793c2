/* The indexing ops added for models from PyTorch (host side: f_index.c),
 * with the CPU's rules (backends/cpu/k_index.c): the triangular mask,
 * cumsum (float32 summed in double, integers wrapping), gather and its
 * scatter-add gradient (atomicAdd: a slot several indices hit sums in an
 * order that may vary), argmax (the first maximum; NaN counts as it).
 * A bad index reports to the status word and is skipped. */
#include "k_common.cuh"

static __device__ __forceinline__ int esize(int dtype) { return dtype == 1 ? 8 : dtype == 3 ? 2 : 4; }

static __device__ __forceinline__ void copy_elem(void *y, i64 ye, const void *x, i64 xe, int es)
{
    if (es == 8) ((u64 *)y)[ye] = ((const u64 *)x)[xe];
    else if (es == 2) ((u16 *)y)[ye] = ((const u16 *)x)[xe];
    else ((u32 *)y)[ye] = ((const u32 *)x)[xe];
}

extern "C" __global__ void lz_tri_mask(const lz_cu_index_args a)
{
    LZ_GRID_LOOP(e, a.numel) {
        const i64 j = e % a.cols, i = (e / a.cols) % a.rows;
        const int masked = a.upper ? j - i < a.k : j - i > a.k;
        if (!masked) copy_elem(a.y, e, a.x, e, esize(a.dtype));
        else if (a.dtype == 0) ((float *)a.y)[e] = a.fill;
        else if (a.dtype == 1) ((i64 *)a.y)[e] = (i64)a.fill;
        else ((int *)a.y)[e] = (int)a.fill;
    }
}

extern "C" __global__ void lz_cumsum(const lz_cu_index_args a)
{
    LZ_GRID_LOOP(r, a.outer * a.inner) {
        const i64 o = r / a.inner, in = r - o * a.inner, base = o * a.n * a.inner + in;
        double accf = 0.0;
        u64 acci = 0;
        for (i64 t = 0; t < a.n; t++) {
            const i64 j = base + (a.rev ? a.n - 1 - t : t) * a.inner;
            if (a.dtype == 0) {
                accf += ((const float *)a.x)[j];
                ((float *)a.y)[j] = (float)accf;
            } else if (a.dtype == 1) {
                acci += (u64)((const i64 *)a.x)[j];
                ((i64 *)a.y)[j] = (i64)acci;
            } else {
                acci += (u64)(u32)((const int *)a.x)[j];
                ((int *)a.y)[j] = (int)(u32)acci;
            }
        }
    }
}

/* element e of the indices' shape, its axis coordinate replaced by k, in
   the full (contiguous) shape */
static __device__ i64 gather_offset(const lz_cu_index_args &a, i64 e, i64 k)
{
    i64 off = 0, stride = 1;
    for (int d = a.ndim - 1; d >= 0; d--) {
        const i64 c = e % a.ishape[d];
        e /= a.ishape[d];
        off += (d == a.axis ? k : c) * stride;
        stride *= a.fshape[d];
    }
    return off;
}

/* (x, idx) -> idx shape */
extern "C" __global__ void lz_gather(const lz_cu_index_args a)
{
    LZ_GRID_LOOP(e, a.numel) {
        const i64 k = lz_index_at(a.idx, a.is64, e);
        if (k < 0 || k >= a.fshape[a.axis]) {
            lz_report(a.status, LZ_CU_BAD_GATHER, e, k, a.fshape[a.axis]);
            continue;
        }
        copy_elem(a.y, e, a.x, gather_offset(a, e, k), esize(a.dtype));
    }
}

/* y (zeroed before) += src at idx along the axis */
extern "C" __global__ void lz_scatter_add(const lz_cu_index_args a)
{
    LZ_GRID_LOOP(e, a.numel) {
        const i64 k = lz_index_at(a.idx, a.is64, e);
        if (k < 0 || k >= a.fshape[a.axis]) {
            lz_report(a.status, LZ_CU_BAD_SCATTER, e, k, a.fshape[a.axis]);
            continue;
        }
        atomicAdd((float *)a.y + gather_offset(a, e, k), ((const float *)a.x)[e]);
    }
}

extern "C" __global__ void lz_argmax(const lz_cu_index_args a)
{
    LZ_GRID_LOOP(r, a.outer * a.inner) {
        const i64 o = r / a.inner, in = r - o * a.inner, base = o * a.n * a.inner + in;
        i64 best = 0;
        if (a.dtype == 0) {
            const float *x = (const float *)a.x;
            float bv = x[base];
            for (i64 t = 1; t < a.n && bv == bv; t++) {
                const float c = x[base + t * a.inner];
                if (c > bv || c != c) {
                    bv = c;
                    best = t;
                }
            }
        } else if (a.dtype == 1) {
            const i64 *x = (const i64 *)a.x;
            for (i64 t = 1; t < a.n; t++)
                if (x[base + t * a.inner] > x[base + best * a.inner]) best = t;
        } else {
            const int *x = (const int *)a.x;
            for (i64 t = 1; t < a.n; t++)
                if (x[base + t * a.inner] > x[base + best * a.inner]) best = t;
        }
        ((i64 *)a.y)[r] = best;
    }
}
