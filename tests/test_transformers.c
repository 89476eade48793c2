/* The two transformer models of the zoo (timm_vision_transformer,
 * BERT_pytorch) at smoke size: parameter names and shapes as the PyTorch
 * definitions' state_dicts, forward shapes, a gradient reaching every
 * parameter, a loss that falls under SGD (lazily and captured, one
 * execution per captured step), the dropout switch, and a captured step
 * with dropout on that makes nothing from host data (its attention scale
 * is the model's constant, lz_scale: as an lz_scalar a capture would
 * freeze it, and warn about it on every run). Parity of the
 * numbers with PyTorch is test_model_parity's job. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "zoo.h"

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Random ids in [0, bound) of the given shape (i64). */
static lz_tensor *rand_ids(uint64_t seed, int64_t bound, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    int64_t *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (int64_t)(lcg(&seed) % (uint64_t)bound);
    lz_tensor *t = lz_from_host(v, LZ_I64, ndim, shape);
    free(v);
    return t;
}

static lz_tensor *make_input(const lz_model_spec *s, unsigned seed)
{
    if (s->input_dtype == LZ_I64) return rand_ids(seed, s->num_classes, s->input_ndim, s->input_shape);
    return lz_test_rand(seed, -1, 1, s->input_ndim, s->input_shape);
}

static lz_tensor *make_target(const lz_model_spec *s, unsigned seed)
{
    return rand_ids(seed + 1000, s->num_classes, s->target_ndim, s->target_shape);
}

static int64_t param_numel(lz_model *m, const char *name)
{
    lz_tensor *t = lz_params_find(lz_model_params(m), name);
    return t ? lz_numel(t) : -1;
}

/* Counts and a few names and shapes against torch's state_dict (the
   counts below are what torch reports for the smoke definitions). */
static void test_names(void)
{
    lz_model *vit = lz_model_new("timm_vision_transformer", "smoke", 1);
    CHECK(vit != NULL);
    if (vit) {
        lz_params *p = lz_model_params(vit);
        CHECK_EQ_I(lz_params_count(p), 32);
        CHECK_EQ_I(lz_params_numel(p, 0), 3851146);
        CHECK(!strcmp(lz_params_name(p, 0), "class_token"));
        CHECK(!strcmp(lz_params_name(p, 4), "encoder.layers.encoder_layer_0.ln_1.weight"));
        CHECK_EQ_I(param_numel(vit, "encoder.pos_embedding"), 5 * 384);
        CHECK_EQ_I(param_numel(vit, "encoder.layers.encoder_layer_1.self_attention.in_proj_weight"), 1152 * 384);
        CHECK_EQ_I(param_numel(vit, "encoder.layers.encoder_layer_1.mlp.3.weight"), 384 * 1536);
        CHECK(!strcmp(lz_params_name(p, 31), "heads.head.bias"));
        CHECK_EQ_I(param_numel(vit, "heads.head.weight"), 10 * 384);
        const lz_model_spec *s = lz_model_get_spec(vit);
        CHECK_EQ_I(s->input_shape[0], 2);
        CHECK_EQ_I(s->input_shape[2], 32);
        CHECK_EQ_I(s->num_classes, 10);
        lz_model_free(vit);
    }
    lz_model *vb = lz_model_new("timm_vision_transformer", "bench", 1);
    CHECK(vb != NULL);
    if (vb) {
        CHECK_EQ_I(lz_params_count(lz_model_params(vb)), 152);
        CHECK_EQ_I(lz_params_numel(lz_model_params(vb), 0), 21999976);
        lz_model_free(vb);
    }

    lz_model *bert = lz_model_new("BERT_pytorch", "smoke", 1);
    CHECK(bert != NULL);
    if (bert) {
        lz_params *p = lz_model_params(bert);
        CHECK_EQ_I(lz_params_count(p), 31);
        CHECK_EQ_I(lz_params_numel(p, 0), 61484346);
        CHECK(!strcmp(lz_params_name(p, 0), "embedding.token.weight"));
        CHECK(!strcmp(lz_params_name(p, 5), "encoder.layers.0.self_attn.in_proj_weight"));
        CHECK(!strcmp(lz_params_name(p, 9), "encoder.layers.0.linear1.weight"));
        CHECK(!strcmp(lz_params_name(p, 16), "encoder.layers.0.norm2.bias"));
        CHECK(!strcmp(lz_params_name(p, 30), "head.bias"));
        CHECK_EQ_I(param_numel(bert, "embedding.position.weight"), 512 * 768);
        CHECK_EQ_I(param_numel(bert, "encoder.layers.1.linear2.weight"), 768 * 3072);
        const lz_model_spec *s = lz_model_get_spec(bert);
        CHECK_EQ_I(s->input_dtype, LZ_I64);
        CHECK_EQ_I(s->input_shape[1], 16);
        CHECK_EQ_I(s->target_ndim, 2);
        CHECK_EQ_I(s->num_classes, 30522);
        lz_model_free(bert);
    }
}

static void test_bad_input(void)
{
    lz_model *vit = lz_model_new("timm_vision_transformer", "smoke", 1);
    const int64_t wrong[4] = {2, 3, 48, 48};
    lz_tensor *x = lz_test_rand(1, -1, 1, 4, wrong);
    lz_clear_error();
    CHECK(lz_model_forward(vit, x, 1) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "[B, 3, 32, 32]"));
    lz_free(x);
    lz_model_free(vit);
    lz_clear_error();
}

/* Random values into a parameter (the ViT head starts at zero, which
   would stop every gradient below it). */
static void randomise(lz_model *m, const char *name, unsigned seed)
{
    lz_tensor *t = lz_params_find(lz_model_params(m), name);
    int64_t n = lz_numel(t);
    float *v = malloc(sizeof *v * (size_t)n);
    lz_test_fill_uniform(v, n, seed, -0.05f, 0.05f);
    CHECK_EQ_I(lz_copy_from_host(t, v, sizeof *v * (size_t)n), 0);
    free(v);
}

static void test_forward_and_grads(const char *name)
{
    lz_model *m = lz_model_new(name, "smoke", 7);
    CHECK(m != NULL);
    if (!m) return;
    if (!strcmp(name, "timm_vision_transformer")) randomise(m, "heads.head.weight", 3);
    const lz_model_spec *s = lz_model_get_spec(m);
    lz_tensor *x = make_input(s, 11), *y = make_target(s, 11);
    lz_model_set_dropout(m, 0);

    lz_scope_begin();
    lz_tensor *logits = lz_model_forward(m, x, 1);
    CHECK(logits != NULL);
    if (logits) {
        CHECK_EQ_I(lz_ndim(logits), s->target_ndim + 1);
        for (int d = 0; d < s->target_ndim; d++) CHECK_EQ_I(lz_dim(logits, d), s->target_shape[d]);
        CHECK_EQ_I(lz_dim(logits, -1), s->num_classes);
    }
    lz_tensor *loss = lz_model_loss(m, x, y, 1);
    CHECK(loss != NULL);
    CHECK_EQ_I(lz_backward(loss), 0);
    lz_keep(loss);
    lz_scope_end();
    lz_mark_step();
    float l = lz_item(loss);
    /* random logits near 0: close to log(classes) */
    CHECK(isfinite(l) && fabs(l - log((double)s->num_classes)) < 1.5);
    lz_free(loss);

    lz_params *p = lz_model_params(m);
    int without = 0;
    for (int i = 0; i < lz_params_count(p); i++) {
        if (!lz_params_trainable(p, i)) continue;
        lz_tensor *g = lz_grad(lz_params_at(p, i));
        float *v = g ? lz_test_read(g) : NULL;
        double mx = 0;
        int finite = 1;
        for (int64_t j = 0; v && j < lz_numel(g); j++) {
            if (!isfinite(v[j])) finite = 0;
            if (fabs(v[j]) > mx) mx = fabs(v[j]);
        }
        if (!v || mx == 0 || !finite) {
            fprintf(stderr, "%s: no usable gradient for %s (max |g| %g)\n", name, lz_params_name(p, i), mx);
            without++;
        }
        free(v);
    }
    CHECK_EQ_I(without, 0);
    lz_free(x);
    lz_free(y);
    lz_model_free(m);
}

/* Five SGD-momentum steps on one batch, captured, and the first lazy_steps
   of them lazily from a fresh model with the same seed: the loss falls,
   each captured call after the first runs as one execution, and both modes
   give the same losses. */
static void test_training(const char *name, float lr, int lazy_steps)
{
    enum { STEPS = 5 };
    float lazy[STEPS], captured[STEPS];
    for (int mode = 0; mode < 2; mode++) {
        int steps = mode ? STEPS : lazy_steps;
        lz_test_trainer t = {lz_model_new(name, "smoke", 5), NULL};
        CHECK(t.m != NULL);
        if (!t.m) return;
        lz_model_set_dropout(t.m, 0);
        t.opt = lz_test_model_sgd(t.m, lr);
        const lz_model_spec *s = lz_model_get_spec(t.m);
        lz_tensor *x = make_input(s, 21), *y = make_target(s, 21);
        lz_tensor *in[2] = {x, y};
        float *losses = mode ? captured : lazy;
        lz_fn *f = mode ? lz_capture(lz_test_sgd_step, &t, 2, 1) : NULL;
        lz_wait();
        lz_metrics start = lz_metrics_get(), before = start;
        for (int k = 0; k < steps; k++) {
            if (k == 1) {
                lz_wait();
                before = lz_metrics_get();
            }
            lz_tensor *out[1] = {NULL};
            if (mode) {
                CHECK_EQ_I(lz_call(f, in, out), 0);
            } else {
                lz_scope_begin();
                CHECK_EQ_I(lz_test_sgd_step(&t, in, out), 0);
                lz_keep(out[0]);
                lz_scope_end();
                lz_mark_step();
            }
            losses[k] = lz_item(out[0]);
            lz_free(out[0]);
        }
        lz_metrics after = lz_metrics_get();
        if (mode) {
            /* the first call traces (and may warm up); from the second on
               each call is one replay */
            CHECK_EQ_I(after.executions - before.executions, STEPS - 1);
            CHECK(after.capture_replays - before.capture_replays >= STEPS - 2);
            fprintf(stderr, "%s captured: %lld executions, %lld compiles, %lld replays over steps 2..%d; "
                    "%lld compiles over all %d\n", name,
                    (long long)(after.executions - before.executions), (long long)(after.compiles - before.compiles),
                    (long long)(after.capture_replays - before.capture_replays), STEPS,
                    (long long)(after.compiles - start.compiles), STEPS);
            lz_fn_free(f);
        }
        fprintf(stderr, "%s %s losses:", name, mode ? "captured" : "lazy");
        for (int k = 0; k < steps; k++) fprintf(stderr, " %.5f", losses[k]);
        fprintf(stderr, "\n");
        CHECK(losses[steps - 1] < (steps > 2 ? 0.9f : 1.0f) * losses[0]);
        lz_free(x);
        lz_free(y);
        lz_sgd_free(t.opt);
        lz_model_free(t.m);
    }
    /* same kernels in both modes */
    for (int k = 0; k < lazy_steps; k++) CHECK_NEAR(captured[k], lazy[k], 1e-4 * fabs(lazy[k]));
}

static float *forward_values(lz_model *m, lz_tensor *x, int training, int64_t *n)
{
    lz_scope_begin();
    lz_tensor *y = lz_keep(lz_model_forward(m, x, training));
    lz_scope_end();
    float *v = y ? lz_test_read(y) : NULL;
    *n = y ? lz_numel(y) : 0;
    lz_free(y);
    return v;
}

/* BERT drops in training unless switched off; each call draws a new mask.
   Switched off (or in eval) the forward is deterministic and the same in
   both modes. ViT has dropout 0 throughout. */
static void test_dropout(const char *name, int has_dropout)
{
    lz_model *m = lz_model_new(name, "smoke", 9);
    CHECK(m != NULL);
    if (!m) return;
    if (!strcmp(name, "timm_vision_transformer")) randomise(m, "heads.head.weight", 4);
    lz_manual_seed(123);
    lz_tensor *x = make_input(lz_model_get_spec(m), 31);
    int64_t n;
    float *eval = forward_values(m, x, 0, &n);
    float *train1 = forward_values(m, x, 1, &n);
    float *train2 = forward_values(m, x, 1, &n);
    lz_model_set_dropout(m, 0);
    float *off = forward_values(m, x, 1, &n);
    CHECK(eval && train1 && train2 && off);
    if (eval && train1 && train2 && off) {
        if (has_dropout) {
            CHECK(lz_test_rel_err(train1, eval, n) > 1e-3);
            CHECK(lz_test_rel_err(train2, train1, n) > 1e-3);
        } else {
            CHECK(lz_test_rel_err(train1, eval, n) <= 1e-6);
            CHECK(lz_test_rel_err(train2, eval, n) <= 1e-6);
        }
        CHECK(lz_test_rel_err(off, eval, n) <= 1e-6);
    }
    free(eval); free(train1); free(train2); free(off);
    lz_free(x);
    lz_model_free(m);
}

/* BERT's attention with dropout (the composed path): the captured step's
   trace makes no tensor from host memory, so lz_call has nothing to warn
   about; its first call copies nothing to the device but the SGD state it
   creates (none: made with the optimizer) */
static void test_capture_no_host_data(const char *name)
{
    lz_test_trainer t = {lz_model_new(name, "smoke", 5), NULL};
    CHECK(t.m != NULL);
    if (!t.m) return;
    t.opt = lz_test_model_sgd(t.m, 0.01f);
    const lz_model_spec *s = lz_model_get_spec(t.m);
    lz_tensor *x = make_input(s, 22), *y = make_target(s, 22);
    lz_tensor *in[2] = {x, y};
    lz_fn *f = lz_capture(lz_test_sgd_step, &t, 2, 1);
    lz_wait();
    const lz_metrics before = lz_metrics_get();
    lz_tensor *out[1] = {NULL};
    CHECK_EQ_I(lz_call(f, in, out), 0);
    const lz_metrics after = lz_metrics_get();
    CHECK_EQ_I(after.transfers_to_device - before.transfers_to_device, 0);
    lz_free(out[0]);
    lz_fn_free(f);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(t.opt);
    lz_model_free(t.m);
}

#include <time.h>
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#define TIMED(call) do { double t0_ = now(); call; fprintf(stderr, "%-60s %.2fs\n", #call, now() - t0_); } while (0)

int main(void)
{
    TIMED(test_names());
    TIMED(test_bad_input());
    TIMED(test_forward_and_grads("timm_vision_transformer"));
    TIMED(test_forward_and_grads("BERT_pytorch"));
    TIMED(test_dropout("timm_vision_transformer", 0));
    TIMED(test_dropout("BERT_pytorch", 1));
    TIMED(test_capture_no_host_data("BERT_pytorch"));
    TIMED(test_training("timm_vision_transformer", 0.01f, 5));
    TIMED(test_training("BERT_pytorch", 0.01f, 2));   /* BERT's steps are the slow ones */
    return lz_test_done();
}
