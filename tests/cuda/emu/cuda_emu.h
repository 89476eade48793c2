/* Just enough of CUDA for the element-wise kernels codegen.c generates to
 * compile as C++ on the host (tests/cuda/test_cuda_emulate.c): one thread
 * in a grid of one, so a grid-stride loop visits every element; the CUDA
 * math functions by their C names. Not for the family kernels (no shared
 * memory, no warps). */
#ifndef LZ_CUDA_EMU_H
#define LZ_CUDA_EMU_H

#include <math.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static

struct lz_emu_dim { unsigned x, y, z; };
static const lz_emu_dim blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static const lz_emu_dim blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752440f); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
static inline void __syncthreads() {}
static inline void __threadfence_system() {}
static inline int atomicCAS(int *a, int c, int v) { int o = *a; if (o == c) *a = v; return o; }
static inline int atomicExch(int *a, int v) { int o = *a; *a = v; return o; }
static inline float atomicAdd(float *a, float v) { float o = *a; *a += v; return o; }

#endif
