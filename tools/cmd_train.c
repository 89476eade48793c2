/* lazyc train: trains a model on Fashion-MNIST in captured mode (one
 * execution per step), evaluates on the test set after each epoch, and
 * writes a JSON summary (with the training steps and the executions they
 * enqueued, so a test sees that capture held); checkpoints hold
 * parameters, buffers, optimizer and generator state, with the epoch and
 * step in the header, so --resume continues exactly where a run stopped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lazyc.h"
#include "zoo.h"

typedef struct train_opts {
    const char *data, *data_dir, *model, *optimizer, *schedule, *save, *resume, *summary;
    long epochs, batch, seed, train_limit, test_limit;
    long schedule_epochs;    /* the cosine schedule's length; 0: --epochs */
    double lr, weight_decay;
} train_opts;

typedef struct trainer {
    lz_model *model;
    lz_sgd *sgd;
    lz_adamw *adamw;
} trainer;

/* --model NAME -> the zoo's builder name (lz_model_new) */
static const struct { const char *cli, *zoo; } train_models[] = {
    {"cnn", "cnn"},
    {"resnet18", "resnet18_fmnist"},
};
#define N_TRAIN_MODELS ((int)(sizeof train_models / sizeof train_models[0]))

static const char *zoo_name(const char *model)
{
    for (int i = 0; i < N_TRAIN_MODELS; i++)
        if (!strcmp(train_models[i].cli, model)) return train_models[i].zoo;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazyc train --data fashion-mnist [--data-dir D] [--model cnn|resnet18]\n"
            "                   [--epochs N] [--batch B] [--lr LR] [--weight-decay WD]\n"
            "                   [--optimizer adamw|sgd] [--schedule cosine|none] [--seed S]\n"
            "                   [--save CKPT] [--resume CKPT] [--summary FILE]\n"
            "                   [--train-limit N] [--test-limit N] [--schedule-epochs N]\n"
            "Defaults: cnn, 3 epochs, batch 128, AdamW lr 2e-3 weight decay 5e-4, cosine\n"
            "schedule, seed 1, data in /usr/share/datasets/fashion-mnist, summary in\n"
            "train-out/summary.json. The last partial training batch is dropped; the test\n"
            "set is evaluated whole. The cosine schedule spans --schedule-epochs (default\n"
            "--epochs); a checkpoint remembers it, so `--epochs 1 --schedule-epochs 2 --save C`\n"
            "then `--epochs 2 --resume C` equals one 2-epoch run bit for bit.\n"
            "resnet18 is torchvision's ResNet-18 with a 3x3 stride-1 stem from 1 channel\n"
            "and no max-pool, for 28x28 images (models/resnet.c).\n");
}

/* in = {x, y}; out[0] = loss. The captured training step. */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    trainer *t = ctx;
    if (t->adamw) lz_adamw_zero_grad(t->adamw); else lz_sgd_zero_grad(t->sgd);
    lz_tensor *loss = lz_model_loss(t->model, in[0], in[1], 1);
    if (!loss || lz_backward(loss) != 0) return -1;
    if ((t->adamw ? lz_adamw_step(t->adamw) : lz_sgd_step(t->sgd)) != 0) return -1;
    out[0] = loss;
    return 0;
}

/* in = {x}; out[0] = logits in eval mode. */
static int eval_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    trainer *t = ctx;
    lz_no_grad_begin();
    out[0] = lz_model_forward(t->model, in[0], 0);
    lz_no_grad_end();
    return out[0] ? 0 : -1;
}

static double evaluate(trainer *t, lz_fn *eval, lz_loader *test)
{
    lz_loader_start_epoch(test, 0);
    int64_t right = 0, seen = 0;
    lz_tensor *x, *y;
    float *logits = NULL;
    int64_t *labels = NULL;
    int rc;
    while ((rc = lz_loader_next(test, &x, &y)) == 1) {
        int64_t b = lz_dim(y, 0), c = 10;
        lz_tensor *out[1] = {NULL};
        logits = realloc(logits, sizeof *logits * (size_t)(b * c));
        labels = realloc(labels, sizeof *labels * (size_t)b);
        if (lz_call(eval, &x, out) != 0 || lz_to_host(out[0], logits, sizeof *logits * (size_t)(b * c)) != 0 ||
            lz_to_host(y, labels, sizeof *labels * (size_t)b) != 0) {
            rc = -1;
            lz_free(out[0]); lz_free(x); lz_free(y);
            break;
        }
        for (int64_t i = 0; i < b; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < c; k++)
                if (logits[i * c + k] > logits[i * c + best]) best = k;
            right += best == labels[i];
        }
        seen += b;
        lz_free(out[0]); lz_free(x); lz_free(y);
    }
    free(logits);
    free(labels);
    (void)t;
    return rc < 0 || !seen ? NAN : (double)right / (double)seen;
}

/* Everything a checkpoint holds, as one named set of new handles. */
static lz_params *checkpoint_set(trainer *t)
{
    lz_params *ck = lz_params_new(), *mp = lz_model_params(t->model);
    int rc = ck ? 0 : -1;
    for (int i = 0; rc == 0 && i < lz_params_count(mp); i++)
        if (!lz_params_add(ck, lz_params_name(mp, i), lz_retain(lz_params_at(mp, i)), 0)) rc = -1;
    if (rc == 0) rc = t->adamw ? lz_adamw_state(t->adamw, ck, "optimizer") : lz_sgd_state(t->sgd, ck, "optimizer");
    if (rc == 0) rc = lz_rng_state(ck, "rng");
    if (rc != 0) { lz_params_free(ck); return NULL; }
    return ck;
}

static int save_checkpoint(trainer *t, const char *path, long epoch, long step, long schedule_steps,
                           const char *model)
{
    lz_params *ck = checkpoint_set(t);
    if (!ck) return -1;
    char e[32], s[32], h[32];
    snprintf(e, sizeof e, "%ld", epoch);
    snprintf(s, sizeof s, "%ld", step);
    snprintf(h, sizeof h, "%ld", schedule_steps);
    const char *keys[4] = {"epoch", "step", "schedule_steps", "model"}, *vals[4] = {e, s, h, model};
    int rc = lz_safetensors_save_meta(path, ck, 4, keys, vals);
    lz_params_free(ck);
    return rc;
}

static int load_checkpoint(trainer *t, const char *path, const char *model, long *epoch, long *step,
                           long *schedule_steps)
{
    char *m = lz_safetensors_read_meta(path, "model");
    if (!m) return -1;
    int same = strcmp(m, model) == 0;
    free(m);
    if (!same) {
        fprintf(stderr, "lazyc train: %s holds another model than %s\n", path, model);
        return -1;
    }
    char *e = lz_safetensors_read_meta(path, "epoch"), *s = lz_safetensors_read_meta(path, "step");
    char *h = lz_safetensors_read_meta(path, "schedule_steps");
    if (!e || !s || !h) { free(e); free(s); free(h); return -1; }
    *epoch = atol(e);
    *step = atol(s);
    *schedule_steps = atol(h);
    free(e); free(s); free(h);
    lz_params *ck = checkpoint_set(t);
    if (!ck) return -1;
    int rc = lz_safetensors_load(path, ck, 1);
    lz_params_free(ck);
    return rc;
}

static void progress(int tty, long epoch, long epochs, int64_t done, int64_t total, double loss,
                     double ips, double eta)
{
    if (tty) {
        int width = 30, fill = total ? (int)(width * done / total) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        printf("\repoch %ld/%ld [%s] %lld/%lld loss %.4f %6.0f img/s ETA %02d:%02d ", epoch, epochs, bar,
               (long long)done, (long long)total, loss, ips, (int)eta / 60, (int)eta % 60);
        fflush(stdout);
    } else {
        printf("epoch %ld/%ld step %lld/%lld loss %.4f %.0f img/s ETA %.0fs\n", epoch, epochs,
               (long long)done, (long long)total, loss, ips, eta);
    }
}

static int parse(int argc, char **argv, train_opts *o)
{
    *o = (train_opts){.data = NULL, .data_dir = "/usr/share/datasets/fashion-mnist", .model = "cnn",
                      .optimizer = "adamw", .schedule = "cosine", .summary = "train-out/summary.json",
                      .epochs = 3, .batch = 128, .seed = 1, .lr = 2e-3, .weight_decay = 5e-4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **str = !strcmp(a, "--data") ? &o->data : !strcmp(a, "--data-dir") ? &o->data_dir
                         : !strcmp(a, "--model") ? &o->model : !strcmp(a, "--optimizer") ? &o->optimizer
                         : !strcmp(a, "--schedule") ? &o->schedule : !strcmp(a, "--save") ? &o->save
                         : !strcmp(a, "--resume") ? &o->resume : !strcmp(a, "--summary") ? &o->summary : NULL;
        long *num = !strcmp(a, "--epochs") ? &o->epochs : !strcmp(a, "--batch") ? &o->batch
                  : !strcmp(a, "--seed") ? &o->seed : !strcmp(a, "--train-limit") ? &o->train_limit
                  : !strcmp(a, "--test-limit") ? &o->test_limit
                  : !strcmp(a, "--schedule-epochs") ? &o->schedule_epochs : NULL;
        double *real = !strcmp(a, "--lr") ? &o->lr : !strcmp(a, "--weight-decay") ? &o->weight_decay : NULL;
        if (lz_cli_is_help(a)) { usage(stdout); exit(0); }
        if (str) {
            if (!v) { fprintf(stderr, "lazyc train: %s needs a value\n", a); return -1; }
            *str = v;
        } else if (num) {
            if (lz_cli_int(a, v, !strcmp(a, "--seed") || strstr(a, "limit") ? 0 : 1, 1L << 40, num)) return -1;
        } else if (real) {
            if (lz_cli_float(a, v, 0, 10, real)) return -1;
        } else {
            fprintf(stderr, "lazyc train: unknown option '%s'\n", a);
            return -1;
        }
        i++;
    }
    if (!o->data || strcmp(o->data, "fashion-mnist")) {
        fprintf(stderr, "lazyc train: --data fashion-mnist is required (the only data set)\n");
        return -1;
    }
    if (!zoo_name(o->model)) {
        fprintf(stderr, "lazyc train: unknown --model '%s' (", o->model);
        for (int i = 0; i < N_TRAIN_MODELS; i++)
            fprintf(stderr, "%s%s", i ? (i == N_TRAIN_MODELS - 1 ? " or " : ", ") : "", train_models[i].cli);
        fprintf(stderr, ")\n");
        return -1;
    }
    if (strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd")) {
        fprintf(stderr, "lazyc train: unknown --optimizer '%s' (adamw or sgd)\n", o->optimizer);
        return -1;
    }
    if (strcmp(o->schedule, "cosine") && strcmp(o->schedule, "none")) {
        fprintf(stderr, "lazyc train: unknown --schedule '%s' (cosine or none)\n", o->schedule);
        return -1;
    }
    return 0;
}

static void make_parent_dir(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(dir, 0755); *p = '/'; }
    mkdir(dir, 0755);
}

int lz_cmd_train(int argc, char **argv)
{
    train_opts o;
    if (parse(argc, argv, &o) != 0) { usage(stderr); return LZ_CLI_USAGE_ERROR; }
    /* progress lines reach a log file as they happen, not at exit */
    setvbuf(stdout, NULL, _IOLBF, 0);
    lz_dataset *tr = lz_dataset_fashion_mnist(o.data_dir, 1), *te = tr ? lz_dataset_fashion_mnist(o.data_dir, 0) : NULL;
    if (!tr || !te) {
        fprintf(stderr, "lazyc train: %s\n", lz_last_error());
        lz_dataset_free(tr);
        return LZ_CLI_USAGE_ERROR;
    }
    if ((o.train_limit && lz_dataset_truncate(tr, o.train_limit < lz_dataset_size(tr) ? o.train_limit : lz_dataset_size(tr))) ||
        (o.test_limit && lz_dataset_truncate(te, o.test_limit < lz_dataset_size(te) ? o.test_limit : lz_dataset_size(te)))) {
        fprintf(stderr, "lazyc train: %s\n", lz_last_error());
        return LZ_CLI_USAGE_ERROR;
    }
    /* Fashion-MNIST's mean and std over the training pixels */
    lz_loader_opts lo = {.batch = o.batch, .shuffle = 1, .drop_last = 1, .seed = (uint64_t)o.seed,
                         .mean = 0.2860f, .std = 0.3530f};
    lz_loader *train = lz_loader_new(tr, lo);
    lo.shuffle = 0;
    lo.drop_last = 0;
    lo.batch = 1000 < lz_dataset_size(te) ? 1000 : lz_dataset_size(te);
    lz_loader *test = lz_loader_new(te, lo);
    lz_manual_seed((uint64_t)o.seed);
    trainer t = {.model = lz_model_new(zoo_name(o.model), "smoke", (uint64_t)o.seed)};
    int status = 1;
    lz_fn *step_fn = NULL, *eval_fn = NULL;
    FILE *sum = NULL;
    if (!train || !test || !t.model) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }
    if (lz_loader_batches(train) == 0) {
        fprintf(stderr, "lazyc train: fewer training images than one batch of %ld\n", o.batch);
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    lz_tensor *ps[512];
    int np = lz_params_trainable_list(lz_model_params(t.model), ps, 512);
    if (!strcmp(o.optimizer, "adamw"))
        t.adamw = lz_adamw_new(ps, np, (lz_adamw_opts){.lr = (float)o.lr, .beta1 = 0.9f, .beta2 = 0.999f,
                                                       .eps = 1e-8f, .weight_decay = (float)o.weight_decay, .decoupled = 1});
    else
        t.sgd = lz_sgd_new(ps, np, (lz_sgd_opts){.lr = (float)o.lr, .momentum = 0.9f, .weight_decay = (float)o.weight_decay});
    if (!t.adamw && !t.sgd) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }

    int64_t per_epoch = lz_loader_batches(train);
    long first_epoch = 0, step = 0, schedule_steps = per_epoch * (o.schedule_epochs ? o.schedule_epochs : o.epochs);
    long resumed_schedule = 0;
    if (o.resume && load_checkpoint(&t, o.resume, o.model, &first_epoch, &step, &resumed_schedule) != 0) {
        fprintf(stderr, "lazyc train: cannot resume from %s: %s\n", o.resume, lz_last_error() ? lz_last_error() : "");
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    if (o.resume && !o.schedule_epochs) schedule_steps = resumed_schedule;
    step_fn = lz_capture(train_step, &t, 2, 1);
    eval_fn = lz_capture(eval_step, &t, 1, 1);
    int tty = isatty(STDOUT_FILENO);
    make_parent_dir(o.summary);
    sum = fopen(o.summary, "w");
    if (!sum) { fprintf(stderr, "lazyc train: cannot write %s\n", o.summary); status = LZ_CLI_USAGE_ERROR; goto done; }
    fprintf(sum, "{\"model\": \"%s\", \"epochs\": [", o.model);
    printf("training %s on %lld Fashion-MNIST images (%lld steps of %ld per epoch), testing on %lld\n",
           o.model, (long long)lz_dataset_size(tr), (long long)per_epoch, o.batch, (long long)lz_dataset_size(te));
    double train_s = 0, t_start = now_s(), acc = NAN;
    int64_t images = 0, steps_run = 0, step_execs = 0;   /* captured: one execution per step */
    for (long epoch = first_epoch; epoch < o.epochs; epoch++) {
        lz_loader_start_epoch(train, (int)epoch);
        double t0 = now_s(), loss_sum = 0;
        int64_t nloss = 0;
        lz_tensor *x, *y, *prev = NULL;
        for (int64_t b = 0; lz_loader_next(train, &x, &y) == 1; b++, step++) {
            if (!strcmp(o.schedule, "cosine")) {
                float lr = lz_lr_cosine((float)o.lr, (int)step, (int)schedule_steps, 0.0f);
                if (t.adamw) lz_adamw_set_lr(t.adamw, lr); else lz_sgd_set_lr(t.sgd, lr);
            }
            lz_tensor *in[2] = {x, y}, *out[1] = {NULL};
            int64_t execs_before = lz_metrics_get().executions;
            int called = lz_call(step_fn, in, out);
            step_execs += lz_metrics_get().executions - execs_before;
            steps_run++;
            if (called != 0) {
                fprintf(stderr, "\nlazyc train: step %ld failed: %s\n", step, lz_last_error());
                lz_free(x); lz_free(y); lz_free(prev);
                goto done;
            }
            /* the previous step's loss: read while this step runs */
            if (prev) { loss_sum += lz_item(prev); nloss++; lz_free(prev); }
            prev = out[0];
            lz_free(x); lz_free(y);
            images += o.batch;
            if (b % 20 == 19 || b == per_epoch - 1 || !tty) {
                double el = now_s() - t0, ips = (double)(b + 1) * o.batch / (el > 0 ? el : 1e-9);
                if (tty || b % (per_epoch / 5 + 1) == per_epoch / 5)
                    progress(tty, epoch + 1, o.epochs, b + 1, per_epoch, nloss ? loss_sum / nloss : NAN, ips,
                             (per_epoch - b - 1) * o.batch / (ips > 0 ? ips : 1));
            }
        }
        if (prev) { loss_sum += lz_item(prev); nloss++; lz_free(prev); }
        lz_wait();
        train_s += now_s() - t0;
        acc = evaluate(&t, eval_fn, test);
        printf("%sepoch %ld: train loss %.4f, test accuracy %.4f (%.1f s)\n", tty ? "\n" : "", epoch + 1,
               loss_sum / (nloss ? nloss : 1), acc, now_s() - t0);
        fprintf(sum, "%s{\"epoch\": %ld, \"train_loss\": %.6f, \"test_accuracy\": %.6f}",
                epoch > first_epoch ? ", " : "", epoch + 1, loss_sum / (nloss ? nloss : 1), acc);
        if (o.save && save_checkpoint(&t, o.save, epoch + 1, step, schedule_steps, o.model) != 0) {
            fprintf(stderr, "lazyc train: cannot save %s: %s\n", o.save, lz_last_error());
            goto done;
        }
    }
    double wall = now_s() - t_start;
    fprintf(sum, "], \"test_accuracy\": %.6f, \"wall_s\": %.3f, \"images_per_s\": %.1f, \"steps\": %lld, "
            "\"executions\": %lld}\n", acc, wall, train_s > 0 ? images / train_s : 0.0, (long long)steps_run,
            (long long)step_execs);
    printf("test accuracy %.4f; %.1f s; %.0f training images/s; summary in %s\n", acc, wall,
           train_s > 0 ? images / train_s : 0.0, o.summary);
    status = 0;
done:
    if (sum) fclose(sum);
    lz_fn_free(step_fn);
    lz_fn_free(eval_fn);
    lz_adamw_free(t.adamw);
    lz_sgd_free(t.sgd);
    lz_model_free(t.model);
    lz_loader_free(train);
    lz_loader_free(test);
    lz_dataset_free(tr);
    lz_dataset_free(te);
    return status;
}
