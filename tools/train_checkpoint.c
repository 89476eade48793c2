/* lazyc train's checkpoints: the model's parameters and buffers, the
 * optimizer's and the generator's state as one safetensors file, with
 * the run's position and settings in its __metadata__ (train_meta). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* Everything a checkpoint holds, as one named set of new handles. */
static lz_params *checkpoint_set(trainer *t)
{
    lz_params *ck = lz_params_new(), *mp = lz_model_params(t->model);
    int rc = ck ? 0 : -1;
    for (int i = 0; rc == 0 && i < lz_params_count(mp); i++)
        if (!lz_params_add(ck, lz_params_name(mp, i), lz_retain(lz_params_at(mp, i)), 0)) rc = -1;
    if (rc == 0) rc = lz_optimizer_state(t->opt, ck, "optimizer");
    if (rc == 0) rc = lz_rng_state(ck, "rng");
    if (rc != 0) { lz_params_free(ck); return NULL; }
    return ck;
}

int train_state_finite(trainer *t)
{
    lz_params *ck = checkpoint_set(t);
    if (!ck) return -1;
    lz_scope_begin();
    lz_tensor *all = NULL;
    for (int i = 0; i < lz_params_count(ck); i++) {
        lz_tensor *x = lz_params_at(ck, i);
        if (lz_tensor_dtype(x) != LZ_F32) continue;
        lz_tensor *f = lz_all_finite(x);
        all = !f ? NULL : all ? lz_mul(all, f) : f;
        if (!all) break;
    }
    float v = all ? lz_item(all) : 1.0f;
    int failed = !all && lz_last_error();
    lz_scope_end();
    lz_params_free(ck);
    return failed || v != v ? -1 : v == 1.0f;
}

/* PyTorch's batch norm counts the training-mode batches it has seen;
   lazyc's layers leave the buffer at 0, and one training step is one
   batch per layer, so the step count is the value. */
static int count_batches(trainer *t, long steps)
{
    lz_params *mp = lz_model_params(t->model);
    const char *leaf = ".num_batches_tracked";
    size_t ll = strlen(leaf);
    int64_t v = steps;
    for (int i = 0; i < lz_params_count(mp); i++) {
        const char *name = lz_params_name(mp, i);
        size_t n = strlen(name);
        lz_tensor *x = lz_params_at(mp, i);
        if (n >= ll && !strcmp(name + n - ll, leaf) && lz_tensor_dtype(x) == LZ_I64 && lz_numel(x) == 1 &&
            lz_copy_from_host(x, &v, sizeof v) != 0)
            return -1;
    }
    return 0;
}

enum { N_META = 15 };

int train_save(trainer *t, const char *path, const train_meta *m)
{
    if (count_batches(t, m->step) != 0) return -1;
    lz_params *ck = checkpoint_set(t);
    if (!ck) return -1;
    char v[N_META][72];
    const char *keys[N_META] = {"model", "optimizer", "schedule", "epoch", "batch_in_epoch", "step",
                                "steps_per_epoch", "schedule_epochs", "schedule_steps", "batch", "seed",
                                "train_images", "lr", "weight_decay", "format"};
    snprintf(v[0], sizeof v[0], "%s", m->model);
    snprintf(v[1], sizeof v[1], "%s", m->optimizer);
    snprintf(v[2], sizeof v[2], "%s", m->schedule);
    const long ints[9] = {m->epoch, m->batch_in_epoch, m->step, m->steps_per_epoch, m->schedule_epochs,
                          m->schedule_steps, m->batch, m->seed, m->train_images};
    for (int i = 0; i < 9; i++) snprintf(v[3 + i], sizeof v[3 + i], "%ld", ints[i]);
    /* %.17g: the double reads back exactly, so a resume compares equal */
    snprintf(v[12], sizeof v[12], "%.17g", m->lr);
    snprintf(v[13], sizeof v[13], "%.17g", m->weight_decay);
    snprintf(v[14], sizeof v[14], "lazyc train 2");
    const char *vals[N_META];
    for (int i = 0; i < N_META; i++) vals[i] = v[i];
    int rc = lz_safetensors_save_meta(path, ck, N_META, keys, vals);
    lz_params_free(ck);
    return rc;
}

/* The value of key as a long/double/string; missing: -1 and *have = 0. */
static int meta_str(const char *path, const char *key, char *out, size_t cap, int *have)
{
    char *s = lz_safetensors_read_meta(path, key);
    if (!s) { *have = 0; lz_clear_error(); return -1; }
    snprintf(out, cap, "%s", s);
    free(s);
    return 0;
}

static int meta_long(const char *path, const char *key, long *out, int *have)
{
    char s[64], *end;
    if (meta_str(path, key, s, sizeof s, have)) return -1;
    *out = strtol(s, &end, 10);
    if (end == s || *end) { *have = 0; return -1; }
    return 0;
}

static int meta_double(const char *path, const char *key, double *out, int *have)
{
    char s[64], *end;
    if (meta_str(path, key, s, sizeof s, have)) return -1;
    *out = strtod(s, &end);
    if (end == s || *end) { *have = 0; return -1; }
    return 0;
}

int train_load(trainer *t, const char *path, const char *model, const char *optimizer, train_meta *m)
{
    memset(m, 0, sizeof *m);
    /* the first read reports a missing or broken file in full */
    char *name = lz_safetensors_read_meta(path, "model");
    if (!name) {
        fprintf(stderr, "lazyc train: cannot resume from %s: %s\n", path, lz_last_error());
        return -1;
    }
    snprintf(m->model, sizeof m->model, "%s", name);
    free(name);
    if (strcmp(m->model, model)) {
        fprintf(stderr, "lazyc train: %s holds another model than %s (%s)\n", path, model, m->model);
        return -1;
    }
    int have = 1;
    meta_long(path, "epoch", &m->epoch, &have);
    meta_long(path, "step", &m->step, &have);
    meta_long(path, "schedule_steps", &m->schedule_steps, &have);
    if (!have) {
        fprintf(stderr, "lazyc train: cannot resume from %s: it has no epoch, step or schedule_steps in "
                "its __metadata__ (not written by lazyc train)\n", path);
        return -1;
    }
    int full = 1;
    meta_str(path, "optimizer", m->optimizer, sizeof m->optimizer, &full);
    meta_str(path, "schedule", m->schedule, sizeof m->schedule, &full);
    meta_long(path, "batch_in_epoch", &m->batch_in_epoch, &full);
    meta_long(path, "steps_per_epoch", &m->steps_per_epoch, &full);
    meta_long(path, "schedule_epochs", &m->schedule_epochs, &full);
    meta_long(path, "batch", &m->batch, &full);
    meta_long(path, "seed", &m->seed, &full);
    meta_long(path, "train_images", &m->train_images, &full);
    meta_double(path, "lr", &m->lr, &full);
    meta_double(path, "weight_decay", &m->weight_decay, &full);
    m->complete = full;
    if (!full) m->batch_in_epoch = 0;
    if (full && strcmp(m->optimizer, optimizer)) {
        fprintf(stderr, "lazyc train: %s holds %s's state; resume it with --optimizer %s\n", path,
                m->optimizer, m->optimizer);
        return -1;
    }
    if (m->epoch < 0 || m->step < 0 || m->batch_in_epoch < 0 || m->schedule_steps < 0) {
        fprintf(stderr, "lazyc train: cannot resume from %s: negative epoch, step or schedule in its "
                "__metadata__\n", path);
        return -1;
    }
    lz_params *ck = checkpoint_set(t);
    int rc = ck ? lz_safetensors_load(path, ck, 1) : -1;
    lz_params_free(ck);
    if (rc != 0) fprintf(stderr, "lazyc train: cannot resume from %s: %s\n", path, lz_last_error());
    return rc;
}
