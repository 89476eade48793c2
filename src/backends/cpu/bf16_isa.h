/* How this CPU runs bf16 products, as oneDNN sees it (DNNL_MAX_CPU_ISA
 * caps it), and the one notice that says so when it is not native. */
#ifndef LZ_CPU_BF16_ISA_H
#define LZ_CPU_BF16_ISA_H

#include <dnnl.h>
#include <stdint.h>

#include "compile/program.h"

enum { LZ_BF16_NATIVE, LZ_BF16_WIDENED };
/* LZ_BF16_NATIVE: AVX512_BF16 (or AMX) instructions. WIDENED: without
   them, lazyc widens bf16 operands to float32 for its float32 kernels
   (oneDNN's bf16 emulation is slower than float32: docs/performance.md,
   "bf16 under autocast"), and
   autocast keeps convolutions float32 (lz_cpu_conv_f32_faster). */
int lz_cpu_bf16_way(void);
/* Whether the native way has AMX tiles. oneDNN 2.6's AMX convolutions
   read channels-last activations only; on lazyc's channel-blocked ones
   it runs its AVX512_BF16 kernels, which on CPUs with AMX are slower than
   f32, and the AMX ones far faster (docs/performance.md, "bf16 on AMX"):
   so a program with
   bf16 convolutions keeps its activations channels-last there
   (lz_cpu_program_block). */
int lz_cpu_bf16_amx(void);
/* Prints, once per process, the notice of a non-native way. */
void lz_cpu_bf16_notice(void);

/* The bf16 MATMUL kernel (k_matmul_bf16.c) and the float32 one it falls
   back on (k_matmul_f32.c), on explicit operand pointers. */
const char *lz_cpu_matmul_bf16(const lz_program *p, const lz_instr *s, void *const *ptrs);
const char *lz_cpu_matmul_f32(const lz_program *p, const lz_instr *s, const float *A,
                              const float *B, float *C);
/* A bf16 matmul's primitive desc (bf16 src [M, K] and weights [K, N],
   f32 dst [M, N], strides as their descs give) with a user scratchpad,
   for a caller whose step scratch holds it; NULL unless oneDNN has its
   brgemm kernel for it (its gemm and reference fallbacks are no faster
   than the convolution kernels the callers run otherwise:
   k_dnnl_conv.c's 1x1 products, conv_wgrad_cols.c). k_matmul_bf16.c. */
dnnl_primitive_desc_t lz_cpu_bf16_matmul_pd(dnnl_engine_t engine, const dnnl_memory_desc_t *src,
                                            const dnnl_memory_desc_t *wei,
                                            const dnnl_memory_desc_t *dst);
/* bf16 products run on bf16 operands (library 1: oneDNN, or k_outer.c's
   outer products) or widened to float32 (0), ever (tests). */
int64_t lz_cpu_bf16_matmul_count(int library);
int64_t lz_cpu_bf16_conv_count(int library);

#endif
