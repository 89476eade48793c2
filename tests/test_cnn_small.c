/* The small CNNs of the zoo (mobilenet_v2, mnasnet1_0, squeezenet1_1) at
 * smoke size: parameter names, shapes, dtypes and trainable flags equal
 * torchvision's state_dict (the listing tests/reference/gen_model_names.py
 * writes), the forward pass has the spec's shape in training and eval mode,
 * dropout draws a new mask on each call, and captured SGD steps lower the
 * loss on a fixed batch as one execution per step after one compile. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "zoo.h"

static const char *const MODELS[] = {"mobilenet_v2", "mnasnet1_0", "squeezenet1_1"};

static const char *dtype_name(lz_dtype d)
{
    return d == LZ_F32 ? "f32" : d == LZ_I64 ? "i64" : d == LZ_I32 ? "i32" : "?";
}

/* Compares one listing line ("param|buffer NAME DTYPE NDIM D0 ...") with
   entry i of p; prints the first difference. 1 if equal. */
static int entry_matches(const lz_params *p, int i, char *line, const char *model)
{
    char *save = NULL;
    const char *kind = strtok_r(line, " \n", &save);
    const char *name = strtok_r(NULL, " \n", &save);
    const char *dtype = strtok_r(NULL, " \n", &save);
    const char *nd = strtok_r(NULL, " \n", &save);
    if (!kind || !name || !dtype || !nd) {
        fprintf(stderr, "%s: malformed listing line %d\n", model, i + 2);
        return 0;
    }
    const char *have = lz_params_name(p, i);
    lz_tensor *t = lz_params_at(p, i);
    if (!have || !t || strcmp(have, name)) {
        fprintf(stderr, "%s: entry %d is %s, torchvision has %s\n", model, i, have ? have : "(none)", name);
        return 0;
    }
    int trainable = !strcmp(kind, "param");
    if (lz_params_trainable(p, i) != trainable) {
        fprintf(stderr, "%s: %s: trainable %d, torchvision %d\n", model, name, lz_params_trainable(p, i), trainable);
        return 0;
    }
    if (strcmp(dtype_name(lz_tensor_dtype(t)), dtype)) {
        fprintf(stderr, "%s: %s: dtype %s, torchvision %s\n", model, name, dtype_name(lz_tensor_dtype(t)), dtype);
        return 0;
    }
    int ndim = atoi(nd);
    int ok = lz_ndim(t) == ndim;
    for (int d = 0; ok && d < ndim; d++) {
        const char *dim = strtok_r(NULL, " \n", &save);
        ok = dim && lz_dim(t, d) == atoll(dim);
    }
    if (!ok) fprintf(stderr, "%s: %s: shape differs from torchvision's\n", model, name);
    return ok;
}

static void test_names(lz_model *m, const char *model)
{
    char path[256], line[512];
    snprintf(path, sizeof path, "fixtures/model_names/%s.txt", model);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char head[128];
    snprintf(head, sizeof head, "lazyc-model-names 1 %s\n", model);
    CHECK(fgets(line, sizeof line, f) && !strcmp(line, head));
    const lz_params *p = lz_model_params(m);
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (n >= lz_params_count(p)) {
            fprintf(stderr, "%s: lazyc lacks %s", model, line);
            bad++;
        } else if (!entry_matches(p, n, line, model)) {
            bad++;
        }
        n++;
        if (bad > 5) break;
    }
    fclose(f);
    CHECK_EQ_I(bad, 0);
    CHECK_EQ_I(lz_params_count(p), n);
}

static int all_finite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

static void test_forward(lz_model *m)
{
    const lz_model_spec *s = lz_model_get_spec(m);
    CHECK_EQ_I(s->input_ndim, 4);
    CHECK_EQ_I(s->input_shape[0], 2);
    CHECK_EQ_I(s->input_shape[2], 64);
    CHECK_EQ_I(s->num_classes, 10);
    lz_tensor *x = lz_test_rand(7, -1, 1, s->input_ndim, s->input_shape);
    for (int training = 1; training >= 0; training--) {
        lz_scope_begin();
        lz_tensor *y = lz_model_forward(m, x, training);
        CHECK(y != NULL);
        if (y) {
            CHECK_EQ_I(lz_ndim(y), 2);
            CHECK_EQ_I(lz_dim(y, 0), s->input_shape[0]);
            CHECK_EQ_I(lz_dim(y, 1), s->num_classes);
            float *v = lz_test_read(y);
            CHECK(v && all_finite(v, lz_numel(y)));
            free(v);
        }
        lz_scope_end();
    }
    /* dropout on: two training calls draw different masks */
    lz_tensor *a = lz_model_forward(m, x, 1), *b = lz_model_forward(m, x, 1);
    float *va = a ? lz_test_read(a) : NULL, *vb = b ? lz_test_read(b) : NULL;
    CHECK(va && vb && memcmp(va, vb, sizeof *va * (size_t)lz_numel(a)) != 0);
    free(va); free(vb);
    lz_free(a); lz_free(b);
    lz_free(x);
}

/* Six captured steps on one batch, dropout off so the loss is a function of
   the weights alone: it must fall, and after the first (warm-up) call the
   five others run as one execution each and compile nothing: the warm-up
   call cuts the same graph as the capture, so its compile serves both. Batch norm over
   a batch of 2 makes these nets sharp (mnasnet's loss first rises in
   PyTorch too), hence the small learning rate. */
static void test_training(lz_model *m, const char *model)
{
    enum { STEPS = 6 };
    const lz_model_spec *s = lz_model_get_spec(m);
    lz_test_trainer t = {m, lz_test_model_sgd(m, 0.003f)};
    CHECK(t.opt != NULL);
    lz_model_set_dropout(m, 0);
    lz_tensor *x = lz_test_rand(11, -1, 1, s->input_ndim, s->input_shape);
    int64_t lab[2] = {3, 8};
    lz_tensor *y = lz_from_host(lab, LZ_I64, s->target_ndim, s->target_shape);
    lz_fn *f = lz_capture(lz_test_sgd_step, &t, 2, 1);
    float loss[STEPS];
    lz_tensor *in[2] = {x, y};
    for (int i = 0; i < STEPS; i++) {
        if (i == 1) {
            lz_wait();
            lz_metrics_reset();
        }
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        loss[i] = out[0] ? lz_item(out[0]) : NAN;
        lz_free(out[0]);
    }
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.executions, STEPS - 1);
    CHECK_EQ_I(mt.compiles, 0);
    fprintf(stderr, "%s: loss", model);
    for (int i = 0; i < STEPS; i++) fprintf(stderr, " %.4f", loss[i]);
    fprintf(stderr, "\n");
    CHECK(all_finite(loss, STEPS));
    CHECK(loss[STEPS - 1] < loss[0]);
    lz_model_set_dropout(m, 1);
    lz_fn_free(f);
    lz_sgd_free(t.opt);
    lz_free(x); lz_free(y);
}

int main(void)
{
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        lz_model *m = lz_model_new(MODELS[i], "smoke", 1);
        CHECK(m != NULL);
        if (!m) continue;
        test_names(m, MODELS[i]);
        test_forward(m);
        test_training(m, MODELS[i]);
        lz_model_free(m);
    }
    return lz_test_done();
}
