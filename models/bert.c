/* BERT_pytorch: BERT-base as tests/reference/bert_ref.py defines it: token
 * (30522), position (512) and segment (2) embeddings summed, LayerNorm
 * (eps 1e-12), dropout 0.1, N post-norm nn.TransformerEncoderLayer(768, 12,
 * 3072, 0.1, activation="gelu", batch_first=True) and a linear head to the
 * vocabulary. Parameter names are that module's state_dict keys. Every
 * sequence is one segment (ids 0) without padding, so no attention mask. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "init.h"
#include "layers.h"
#include "transformer.h"
#include "zoo_internal.h"

typedef struct bert {
    int64_t vocab, hidden, ffn, max_len, segments, seq;
    int layers, heads;
    float p_drop;
} bert;

static lz_tensor *maybe_dropout(lz_tensor *x, float p, int on)
{
    return on ? lz_dropout(x, p, 1) : x;
}

/* nn.TransformerEncoderLayer, norm_first=False:
   x = norm1(x + drop1(sa(x))); x = norm2(x + drop2(linear2(drop(gelu(linear1(x)))))) */
static lz_tensor *encoder_layer(const lz_params *p, const bert *b, int i, lz_tensor *x, int drop)
{
    char pre[64], att[96];
    snprintf(pre, sizeof pre, "encoder.layers.%d", i);
    snprintf(att, sizeof att, "%s.self_attn", pre);
    float pd = drop ? b->p_drop : 0.0f;
    lz_tensor *a = lz_tf_self_attention(p, att, x, b->heads, pd);
    x = lz_layer_norm(lz_add(x, maybe_dropout(a, b->p_drop, drop)), 1,
                      lz_tf_param(p, "%s.norm1.weight", pre), lz_tf_param(p, "%s.norm1.bias", pre), 1e-5f);
    lz_tensor *f = lz_gelu(lz_linear(x, lz_tf_param(p, "%s.linear1.weight", pre),
                                        lz_tf_param(p, "%s.linear1.bias", pre)));
    f = lz_linear(maybe_dropout(f, b->p_drop, drop), lz_tf_param(p, "%s.linear2.weight", pre),
                     lz_tf_param(p, "%s.linear2.bias", pre));
    return lz_layer_norm(lz_add(x, maybe_dropout(f, b->p_drop, drop)), 1,
                         lz_tf_param(p, "%s.norm2.weight", pre), lz_tf_param(p, "%s.norm2.bias", pre), 1e-5f);
}

static lz_tensor *bert_forward(lz_model *m, lz_tensor *tokens, int training)
{
    const bert *b = m->impl;
    const lz_params *p = m->params;
    if (!tokens) return NULL;
    if (lz_ndim(tokens) != 2 || lz_dim(tokens, 1) > b->max_len) {
        lz_set_error("%s: input must be [B, S] token ids with S <= %lld", m->spec.name,
                         (long long)b->max_len);
        return NULL;
    }
    int drop = training && m->dropout;
    int64_t seq = lz_dim(tokens, 1);
    lz_scope_begin();
    lz_tensor *x = lz_embedding(lz_tf_param(p, "embedding.token.weight"), tokens);
    /* position ids are 0..S-1 and segment ids all 0: embedding lookups of
       those are the first S rows and the first row, so take them as slices
       (no index data to feed, same gradient) */
    x = lz_add(x, lz_slice(lz_tf_param(p, "embedding.position.weight"), 0, 0, seq));
    x = lz_add(x, lz_slice(lz_tf_param(p, "embedding.segment.weight"), 0, 0, 1));
    x = lz_layer_norm(x, 1, lz_tf_param(p, "embedding.norm.weight"),
                      lz_tf_param(p, "embedding.norm.bias"), 1e-12f);
    x = maybe_dropout(x, b->p_drop, drop);
    for (int i = 0; i < b->layers; i++) x = encoder_layer(p, b, i, x, drop);
    lz_tensor *y = lz_linear(x, lz_tf_param(p, "head.weight"), lz_tf_param(p, "head.bias"));
    lz_keep(y);
    lz_scope_end();
    return y;
}

static int add_params(lz_params *p, lz_init_rng *r, const bert *b)
{
    int64_t e = b->hidden;
    int64_t tok[2] = {b->vocab, e}, pos[2] = {b->max_len, e}, seg[2] = {b->segments, e};
    /* nn.Embedding draws normal(0, 1) */
    if (!lz_init_normal(p, r, "embedding.token.weight", 2, tok, 1.0f)) return -1;
    if (!lz_init_normal(p, r, "embedding.position.weight", 2, pos, 1.0f)) return -1;
    if (!lz_init_normal(p, r, "embedding.segment.weight", 2, seg, 1.0f)) return -1;
    if (lz_tf_init_layer_norm(p, "embedding.norm", e)) return -1;
    char pre[64], name[128];
    /* state_dict order of nn.TransformerEncoderLayer */
    for (int i = 0; i < b->layers; i++) {
        snprintf(pre, sizeof pre, "encoder.layers.%d", i);
        snprintf(name, sizeof name, "%s.self_attn", pre);
        if (lz_tf_init_self_attention(p, r, name, e)) return -1;
        snprintf(name, sizeof name, "%s.linear1", pre);
        if (lz_tf_init_linear(p, r, name, e, b->ffn)) return -1;
        snprintf(name, sizeof name, "%s.linear2", pre);
        if (lz_tf_init_linear(p, r, name, b->ffn, e)) return -1;
        snprintf(name, sizeof name, "%s.norm1", pre);
        if (lz_tf_init_layer_norm(p, name, e)) return -1;
        snprintf(name, sizeof name, "%s.norm2", pre);
        if (lz_tf_init_layer_norm(p, name, e)) return -1;
    }
    return lz_tf_init_linear(p, r, "head", e, b->vocab);
}

int lz_zoo_build_bert(lz_model *m, const char *name, int bench_size, uint64_t seed)
{
    bert *b = calloc(1, sizeof *b);
    if (!b) return -1;
    *b = (bert){.vocab = 30522, .hidden = 768, .ffn = 3072, .max_len = 512, .segments = 2,
                .seq = bench_size ? 128 : 16, .layers = bench_size ? 12 : 2, .heads = 12,
                .p_drop = 0.1f};
    m->impl = b;
    m->free_impl = free;
    m->forward = bert_forward;
    int64_t batch = bench_size == 2 ? 16 : bench_size ? 4 : 2;   /* gpu: BERT-base, 16 x 128 tokens */
    m->spec = (lz_model_spec){.name = name, .input_ndim = 2, .input_shape = {batch, b->seq},
                              .input_dtype = LZ_I64, .target_ndim = 2,
                              .target_shape = {batch, b->seq}, .num_classes = b->vocab};
    lz_init_rng r = {seed ? seed : 0x9E3779B97F4A7C15ull};   /* seed 0 means the default seed */
    return add_params(m->params, &r, b);
}
