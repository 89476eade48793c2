/* What the batch-norm kernels share about a folded activation
 * (compile/fuse_bn_act.c): the forward writes act(y) with y computed by
 * bn_pre_act, and the gradient kernels recompute y from x, the statistics
 * and the forward's weight and bias by the same expression, so their mask
 * is bitwise the one the forward's output would give (y > 0 exactly where
 * relu(y) > 0, lo < y < hi exactly where lo < hardtanh(y) < hi, NaN in
 * both or neither) without reading a 4-byte mask per element. */
#ifndef LZ_CPU_BN_ACT_H
#define LZ_CPU_BN_ACT_H

#include <math.h>

#include "backends/cpu/activation.h"
#include "base/bf16.h"
#include "compile/program.h"

/* Floats a kernel computes before it rounds them into a bf16 output
   (autocast's cast folded into the batch norm or its gradient) */
#define LZ_BN_TILE 1024

/* tile[0..n) rounded into the bf16 output out at element at */
static inline void bn_store_bf16(void *out, int64_t at, const float *tile, int64_t n)
{
    uint16_t *o = (uint16_t *)out + at;
    for (int64_t i = 0; i < n; i++) o[i] = lz_f32_to_bf16(tile[i]);
}

/* Channel c's 1/std from the statistics [mean[C], var[C]]: one
   expression for the forward and the gradient kernels, plain and blocked,
   so the recomputed y is bitwise the forward's. */
static inline float bn_inv_std(const float *stats, int64_t C, int64_t c, float eps)
{
    return 1.0f / sqrtf(stats[C + c] + eps);
}

/* The normalised, scaled and shifted value, in the composed form's order:
   ((x - mean) * invstd) * w + b. */
static inline float bn_pre_act(float x, float m, float is, float wc, float bc)
{
    return (x - m) * is * wc + bc;
}

/* g through the activation's gradient at pre-activation y. */
static inline float bn_act_grad(int act, float y, float g, float lo, float hi)
{
    if (act == LZ_BN_ACT_RELU) return relu_grad_1(y, g);
    if (act == LZ_BN_ACT_HARDTANH) return hardtanh_grad_1(y, g, lo, hi);
    return g;
}

/* A gradient step's folded activation (iattr[2]) and the forward's weight
   and bias it recomputes y with: its last inputs, iattr[3] and iattr[4]
   saying which are there (NULL: 1 and 0). */
static inline int bn_folded_act(const lz_instr *s, void *const *ptrs, const float **fw,
                                const float **fb)
{
    const int has_w = s->iattr[3] != 0, has_b = s->iattr[4] != 0;
    *fw = s->iattr[2] && has_w ? ptrs[s->in[s->n_in - has_w - has_b]] : NULL;
    *fb = s->iattr[2] && has_b ? ptrs[s->in[s->n_in - 1]] : NULL;
    return (int)s->iattr[2];
}

#endif
