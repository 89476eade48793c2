/* Pieces the two transformer models share: a linear layer over the last
 * axis, multi-head self-attention from a packed in_proj weight (as
 * nn.MultiheadAttention stores it), and their initialisers. Public API only. */
#ifndef LZ_MODELS_TRANSFORMER_H
#define LZ_MODELS_TRANSFORMER_H

#include "lazyc.h"
#include "init.h"

/* The parameter called printf(fmt, ...) in p, or NULL with an error naming it. */
lz_tensor *lz_tf_param(const lz_params *p, const char *fmt, ...)
    LZ_PRINTF_FORMAT(2, 3);

/* nn.MultiheadAttention(E, heads, batch_first=True) on x [B, S, E] as
   query, key and value, with the parameters prefix.in_proj_weight,
   prefix.in_proj_bias, prefix.out_proj.weight, prefix.out_proj.bias.
   attn_dropout > 0 drops attention probabilities (training only). */
lz_tensor *lz_tf_self_attention(const lz_params *p, const char *prefix, lz_tensor *x,
                                int heads, float attn_dropout);

/* nn.MultiheadAttention's own initialisation: xavier_uniform in_proj,
   zero biases, out_proj weight like nn.Linear. 0, or -1 with the error set. */
int lz_tf_init_self_attention(lz_params *p, lz_init_rng *r, const char *prefix, int64_t dim);

/* nn.LayerNorm(dim)'s weight (ones) and bias (zeros) under prefix.weight/.bias. */
int lz_tf_init_layer_norm(lz_params *p, const char *prefix, int64_t dim);

/* nn.Linear(in, out)'s default initialisation (uniform, bound 1/sqrt(in)). */
int lz_tf_init_linear(lz_params *p, lz_init_rng *r, const char *prefix, int64_t in, int64_t out);

#endif
