/* A small GPT-style character model trained on any text file: token and
   position embeddings, pre-norm transformer blocks (causal multi-head
   attention and a GELU MLP), a final layer norm and a linear head, trained
   with AdamW in a captured step, then sampled.
   Build: cc char_lm.c $(pkg-config --cflags --libs lazyc) -o char_lm
   Run:   ./char_lm input.txt [STEPS [SAMPLE_CHARS]]     (defaults 1000, 300) */
#include <lazyc.h>
#include <lazyc_nn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 32, B = 16, D = 64, HEADS = 4, LAYERS = 2, MAX_TEXT = 64 << 20 };

typedef struct block {
    lz_ln_layer ln1, ln2;
    lz_linear_layer qkv, proj, fc1, fc2;
} block;

typedef struct model {
    lz_params *params;
    lz_tensor *tok_emb, *pos_emb, *mask;  /* mask [T, T]: 0 on and below the diagonal */
    block blocks[LAYERS];
    lz_ln_layer ln_f;
    lz_linear_layer head;
    int64_t vocab;
    lz_adamw *opt;
} model;

/* [b, T, D] -> [b, HEADS, T, D / HEADS] */
static lz_tensor *split_heads(lz_tensor *x, int64_t b)
{
    lz_tensor *r = lz_reshape(x, 4, (int64_t[]){b, T, HEADS, D / HEADS});
    return lz_permute(r, (int[]){0, 2, 1, 3});
}

/* x + attention(ln1(x)), then x + mlp(ln2(x)); x [b, T, D] */
static lz_tensor *block_forward(const model *m, const block *l, lz_tensor *x, int64_t b)
{
    lz_tensor *qkv = lz_linear_forward(&l->qkv, lz_ln_forward(&l->ln1, x));
    lz_tensor *q = split_heads(lz_slice(qkv, 2, 0, D), b);
    lz_tensor *k = split_heads(lz_slice(qkv, 2, D, 2 * D), b);
    lz_tensor *v = split_heads(lz_slice(qkv, 2, 2 * D, 3 * D), b);
    lz_tensor *a = lz_attention(q, k, v, m->mask, 0.0f);          /* [b, HEADS, T, hd] */
    a = lz_reshape(lz_permute(a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){b, T, D});
    x = lz_add(x, lz_linear_forward(&l->proj, a));
    lz_tensor *h = lz_gelu(lz_linear_forward(&l->fc1, lz_ln_forward(&l->ln2, x)));
    return lz_add(x, lz_linear_forward(&l->fc2, h));
}

/* tokens [b, T] i64 -> logits [b, T, vocab]; call inside a scope */
static lz_tensor *forward(const model *m, lz_tensor *tokens, int64_t b)
{
    lz_tensor *x = lz_add(lz_embedding(m->tok_emb, tokens), m->pos_emb);
    for (int i = 0; i < LAYERS; i++) x = block_forward(m, &m->blocks[i], x, b);
    return lz_linear_forward(&m->head, lz_ln_forward(&m->ln_f, x));
}

/* The captured training step: in = {x [B, T], y [B * T]}; out[0] = loss. */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    lz_adamw_zero_grad(m->opt);
    lz_scope_begin();
    lz_tensor *logits = lz_reshape(forward(m, in[0], B), 2, (int64_t[]){B * T, m->vocab});
    lz_tensor *loss = lz_keep(lz_cross_entropy(logits, in[1]));
    lz_scope_end();
    if (!loss || lz_backward(loss) != 0 || lz_adamw_step(m->opt) != 0) {
        lz_free(loss);
        return -1;
    }
    out[0] = loss;
    return 0;
}

static int build(model *m, int64_t vocab)
{
    m->vocab = vocab;
    m->params = lz_params_new();
    lz_layer_ctx c;
    lz_layer_ctx_init(&c, m->params, 1);
    lz_embedding_make(&c, &m->tok_emb, vocab, D, "tok_emb");
    for (int i = 0; i < LAYERS; i++) {
        block *l = &m->blocks[i];
        lz_ln_make(&c, &l->ln1, D, "blocks.%d.ln1", i);
        lz_linear_make(&c, &l->qkv, D, 3 * D, 1, "blocks.%d.qkv", i);
        lz_linear_make(&c, &l->proj, D, D, 1, "blocks.%d.proj", i);
        lz_ln_make(&c, &l->ln2, D, "blocks.%d.ln2", i);
        lz_linear_make(&c, &l->fc1, D, 4 * D, 1, "blocks.%d.fc1", i);
        lz_linear_make(&c, &l->fc2, 4 * D, D, 1, "blocks.%d.fc2", i);
    }
    lz_ln_make(&c, &m->ln_f, D, "ln_f");
    lz_linear_make(&c, &m->head, D, vocab, 1, "head");
    if (c.failed) return -1;

    /* position embeddings drawn in the graph: normal(0, 0.02) */
    lz_manual_seed(1);
    lz_tensor *r = lz_randn(2, (int64_t[]){T, D}), *std = lz_scalar(0.02f);
    m->pos_emb = lz_params_add(m->params, "pos_emb", lz_mul(r, std), 1);
    lz_free(r);
    lz_free(std);

    static float mask[T * T];
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) mask[i * T + j] = j <= i ? 0.0f : -1e9f;
    m->mask = lz_from_host(mask, LZ_F32, 2, (int64_t[]){T, T});
    if (!m->pos_emb || !m->mask) return -1;

    lz_tensor *trainable[64];
    int n = lz_params_trainable_list(m->params, trainable, 64);
    m->opt = lz_adamw_new(trainable, n, (lz_adamw_opts){.lr = 3e-3f, .beta1 = 0.9f,
                          .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f, .decoupled = 1});
    return m->opt ? 0 : -1;
}

static uint64_t rng = 88172645463325252ull;
static double next_unit(void)   /* xorshift64*: batch offsets and sampling */
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

/* Writes n characters, each drawn from the model's distribution after the
   T characters before it (starting from the text's first T). */
static int sample(const model *m, const int64_t *ids, const unsigned char *chars, int n)
{
    int64_t ctx[T];
    memcpy(ctx, ids, sizeof ctx);
    float *p = malloc(sizeof *p * (size_t)m->vocab);
    if (!p) return -1;
    printf("sample:\n");
    lz_no_grad_begin();
    for (int i = 0; i < n; i++) {
        lz_scope_begin();
        lz_tensor *tokens = lz_from_host(ctx, LZ_I64, 2, (int64_t[]){1, T});
        lz_tensor *last = lz_slice(forward(m, tokens, 1), 1, T - 1, T);
        int rc = lz_to_host(lz_softmax(last, -1), p, sizeof *p * (size_t)m->vocab);
        lz_scope_end();
        if (rc != 0) break;
        double u = next_unit(), acc = 0;
        int64_t c = 0;
        while (c < m->vocab - 1 && (acc += p[c]) <= u) c++;
        putchar(chars[c]);
        memmove(ctx, ctx + 1, sizeof ctx - sizeof ctx[0]);
        ctx[T - 1] = c;
    }
    lz_no_grad_end();
    putchar('\n');
    free(p);
    return lz_last_error() ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s TEXT_FILE [STEPS [SAMPLE_CHARS]]\n", argv[0]);
        return 2;
    }
    long steps = argc > 2 ? atol(argv[2]) : 1000, n_sample = argc > 3 ? atol(argv[3]) : 300;
    if (steps < 1 || n_sample < 0) {
        fprintf(stderr, "char_lm: STEPS must be at least 1 and SAMPLE_CHARS at least 0\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    unsigned char *text = malloc(MAX_TEXT);
    size_t len = f && text ? fread(text, 1, MAX_TEXT, f) : 0;
    if (f) fclose(f);
    if (len < T + 2) {
        fprintf(stderr, "char_lm: %s: %s\n", argv[1],
                !f ? "cannot open" : "needs at least 34 bytes of text");
        free(text);
        return 1;
    }

    /* the vocabulary: the bytes that occur, in byte order */
    int64_t id_of[256], vocab = 0, *ids = malloc(sizeof *ids * len);
    unsigned char chars[256];
    for (int c = 0; c < 256; c++) id_of[c] = -1;
    for (size_t i = 0; i < len; i++) id_of[text[i]] = 0;
    for (int c = 0; c < 256; c++)
        if (id_of[c] == 0) chars[vocab] = (unsigned char)c, id_of[c] = vocab++;
    for (size_t i = 0; ids && i < len; i++) ids[i] = id_of[text[i]];
    printf("%zu characters, vocabulary %lld\n", len, (long long)vocab);

    model m = {0};
    lz_fn *step = NULL;
    int status = 1;
    if (!ids || build(&m, vocab) != 0 || !(step = lz_capture(train_step, &m, 2, 1))) goto done;
    printf("%lld parameters\n", (long long)lz_params_numel(m.params, 1));

    int64_t x[B * T], y[B * T];
    for (long s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            size_t at = (size_t)(next_unit() * (double)(len - T - 1));
            memcpy(x + b * T, ids + at, sizeof x[0] * T);
            memcpy(y + b * T, ids + at + 1, sizeof y[0] * T);
        }
        lz_tensor *in[2] = {lz_from_host(x, LZ_I64, 2, (int64_t[]){B, T}),
                            lz_from_host(y, LZ_I64, 1, (int64_t[]){B * T})};
        lz_tensor *loss = NULL;
        int rc = in[0] && in[1] ? lz_call(step, in, &loss) : -1;
        lz_free(in[0]);
        lz_free(in[1]);
        if (rc == 0 && (s % (steps / 10 + 1) == 0 || s == steps - 1))
            printf("step %5ld  loss %.4f\n", s, lz_item(loss));   /* waits for this step */
        lz_free(loss);
        if (rc != 0) goto done;
    }
    if (n_sample > 0 && sample(&m, ids, chars, (int)n_sample) != 0) goto done;
    status = lz_wait() == 0 ? 0 : 1;
done:
    if (status) fprintf(stderr, "char_lm: %s\n", lz_last_error() ? lz_last_error() : "failed");
    lz_fn_free(step);
    lz_adamw_free(m.opt);
    lz_free(m.mask);
    lz_params_free(m.params);
    free(ids);
    free(text);
    lz_shutdown();
    return status;
}
