/* A bf16 weight gradient larger than 1x1 on channels-last activations as
 * one matrix product over the input's patches (conv_wgrad_cols.c), for
 * k_dnnl_conv.c's AMX steps. */
#ifndef LZ_CPU_CONV_WGRAD_COLS_H
#define LZ_CPU_CONV_WGRAD_COLS_H

#include <dnnl.h>
#include <stddef.h>

#include "compile/program.h"

typedef struct lz_wgrad_cols lz_wgrad_cols;

/* The state for weight-gradient step s (x and dy bf16 channels-last,
   dilation 1, one group, f32 result), or NULL where it does not apply or
   oneDNN has no brgemm matmul for it. */
lz_wgrad_cols *lz_cpu_wgrad_cols_make(const lz_program *p, const lz_instr *s, dnnl_engine_t engine);
/* Scratch bytes a run needs: the columns, the product, oneDNN's scratchpad. */
size_t lz_cpu_wgrad_cols_bytes(const lz_wgrad_cols *g);
/* dw (OIHW) from x and dy; NULL, or what failed. */
const char *lz_cpu_wgrad_cols_run(const lz_wgrad_cols *g, const void *x, const void *dy, float *dw,
                                  void *scratch, dnnl_stream_t stream);
void lz_cpu_wgrad_cols_free(lz_wgrad_cols *g);

#endif
