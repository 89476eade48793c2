/* The model zoo at smoke size (issue 4): every model's parameters and
 * buffers are the PyTorch definition's state_dict (names, order, dtypes,
 * shapes, trainable flags, from tests/fixtures/model_names/ written by
 * tests/reference/gen_model_names.py), and every model trains in captured
 * mode as one execution per step with one compile, its loss finite.
 *
 * With arguments it is the C side of the model parity test
 * (tests/test_model_parity.sh):
 *
 *   test_models sgd NAME WEIGHTS INPUTS OUT [STEPS[:SAVE] [lazy]]
 *
 * loads WEIGHTS into the smoke-size model, runs STEPS (default 3) SGD
 * steps (lr 0.01, momentum 0.9, dropout off, train mode) on the batch x, y
 * of INPUTS: the first lazily, the rest captured (or lazily too, with
 * "lazy", to tell a capture problem from a numerical one), printing each
 * step's loss; and writes every parameter and buffer to OUT as they are
 * after SAVE steps (default STEPS; the parity test stops its comparison
 * of the state before a step whose max-pool choices tie within rounding,
 * and still compares that step's loss).
 *
 *   test_models grads NAME WEIGHTS INPUTS OUT [eval]
 *
 * writes the loss and every gradient of one pass, like `lazyc grads`, but
 * with batch norm in eval mode when asked (the parity test checks the
 * batch-norm models that way too, where their gradients are well
 * conditioned). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/cache.h"
#include "zoo.h"

/* A lazy step: what the capture's warm-up would do, and the reference the
   captured steps continue from. */
static float lazy_step(lz_test_trainer *t, lz_tensor *x, lz_tensor *y)
{
    lz_tensor *in[2] = { x, y }, *out[1] = { NULL };
    lz_scope_begin();
    int rc = lz_test_sgd_step(t, in, out);
    lz_keep(out[0]);
    lz_scope_end();
    lz_mark_step();
    float loss = rc ? NAN : lz_item(out[0]);
    lz_free(out[0]);
    return loss;
}

/* ---- state_dict listing ------------------------------------------------ */

static const char *dtype_str(lz_dtype d)
{
    return d == LZ_F32 ? "f32" : d == LZ_I64 ? "i64" : d == LZ_I32 ? "i32" : "?";
}

/* Compares the model's parameter set with fixtures/model_names/NAME.txt;
   prints the first difference. Returns the number of differences. */
static int check_listing(const char *name, lz_model *m)
{
    char path[256];
    snprintf(path, sizeof path, "fixtures/model_names/%s.txt", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s (written by tests/reference/gen_model_names.py)\n",
                name, path);
        return 1;
    }
    lz_params *p = lz_model_params(m);
    int n = lz_params_count(p), i = 0, bad = 0;
    char line[1024];
    if (!fgets(line, sizeof line, f) || strncmp(line, "lazyc-model-names 1 ", 20) != 0) {
        fprintf(stderr, "%s: %s: bad first line\n", name, path);
        fclose(f);
        return 1;
    }
    while (fgets(line, sizeof line, f)) {
        char kind[16], key[512], dt[8];
        int ndim, off = 0;
        if (sscanf(line, "%15s %511s %7s %d%n", kind, key, dt, &ndim, &off) != 4) continue;
        int64_t shape[LZ_MAX_DIMS] = { 0 };
        const char *s = line + off;
        for (int d = 0; d < ndim && d < LZ_MAX_DIMS; d++) {
            char *end;
            shape[d] = strtoll(s, &end, 10);
            s = end;
        }
        if (i >= n) {
            if (!bad++) fprintf(stderr, "%s: torch has %s %s; lazyc has only %d tensors\n", name, kind, key, n);
            i++;
            continue;
        }
        const char *got = lz_params_name(p, i);
        lz_tensor *t = lz_params_at(p, i);
        int trainable = lz_params_trainable(p, i);
        int same = !strcmp(got, key) && !strcmp(dtype_str(lz_tensor_dtype(t)), dt) &&
                   lz_ndim(t) == ndim && trainable == !strcmp(kind, "param");
        for (int d = 0; same && d < ndim; d++) same = lz_dim(t, d) == shape[d];
        if (!same) {
            if (!bad++) {
                fprintf(stderr, "%s: tensor %d: torch has %s %s %s %d-d [", name, i, kind, key, dt, ndim);
                for (int d = 0; d < ndim; d++) fprintf(stderr, "%s%lld", d ? ", " : "", (long long)shape[d]);
                fprintf(stderr, "], lazyc has %s %s %s %d-d [", trainable ? "param" : "buffer", got,
                        dtype_str(lz_tensor_dtype(t)), lz_ndim(t));
                for (int d = 0; d < lz_ndim(t); d++) fprintf(stderr, "%s%lld", d ? ", " : "", (long long)lz_dim(t, d));
                fprintf(stderr, "]\n");
            }
        }
        i++;
    }
    fclose(f);
    if (i != n) {
        if (!bad) fprintf(stderr, "%s: torch's state_dict has %d tensors, lazyc's %d\n", name, i, n);
        bad++;
    }
    return bad;
}

/* ---- inputs -------------------------------------------------------------- */

/* ---- the smoke test of one model ---------------------------------------- */

enum { CAPTURED_STEPS = 5 };

static void test_model(const char *name)
{
    lz_clear_error();
    lz_model *m = lz_model_new(name, "smoke", 1);
    CHECK(m != NULL);
    if (!m) { fprintf(stderr, "%s: %s\n", name, lz_last_error()); return; }
    const lz_model_spec *s = lz_model_get_spec(m);
    CHECK(s->name && !strcmp(s->name, name));
    int diffs = check_listing(name, m);
    CHECK_EQ_I(diffs, 0);

    lz_test_trainer t = { m, lz_test_model_sgd(m, 0.01f) };
    CHECK(t.opt != NULL);
    lz_tensor *x, *y;
    lz_test_model_batch(s, 1, &x, &y);
    float warm = lazy_step(&t, x, y);
    CHECK(isfinite(warm));

    lz_cache_clear();
    lz_wait();
    lz_metrics_reset();
    lz_fn *f = lz_capture(lz_test_sgd_step, &t, 2, 1);
    float losses[CAPTURED_STEPS];
    int bad_exec = 0;
    for (int step = 0; step < CAPTURED_STEPS; step++) {
        lz_tensor *in[2] = { x, y }, *out[1] = { NULL };
        int64_t before = lz_metrics_get().executions;
        CHECK_EQ_I(lz_call(f, in, out), 0);
        losses[step] = out[0] ? lz_item(out[0]) : NAN;
        if (lz_metrics_get().executions - before != 1) bad_exec++;
        CHECK(isfinite(losses[step]));
        lz_free(out[0]);
    }
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(bad_exec, 0);
    CHECK_EQ_I(mt.executions, CAPTURED_STEPS);
    CHECK_EQ_I(mt.compiles, 1);
    CHECK_EQ_I(mt.capture_replays, CAPTURED_STEPS - 1);
    CHECK_EQ_I(mt.capture_fallbacks, 0);
    printf("%-24s %10lld params  listing %s  loss %.4f -> %.4f  executions %lld compiles %lld  "
           "trace %.0f ms compile %.0f ms execute %.0f ms\n",
           name, (long long)lz_params_numel(lz_model_params(m), 1), diffs ? "DIFFERS" : "ok",
           warm, losses[CAPTURED_STEPS - 1], (long long)mt.executions, (long long)mt.compiles,
           mt.trace_ms, mt.compile_ms, mt.execute_ms);
    fflush(stdout);
    lz_fn_free(f);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(t.opt);
    lz_model_free(m);
}

static void test_registry(void)
{
    static const char *const expected[] = {
        "resnet50", "resnet18", "BERT_pytorch", "resnext50_32x4d", "alexnet",
        "mobilenet_v2", "mnasnet1_0", "vgg16", "timm_vision_transformer", "squeezenet1_1",
    };
    const char *const *names = lz_model_names();
    int n = 0;
    while (names[n]) n++;
    CHECK_EQ_I(n, 10);
    for (int i = 0; i < n && i < 10; i++) CHECK(!strcmp(names[i], expected[i]));

    lz_clear_error();
    CHECK(lz_model_new("resnet51", "smoke", 0) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "resnet51"));
    lz_clear_error();
    CHECK(lz_model_new("resnet18", "huge", 0) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "huge"));
    lz_clear_error();
    CHECK(lz_model_new(NULL, "smoke", 0) == NULL);
    CHECK(lz_last_error() != NULL);
}

/* ---- parity mode ----------------------------------------------------------- */

static int run_sgd(const char *name, const char *weights, const char *inputs, const char *out,
                   const char *steps_arg, int all_lazy)
{
    char *end;
    long steps = strtol(steps_arg, &end, 10), save = steps;
    if (*end == ':') save = strtol(end + 1, &end, 10);
    if (*end || steps < 1 || steps > 1000 || save < 1 || save > steps) {
        fprintf(stderr, "test_models sgd: steps '%s' is not STEPS or STEPS:SAVE with 1 <= SAVE <= STEPS <= 1000\n",
                steps_arg);
        return 2;
    }
    lz_model *m = lz_model_new(name, "smoke", 1);
    if (!m) { fprintf(stderr, "test_models sgd: %s\n", lz_last_error()); return 1; }
    lz_model_set_dropout(m, 0);
    if (lz_safetensors_load(weights, lz_model_params(m), 1)) {
        fprintf(stderr, "test_models sgd: %s\n", lz_last_error());
        lz_model_free(m);
        return 1;
    }
    lz_params *batch = lz_safetensors_read(inputs);
    lz_tensor *x = batch ? lz_params_find(batch, "x") : NULL, *y = batch ? lz_params_find(batch, "y") : NULL;
    if (!x || !y) {
        fprintf(stderr, "test_models sgd: %s: %s\n", inputs, lz_last_error() ? lz_last_error() : "no x or y");
        lz_params_free(batch);
        lz_model_free(m);
        return 1;
    }
    lz_test_trainer t = { m, lz_test_model_sgd(m, 0.01f) };
    int rc = 0;
    float loss = lazy_step(&t, x, y);
    printf("step 0 loss %.9g\n", loss);
    if (!isfinite(loss)) rc = 1;
    if (!rc && save == 1 && (lz_wait() || lz_safetensors_save(out, lz_model_params(m)))) rc = 1;
    lz_fn *f = lz_capture(lz_test_sgd_step, &t, 2, 1);
    for (int step = 1; step < steps && !rc; step++) {
        if (all_lazy) {
            loss = lazy_step(&t, x, y);
            printf("step %d loss %.9g (lazy)\n", step, loss);
            if (!isfinite(loss)) rc = 1;
            if (!rc && step + 1 == save && (lz_wait() || lz_safetensors_save(out, lz_model_params(m)))) rc = 1;
            continue;
        }
        lz_tensor *in[2] = { x, y }, *o[1] = { NULL };
        if (lz_call(f, in, o)) { rc = 1; break; }
        loss = lz_item(o[0]);
        printf("step %d loss %.9g\n", step, loss);
        lz_free(o[0]);
        if (step + 1 == save && (lz_wait() || lz_safetensors_save(out, lz_model_params(m)))) rc = 1;
    }
    if (rc) fprintf(stderr, "test_models sgd %s: %s\n", name, lz_last_error() ? lz_last_error() : "failed");
    lz_fn_free(f);
    lz_sgd_free(t.opt);
    lz_params_free(batch);
    lz_model_free(m);
    return rc;
}

static void report_no_grad(const char *model, const char *param)
{
    fprintf(stderr, "test_models grads %s: %s has no gradient\n", model, param);
}

/* One forward and backward pass (batch-norm statistics in train or eval
   mode, dropout off): loss and every parameter's gradient to out. */
static int run_grads(const char *name, const char *weights, const char *inputs, const char *out,
                     int training)
{
    lz_model *m = lz_model_new(name, "smoke", 1);
    lz_params *batch = NULL, *res = NULL;
    int rc = 1;
    if (!m) goto done;
    lz_model_set_dropout(m, 0);
    if (lz_safetensors_load(weights, lz_model_params(m), 1)) goto done;
    batch = lz_safetensors_read(inputs);
    lz_tensor *x = batch ? lz_params_find(batch, "x") : NULL, *y = batch ? lz_params_find(batch, "y") : NULL;
    if (!x || !y) goto done;
    lz_tensor *loss = lz_model_loss(m, x, y, training);
    if (!loss || lz_backward(loss)) goto done;
    /* one graph for the loss and every gradient: read one at a time, each
       would run its own graph, recomputing the backward pass they share */
    lz_mark_step();
    float l = lz_item(loss);
    lz_free(loss);
    res = lz_params_new();
    lz_params_add(res, "loss", lz_from_host(&l, LZ_F32, 0, NULL), 0);
    lz_params *p = lz_model_params(m);
    for (int i = 0; i < lz_params_count(p); i++) {
        if (!lz_params_trainable(p, i)) continue;
        lz_tensor *g = lz_grad(lz_params_at(p, i));
        if (!g) {
            report_no_grad(name, lz_params_name(p, i));
            goto done;
        }
        float *v = lz_test_read(g);
        int64_t shape[LZ_MAX_DIMS];
        for (int d = 0; d < lz_ndim(g); d++) shape[d] = lz_dim(g, d);
        lz_tensor *copy = v ? lz_from_host(v, LZ_F32, lz_ndim(g), shape) : NULL;
        free(v);
        if (!copy || !lz_params_add(res, lz_params_name(p, i), copy, 0)) goto done;
    }
    rc = lz_safetensors_save(out, res) ? 1 : 0;
done:
    if (rc) fprintf(stderr, "test_models grads %s: %s\n", name, lz_last_error() ? lz_last_error() : "failed");
    lz_params_free(res);
    lz_params_free(batch);
    lz_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && !strcmp(argv[1], "grads"))
        return run_grads(argv[2], argv[3], argv[4], argv[5], !(argc > 6 && !strcmp(argv[6], "eval")));
    if (argc >= 6 && !strcmp(argv[1], "sgd"))
        return run_sgd(argv[2], argv[3], argv[4], argv[5], argc > 6 ? argv[6] : "3",
                       argc > 7 && !strcmp(argv[7], "lazy"));
    if (argc > 1 && strcmp(argv[1], "--model") != 0) {
        fprintf(stderr, "usage: test_models [--model NAME]\n"
                        "       test_models sgd NAME WEIGHTS INPUTS OUT [STEPS[:SAVE] [lazy]]\n"
                        "       test_models grads NAME WEIGHTS INPUTS OUT [eval]\n");
        return 2;
    }
    test_registry();
    const char *only = argc > 2 ? argv[2] : NULL;
    for (const char *const *n = lz_model_names(); *n; n++)
        if (!only || !strcmp(only, *n)) test_model(*n);
    /* lazyc train's models with a torch definition (lz_model_names lists
       only the reference ten) */
    static const char *const train_models[] = { "resnet18_fmnist" };
    for (size_t i = 0; i < sizeof train_models / sizeof *train_models; i++)
        if (!only || !strcmp(only, train_models[i])) test_model(train_models[i]);
    return lz_test_done();
}
