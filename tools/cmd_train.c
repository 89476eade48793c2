/* lazyc train: trains a model on Fashion-MNIST in captured mode (one
 * execution per step), evaluates on the test set after each epoch, and
 * keeps a JSON summary. Every loss is read (one step behind, while the
 * next step runs) and checked: a NaN or Inf stops the run before anything
 * is saved. Checkpoints (at epoch ends and every --save-every steps) hold
 * parameters, buffers, optimizer and generator state with the run's
 * position and settings in the header, so --resume continues exactly
 * where a run stopped, mid-epoch included. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "train.h"

typedef struct train_opts {
    const char *data, *data_dir, *model, *optimizer, *schedule, *save, *resume, *summary, *dtype;
    const char *device;      /* --device: NULL leaves LZ_DEVICE's choice */
    long epochs, batch, seed, train_limit, test_limit;
    long schedule_epochs;    /* the cosine schedule's length; 0: see resolve_schedule */
    long save_every, max_steps;
    double lr, weight_decay;
} train_opts;

/* --model NAME -> the zoo's builder name (lz_model_new) */
static const struct { const char *cli, *zoo; } train_models[] = {
    {"cnn", "cnn"},
    {"resnet18", "resnet18_fmnist"},
};
#define N_TRAIN_MODELS ((int)(sizeof train_models / sizeof train_models[0]))

const char *lz_cli_train_model(int i, const char **zoo)
{
    if (i < 0 || i >= N_TRAIN_MODELS) return NULL;
    if (zoo) *zoo = train_models[i].zoo;
    return train_models[i].cli;
}

static const char *zoo_name(const char *model)
{
    for (int i = 0; i < N_TRAIN_MODELS; i++)
        if (!strcmp(train_models[i].cli, model)) return train_models[i].zoo;
    return NULL;
}

static lz_optimizer *make_adamw(lz_tensor *const *ps, int n, const train_opts *o)
{
    return lz_optimizer_adamw(ps, n, (lz_adamw_opts){.lr = (float)o->lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                                     .weight_decay = (float)o->weight_decay, .decoupled = 1});
}

static lz_optimizer *make_sgd(lz_tensor *const *ps, int n, const train_opts *o)
{
    return lz_optimizer_sgd(ps, n, (lz_sgd_opts){.lr = (float)o->lr, .momentum = 0.9f,
                                                 .weight_decay = (float)o->weight_decay});
}

/* --optimizer NAME -> its maker; the name is also the checkpoint's
   "optimizer" entry, so a resume finds the same one */
static const struct {
    const char *cli;
    lz_optimizer *(*make)(lz_tensor *const *ps, int n, const train_opts *o);
} train_optimizers[] = {
    {"adamw", make_adamw},
    {"sgd", make_sgd},
};
#define N_TRAIN_OPTIMIZERS ((int)(sizeof train_optimizers / sizeof train_optimizers[0]))

static int optimizer_index(const char *name)
{
    for (int i = 0; i < N_TRAIN_OPTIMIZERS; i++)
        if (!strcmp(train_optimizers[i].cli, name)) return i;
    return -1;
}

/* "a, b or c" */
static void print_choices(FILE *f, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) fprintf(f, "%s%s", i ? (i == n - 1 ? " or " : ", ") : "", names[i]);
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
            "                   [--save CKPT] [--save-every STEPS] [--resume CKPT]\n"
            "                   [--max-steps N] [--summary FILE] [--train-limit N]\n"
            "                   [--test-limit N] [--schedule-epochs N] [--dtype f32|bf16]\n"            "                   [--device NAME]\n"
            "Defaults: cnn, 3 epochs, batch 128, AdamW lr 2e-3 weight decay 5e-4, cosine\n"
            "schedule, seed 1, data in /usr/share/datasets/fashion-mnist, summary in\n"
            "train-out/summary.json. The last partial training batch is dropped; the test\n"
            "set is evaluated whole. resnet18 is torchvision's ResNet-18 with a 3x3 stride-1\n"
            "stem from 1 channel and no max-pool, for 28x28 images (models/resnet.c).\n"
            "--dtype bf16 runs every forward and loss (training and test) under\n"
            "lz_autocast_begin(LZ_BF16): convolutions and products on bf16 operands with\n"
            "float32 accumulation; parameters, gradients and optimizer state stay f32.\n"            "--device NAME: the device tensors live on (default LZ_DEVICE, else cpu).\n"
            "\n"
            "Checkpoints: --save writes CKPT after every epoch and, with --save-every N,\n"
            "after every N-th training step too; each replaces the last atomically and\n"
            "durably. --resume CKPT continues where it stopped (mid-epoch included), bit\n"
            "for bit as if never stopped; --max-steps N stops this run after N steps\n"
            "(saving there). A resume with a --batch, --lr, --weight-decay, --seed,\n"
            "--train-limit or --schedule other than the checkpoint's warns.\n"
            "Schedule: the cosine rate spans --schedule-epochs (default --epochs). A\n"
            "checkpoint remembers it: `--epochs 1 --schedule-epochs 2 --save C` then\n"
            "`--epochs 2 --resume C` equals one 2-epoch run. A resume with more --epochs\n"
            "than the checkpoint's schedule extends it: the rate from there on is that\n"
            "of a run planned for the new --epochs from the start.\n"
            "Every loss is checked: a NaN or Inf stops the run at once, names the epoch\n"
            "and step, and saves nothing more, so the last checkpoint stays good. The\n"
            "summary is valid JSON at all times (status, error; NaN written as null).\n"
            "Under `mpirun -np N`, data-parallel: each rank trains on batch/N rows of\n"
            "every global batch (--batch a multiple of N), the gradients are averaged\n"
            "every step, and rank 0 alone prints, evaluates and writes; a checkpoint\n"
            "resumes on any N (docs/distributed.md).\n"
            "\n"
            "Exit status: 0 done (or nothing left to do); 1 failed while running (a write\n"
            "error such as a full disk, an execution error); 2 usage (a bad option,\n"
            "unreadable data, an output path that cannot be written, a checkpoint that\n"
            "cannot be resumed); 3 a NaN or Inf loss or parameter stopped training.\n");
}

/* in = {x, y}; out[0] = loss. The captured training step. */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    trainer *t = ctx;
    lz_optimizer_zero_grad(t->opt);
    if (t->bf16 && lz_autocast_begin(LZ_BF16) != 0) return -1;
    lz_tensor *loss = lz_model_loss(t->model, in[0], in[1], 1);
    if (t->bf16) lz_autocast_end();
    if (!loss || lz_backward(loss) != 0) return -1;
    if (t->size > 1 && lz_dist_average_grads(t->params, t->n_params) != 0) return -1;
    if (lz_optimizer_step(t->opt) != 0) return -1;
    /* the loss over the global batch */
    out[0] = t->size > 1 ? lz_dist_all_reduce(loss, 1) : loss;
    return out[0] ? 0 : -1;
}

/* in = {x}; out[0] = logits in eval mode. */
static int eval_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    trainer *t = ctx;
    lz_no_grad_begin();
    if (t->bf16) lz_autocast_begin(LZ_BF16);
    out[0] = lz_model_forward(t->model, in[0], 0);
    if (t->bf16) lz_autocast_end();
    lz_no_grad_end();
    return out[0] ? 0 : -1;
}

/* Test accuracy, or -1 with the library's error. */
static double evaluate(lz_fn *eval, lz_loader *test)
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
        float *nl = realloc(logits, sizeof *logits * (size_t)(b * c));
        int64_t *nb = realloc(labels, sizeof *labels * (size_t)b);
        if (nl) logits = nl;
        if (nb) labels = nb;
        if (!nl || !nb) lz_set_error("lazyc train: out of memory evaluating");
        if (!nl || !nb || lz_call(eval, &x, out) != 0 ||
            lz_to_host(out[0], logits, sizeof *logits * (size_t)(b * c)) != 0 ||
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
    if (rc < 0) return -1;
    return seen ? (double)right / (double)seen : NAN;
}

static int parse(int argc, char **argv, train_opts *o)
{
    *o = (train_opts){.data = NULL, .data_dir = "/usr/share/datasets/fashion-mnist", .model = "cnn",
                      .optimizer = "adamw", .schedule = "cosine", .summary = "train-out/summary.json",
                      .epochs = 3, .batch = 128, .seed = 1, .lr = 2e-3, .weight_decay = 5e-4,
                      .dtype = "f32"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **str = !strcmp(a, "--data") ? &o->data : !strcmp(a, "--data-dir") ? &o->data_dir
                         : !strcmp(a, "--model") ? &o->model : !strcmp(a, "--optimizer") ? &o->optimizer
                         : !strcmp(a, "--schedule") ? &o->schedule : !strcmp(a, "--save") ? &o->save
                         : !strcmp(a, "--resume") ? &o->resume : !strcmp(a, "--summary") ? &o->summary
                         : !strcmp(a, "--dtype") ? &o->dtype : !strcmp(a, "--device") ? &o->device
                         : NULL;
        long *num = !strcmp(a, "--epochs") ? &o->epochs : !strcmp(a, "--batch") ? &o->batch
                  : !strcmp(a, "--seed") ? &o->seed : !strcmp(a, "--train-limit") ? &o->train_limit
                  : !strcmp(a, "--test-limit") ? &o->test_limit
                  : !strcmp(a, "--schedule-epochs") ? &o->schedule_epochs
                  : !strcmp(a, "--save-every") ? &o->save_every : !strcmp(a, "--max-steps") ? &o->max_steps
                  : NULL;
        double *real = !strcmp(a, "--lr") ? &o->lr : !strcmp(a, "--weight-decay") ? &o->weight_decay : NULL;
        if (lz_cli_is_help(a)) { usage(stdout); exit(0); }
        if (str) {
            if (!v || !*v) { fprintf(stderr, "lazyc train: %s needs a value\n", a); return -1; }
            *str = v;
        } else if (num) {
            /* every count is at least 1 (0 is no shorthand for "all"); the seed may be 0 */
            if (lz_cli_int(a, v, !strcmp(a, "--seed") ? 0 : 1, 1L << 40, num)) return -1;
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
        const char *names[N_TRAIN_MODELS];
        for (int i = 0; i < N_TRAIN_MODELS; i++) names[i] = train_models[i].cli;
        fprintf(stderr, "lazyc train: unknown --model '%s' (", o->model);
        print_choices(stderr, names, N_TRAIN_MODELS);
        fprintf(stderr, ")\n");
        return -1;
    }
    if (strcmp(o->dtype, "f32") && strcmp(o->dtype, "bf16")) {
        fprintf(stderr, "lazyc train: unknown --dtype '%s' (f32 or bf16)\n", o->dtype);
        return -1;
    }
    if (optimizer_index(o->optimizer) < 0) {
        const char *names[N_TRAIN_OPTIMIZERS];
        for (int i = 0; i < N_TRAIN_OPTIMIZERS; i++) names[i] = train_optimizers[i].cli;
        fprintf(stderr, "lazyc train: unknown --optimizer '%s' (", o->optimizer);
        print_choices(stderr, names, N_TRAIN_OPTIMIZERS);
        fprintf(stderr, ")\n");
        return -1;
    }
    if (strcmp(o->schedule, "cosine") && strcmp(o->schedule, "none")) {
        fprintf(stderr, "lazyc train: unknown --schedule '%s' (cosine or none)\n", o->schedule);
        return -1;
    }
    if (o->schedule_epochs && o->schedule_epochs < o->epochs) {
        fprintf(stderr, "lazyc train: --schedule-epochs %ld is shorter than --epochs %ld: the cosine rate "
                "would climb back after its end\n", o->schedule_epochs, o->epochs);
        return -1;
    }
    if (o->save_every && !o->save) {
        fprintf(stderr, "lazyc train: --save-every needs --save\n");
        return -1;
    }
    if (o->save && !strcmp(o->save, o->summary)) {
        fprintf(stderr, "lazyc train: --save and --summary are the same file (%s)\n", o->save);
        return -1;
    }
    return 0;
}

/* ---- the run ---------------------------------------------------------- */

/* Where the run stands and what it writes. */
typedef struct run {
    train_opts o;
    trainer t;
    lz_fn *step_fn, *eval_fn;
    lz_loader *train, *test;
    train_summary sum;
    train_progress prog;
    int64_t per_epoch, train_images;
    long sched_epochs, sched_steps;
    char saved[160];         /* the last checkpoint this run wrote or resumed, for messages */
} run;

static train_meta meta_at(const run *r, long epoch, long batch_in_epoch, long step)
{
    train_meta m = {.epoch = epoch, .batch_in_epoch = batch_in_epoch, .step = step,
                    .steps_per_epoch = r->per_epoch, .schedule_epochs = r->sched_epochs,
                    .schedule_steps = r->sched_steps, .batch = r->o.batch, .seed = r->o.seed,
                    .train_images = r->train_images, .lr = r->o.lr, .weight_decay = r->o.weight_decay,
                    .complete = 1};
    snprintf(m.model, sizeof m.model, "%s", r->o.model);
    snprintf(m.optimizer, sizeof m.optimizer, "%s", r->o.optimizer);
    snprintf(m.schedule, sizeof m.schedule, "%s", r->o.schedule);
    return m;
}

/* Ends the run with status and an error message (printed and recorded in
   the summary); returns the exit code. */
static int end_run(run *r, int code, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int end_run(run *r, int code, const char *status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->sum.error, sizeof r->sum.error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%slazyc train: %s\n", r->prog.tty ? "\n" : "", r->sum.error);
    r->sum.status = status;
    r->sum.exit_code = code;
    if (train_summary_write(&r->sum) != 0)
        fprintf(stderr, "lazyc train: the summary could not record this either: %s\n", lz_last_error());
    return code;
}

static const char *saved_note(const run *r, char *buf, size_t cap)
{
    if (r->saved[0]) snprintf(buf, cap, "the last checkpoint, %s, is untouched", r->saved);
    else if (r->o.save) snprintf(buf, cap, "nothing was saved to %s", r->o.save);
    else snprintf(buf, cap, "no --save was given");
    return buf;
}

/* A non-finite loss of epoch (0-based), batch b (0-based), training step. */
static int diverged(run *r, double loss, long epoch, long b, long step, const char *what)
{
    char note[256];
    r->sum.fail_epoch = epoch + 1;
    r->sum.fail_step = b + 1;
    r->sum.fail_global_step = step + 1;
    return end_run(r, LZ_CLI_NONFINITE, "nonfinite",
                   "%s%s at epoch %ld, step %ld of %lld (training step %ld): training stopped; %s",
                   what, isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf", epoch + 1, b + 1,
                   (long long)r->per_epoch, step + 1, saved_note(r, note, sizeof note));
}

/* Saves a checkpoint after `step` steps (epoch epochs done and b batches
   of the next) once the state is known to be finite. 0, or an exit code. */
static int checkpoint(run *r, long epoch, long b, long step)
{
    if (r->t.rank != 0) return 0;   /* rank 0 alone writes */
    int fin = train_state_finite(&r->t);
    if (fin < 0) return end_run(r, LZ_CLI_FAILED, "failed", "checking the state before saving: %s", lz_last_error());
    if (fin == 0) {
        char note[256];
        long e = b ? epoch : epoch - 1, s = b ? b : (long)r->per_epoch;
        r->sum.fail_epoch = e + 1;
        r->sum.fail_step = s;
        r->sum.fail_global_step = step;
        return end_run(r, LZ_CLI_NONFINITE, "nonfinite",
                       "non-finite values in the parameters or optimizer state after epoch %ld, step %ld of "
                       "%lld (training step %ld): training stopped; %s", e + 1, s, (long long)r->per_epoch, step,
                       saved_note(r, note, sizeof note));
    }
    train_meta m = meta_at(r, epoch, b, step);
    if (train_save(&r->t, r->o.save, &m) != 0) {
        char note[256];
        return end_run(r, LZ_CLI_FAILED, "failed", "cannot save the checkpoint: %s; %s", lz_last_error(),
                       r->saved[0] ? saved_note(r, note, sizeof note) : "no checkpoint was written");
    }
    snprintf(r->saved, sizeof r->saved, "%s (training step %ld)", r->o.save, step);
    return 0;
}

/* A loss read one step behind: its tensor and where it was made. */
typedef struct pending {
    lz_tensor *loss;
    long epoch, b, step;
} pending;

typedef struct epoch_acc {
    double loss_sum, t0;     /* t0: when this training segment started */
    int64_t nloss;
} epoch_acc;

/* Reads and checks p's loss. 0, or an exit code. */
static int read_loss(run *r, pending *p, epoch_acc *acc, double *train_s)
{
    if (!p->loss) return 0;
    lz_clear_error();
    float v = lz_item(p->loss);
    lz_free(p->loss);
    p->loss = NULL;
    if (isnan(v) && lz_last_error())
        return end_run(r, LZ_CLI_FAILED, "failed", "step %ld failed: %s", p->step + 1, lz_last_error());
    if (!isfinite(v)) return diverged(r, v, p->epoch, p->b, p->step, "the loss is ");
    acc->loss_sum += v;
    acc->nloss++;
    r->prog.finished++;
    r->prog.finished_s = *train_s + (now_s() - acc->t0);
    return 0;
}

static void warn_differs(const char *ckpt, const char *opt, const char *now, const char *then, int *warned)
{
    fprintf(stderr, "lazyc train: warning: resuming %s with %s %s; it was written with %s\n", ckpt, opt, now,
            then);
    *warned = 1;
}

/* Where a resume starts (*first_epoch, *skip batches into it, *step) and
   the schedule's length, from the checkpoint's header m. */
static void resolve_resume(run *r, const train_meta *m, long *first_epoch, long *skip, long *step)
{
    const train_opts *o = &r->o;
    int warned = 0;
    char a[40], b[40];
    if (m->complete) {
#define DIFF_L(opt, now, then) if ((now) != (then)) { snprintf(a, sizeof a, "%ld", (long)(now)); \
        snprintf(b, sizeof b, "%ld", (long)(then)); warn_differs(o->resume, opt, a, b, &warned); }
#define DIFF_D(opt, now, then) if ((now) != (then)) { snprintf(a, sizeof a, "%g", now); \
        snprintf(b, sizeof b, "%g", then); warn_differs(o->resume, opt, a, b, &warned); }
        DIFF_L("--batch", o->batch, m->batch);
        DIFF_D("--lr", o->lr, m->lr);
        DIFF_D("--weight-decay", o->weight_decay, m->weight_decay);
        DIFF_L("--seed", o->seed, m->seed);
        if (r->train_images != m->train_images) {
            snprintf(a, sizeof a, "%lld training images", (long long)r->train_images);
            snprintf(b, sizeof b, "%ld", m->train_images);
            warn_differs(o->resume, "--train-limit:", a, b, &warned);
        }
        if (strcmp(o->schedule, m->schedule)) warn_differs(o->resume, "--schedule", o->schedule, m->schedule, &warned);
#undef DIFF_L
#undef DIFF_D
    }
    long ck_per_epoch = m->complete ? m->steps_per_epoch : (long)r->per_epoch;
    long ck_batch = m->complete ? m->batch : o->batch;
    *first_epoch = m->epoch;
    *skip = m->batch_in_epoch;
    *step = m->step;
    if (ck_per_epoch != r->per_epoch || ck_batch != o->batch) {
        /* other batches: continue after as many images as the checkpoint's epoch had seen */
        *skip = (long)(m->batch_in_epoch * ck_batch / o->batch);
        if (*skip >= r->per_epoch) { ++*first_epoch; *skip = 0; }
        *step = *first_epoch * (long)r->per_epoch + *skip;
    }
    if (warned)
        fprintf(stderr, "lazyc train: warning: the run continues at epoch %ld, step %ld with this run's settings; "
                "it is not the run the checkpoint began\n", *first_epoch + 1, *skip + 1);
    /* the checkpoint's schedule, in epochs (older checkpoints: from its steps) */
    long ck_sched = m->complete && m->schedule_epochs > 0 ? m->schedule_epochs
                  : ck_per_epoch > 0 ? (m->schedule_steps + ck_per_epoch - 1) / ck_per_epoch : o->epochs;
    if (o->schedule_epochs) {
        r->sched_epochs = o->schedule_epochs;
        if (o->schedule_epochs != ck_sched)
            printf("schedule: %ld epochs (--schedule-epochs); the checkpoint's spanned %ld\n", o->schedule_epochs,
                   ck_sched);
    } else if (o->epochs > ck_sched) {
        r->sched_epochs = o->epochs;
    } else {
        r->sched_epochs = ck_sched;
    }
    r->sched_steps = r->sched_epochs * (long)r->per_epoch;
    if (!m->complete && r->sched_epochs == ck_sched && ck_per_epoch == r->per_epoch)
        r->sched_steps = m->schedule_steps;   /* an older checkpoint's exact length */
    if (!o->schedule_epochs && o->epochs > ck_sched && !strcmp(o->schedule, "cosine"))
        printf("schedule: --epochs %ld extends the checkpoint's %ld-epoch cosine schedule to %ld epochs; from "
               "step %ld on the rate is that of a run planned for %ld epochs (%.4g now)\n", o->epochs, ck_sched,
               o->epochs, *step + 1, o->epochs,
               (double)lz_lr_cosine((float)o->lr, (int)*step, (int)r->sched_steps, 0.0f));
}

static int term_cols(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

/* The training loop from (first_epoch, skip, step). Returns the exit code. */
static int train_loop(run *r, long first_epoch, long skip, long step)
{
    const train_opts *o = &r->o;
    double t_start = now_s(), train_s = 0, acc = NAN;
    int64_t images = 0, steps_run = 0, step_execs = 0;   /* captured: one execution per step */
    int stop = 0, rc;
    for (long epoch = first_epoch; epoch < o->epochs && !stop; epoch++) {
        long b0 = epoch == first_epoch ? skip : 0, b = b0;
        if (lz_loader_start_epoch(r->train, (int)epoch) != 0 || (b0 && lz_loader_skip(r->train, b0) != 0))
            return end_run(r, LZ_CLI_FAILED, "failed", "%s", lz_last_error());
        epoch_acc ea = {.t0 = now_s()};
        double lr_first = NAN, lr_last = NAN;
        pending prev = {0};
        for (; b < r->per_epoch; b++, step++) {
            lz_tensor *x, *y;
            if (lz_loader_next(r->train, &x, &y) != 1) {
                lz_free(prev.loss);
                return end_run(r, LZ_CLI_FAILED, "failed", "reading batch %ld: %s", b + 1,
                               lz_last_error() ? lz_last_error() : "the epoch ended early");
            }
            float lr = (float)o->lr;
            if (!strcmp(o->schedule, "cosine")) lr = lz_lr_cosine((float)o->lr, (int)step, (int)r->sched_steps, 0.0f);
            lz_optimizer_set_lr(r->t.opt, lr);
            if (b == b0) lr_first = lr;
            lr_last = lr;
            if (r->t.size > 1 && train_dist_shard(&r->t, &x, &y) != 0) {
                lz_free(prev.loss);
                return end_run(r, LZ_CLI_FAILED, "failed", "batch %ld: %s", b + 1, lz_last_error());
            }
            lz_tensor *in[2] = {x, y}, *out[1] = {NULL};
            int64_t execs_before = lz_metrics_get().executions;
            int called = lz_call(r->step_fn, in, out);
            step_execs += lz_metrics_get().executions - execs_before;
            steps_run++;
            r->sum.steps = steps_run;
            r->sum.executions = step_execs;
            lz_free(x);
            lz_free(y);
            if (called != 0) {
                lz_free(prev.loss);
                return end_run(r, LZ_CLI_FAILED, "failed", "step %ld failed: %s", step + 1, lz_last_error());
            }
            /* the previous step's loss: read while this step runs */
            if ((rc = read_loss(r, &prev, &ea, &train_s)) != 0) { lz_free(out[0]); return rc; }
            prev = (pending){out[0], epoch, b, step};
            images += o->batch;
            int at_limit = o->max_steps && steps_run >= o->max_steps;
            if (b + 1 < r->per_epoch && ((o->save_every && (step + 1) % o->save_every == 0) || at_limit)) {
                if ((rc = read_loss(r, &prev, &ea, &train_s)) != 0) return rc;
                if (o->save && (rc = checkpoint(r, epoch, b + 1, step + 1)) != 0) return rc;
                if (at_limit) { stop = 2; b++; step++; break; }
            }
            int show = r->prog.tty ? b == b0 || b % 20 == 19 || b == r->per_epoch - 1
                                   : b % (r->per_epoch / 5 + 1) == r->per_epoch / 5;
            if (show) train_progress_show(&r->prog, epoch + 1, b + 1, ea.nloss > 0, ea.loss_sum / (double)ea.nloss);
            if (at_limit) stop = 1;
        }
        if ((rc = read_loss(r, &prev, &ea, &train_s)) != 0) return rc;
        lz_wait();
        train_s += now_s() - ea.t0;
        if (r->prog.tty) printf("\n");
        double epoch_loss = ea.nloss ? ea.loss_sum / (double)ea.nloss : NAN;
        if (stop == 2) {
            printf("stopped after %lld steps (--max-steps) at epoch %ld, step %ld of %lld\n", (long long)steps_run,
                   epoch + 1, b, (long long)r->per_epoch);
            break;
        }
        double te = now_s();
        acc = r->t.rank == 0 ? evaluate(r->eval_fn, r->test) : NAN;   /* rank 0 alone evaluates */
        if (acc < 0) return end_run(r, LZ_CLI_FAILED, "failed", "evaluating epoch %ld: %s", epoch + 1, lz_last_error());
        r->prog.eval_s = now_s() - te;
        r->prog.evals_left--;
        printf(fabs(epoch_loss) < 1e5 ? "epoch %ld: train loss %.4f, test accuracy %.4f (%.1f s)\n"
                                      : "epoch %ld: train loss %.4g, test accuracy %.4f (%.1f s)\n",
               epoch + 1, epoch_loss, acc, now_s() - ea.t0);
        train_epoch e = {.epoch = epoch + 1, .steps = b - b0, .train_loss = epoch_loss, .test_accuracy = acc,
                         .lr_first = lr_first, .lr_last = lr_last};
        if (train_summary_add(&r->sum, e) != 0) return end_run(r, LZ_CLI_FAILED, "failed", "out of memory");
        r->sum.test_accuracy = acc;
        r->sum.wall_s = now_s() - t_start;
        r->sum.images_per_s = train_s > 0 ? (double)images / train_s : 0.0;
        if (o->save && (rc = checkpoint(r, epoch + 1, 0, step)) != 0) return rc;
        if (train_summary_write(&r->sum) != 0)
            return end_run(r, LZ_CLI_FAILED, "failed", "cannot write the summary: %s", lz_last_error());
        if (stop && epoch + 1 < o->epochs)
            printf("stopped after %lld steps (--max-steps) at the end of epoch %ld\n", (long long)steps_run, epoch + 1);
    }
    r->sum.wall_s = now_s() - t_start;
    r->sum.images_per_s = train_s > 0 ? (double)images / train_s : 0.0;
    r->sum.status = stop ? "stopped" : "done";
    if (train_summary_write(&r->sum) != 0) {
        fprintf(stderr, "lazyc train: cannot write the summary: %s\n", lz_last_error());
        return LZ_CLI_FAILED;
    }
    if (stop && o->save) printf("resume with --resume %s\n", o->save);
    if (isnan(acc)) printf("no epoch ended, so no evaluation; ");
    else printf("test accuracy %.4f; ", acc);
    printf("%.1f s; %.0f training images/s; summary in %s\n", r->sum.wall_s, r->sum.images_per_s, o->summary);
    return 0;
}

int lz_cmd_train(int argc, char **argv)
{
    run r = {0};
    train_opts *o = &r.o;
    if (parse(argc, argv, o) != 0) { usage(stderr); return LZ_CLI_USAGE_ERROR; }
    if (lz_cli_device("train", o->device) != 0) return LZ_CLI_USAGE_ERROR;
    if (train_dist_join(&r.t) != 0) return LZ_CLI_USAGE_ERROR;
    r.t.batch = o->batch;
    if (o->batch % r.t.size) {
        fprintf(stderr, "lazyc train: --batch %ld (the global batch) is not a multiple of the %d ranks\n",
                o->batch, r.t.size);
        train_dist_end(&r.t);
        return LZ_CLI_USAGE_ERROR;
    }
    /* an unusable output path is found now, not after an epoch */
    if (r.t.rank == 0 && (lz_cli_prepare_output("train", "--summary", o->summary) != 0 ||
                          (o->save && lz_cli_prepare_output("train", "--save", o->save) != 0))) {
        train_dist_end(&r.t);
        return LZ_CLI_USAGE_ERROR;
    }
    /* progress lines reach a log file as they happen, not at exit */
    setvbuf(stdout, NULL, _IOLBF, 0);
    lz_dataset *tr = lz_dataset_fashion_mnist(o->data_dir, 1), *te = tr ? lz_dataset_fashion_mnist(o->data_dir, 0) : NULL;
    if (!tr || !te) {
        fprintf(stderr, "lazyc train: %s\n", lz_last_error());
        lz_dataset_free(tr);
        return LZ_CLI_USAGE_ERROR;
    }
    int status = LZ_CLI_FAILED;
    if ((o->train_limit && lz_dataset_truncate(tr, o->train_limit < lz_dataset_size(tr) ? o->train_limit : lz_dataset_size(tr))) ||
        (o->test_limit && lz_dataset_truncate(te, o->test_limit < lz_dataset_size(te) ? o->test_limit : lz_dataset_size(te)))) {
        fprintf(stderr, "lazyc train: %s\n", lz_last_error());
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    r.train_images = lz_dataset_size(tr);
    /* Fashion-MNIST's mean and std over the training pixels */
    lz_loader_opts lo = {.batch = o->batch, .shuffle = 1, .drop_last = 1, .seed = (uint64_t)o->seed,
                         .mean = 0.2860f, .std = 0.3530f};
    r.train = lz_loader_new(tr, lo);
    lo.shuffle = 0;
    lo.drop_last = 0;
    lo.batch = 1000 < lz_dataset_size(te) ? 1000 : lz_dataset_size(te);
    r.test = lz_loader_new(te, lo);
    lz_manual_seed((uint64_t)o->seed);
    r.t.model = lz_model_new(zoo_name(o->model), "smoke", (uint64_t)o->seed);
    r.t.bf16 = !strcmp(o->dtype, "bf16");
    if (!r.train || !r.test || !r.t.model) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }
    r.per_epoch = lz_loader_batches(r.train);
    if (r.per_epoch == 0) {
        fprintf(stderr, "lazyc train: fewer training images (%lld) than one batch of %ld\n",
                (long long)r.train_images, o->batch);
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    lz_tensor *ps[512];
    int np = lz_params_trainable_list(lz_model_params(r.t.model), ps, 512);
    r.t.params = ps;
    r.t.n_params = np;
    r.t.opt = train_optimizers[optimizer_index(o->optimizer)].make(ps, np, o);
    if (!r.t.opt) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }

    long first_epoch = 0, skip = 0, step = 0;
    r.sched_epochs = o->schedule_epochs ? o->schedule_epochs : o->epochs;
    r.sched_steps = r.sched_epochs * (long)r.per_epoch;
    if (o->resume) {
        train_meta m;
        if (train_load(&r.t, o->resume, o->model, o->optimizer, &m) != 0) { status = LZ_CLI_USAGE_ERROR; goto done; }
        resolve_resume(&r, &m, &first_epoch, &skip, &step);
        if (first_epoch >= o->epochs) {
            printf("%s already holds %ld epoch%s (--epochs %ld): nothing left to do; the summary and checkpoint "
                   "are left as they are\n", o->resume, m.epoch, m.epoch == 1 ? "" : "s", o->epochs);
            status = 0;
            goto done;
        }
        if (o->save && !strcmp(o->save, o->resume))
            snprintf(r.saved, sizeof r.saved, "%s (training step %ld)", o->resume, m.step);
    }
    if (train_dist_start(&r.t) != 0) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }
    r.step_fn = lz_capture(train_step, &r.t, 2, 1);
    r.eval_fn = lz_capture(eval_step, &r.t, 1, 1);
    if (!r.step_fn || !r.eval_fn) { fprintf(stderr, "lazyc train: %s\n", lz_last_error()); goto done; }

    r.sum = (train_summary){.model = o->model, .path = o->summary, .status = "running", .test_accuracy = NAN,
                            .silent = r.t.rank != 0};
    if (train_summary_write(&r.sum) != 0) {
        fprintf(stderr, "lazyc train: cannot write the summary: %s\n", lz_last_error());
        goto done;
    }
    int64_t run_steps = (o->epochs - first_epoch) * r.per_epoch - skip;
    r.prog = (train_progress){.tty = isatty(STDOUT_FILENO), .cols = term_cols(), .epochs = o->epochs,
                              .per_epoch = r.per_epoch, .batch = o->batch,
                              .run_steps = o->max_steps && o->max_steps < run_steps ? o->max_steps : run_steps,
                              .evals_left = o->epochs - first_epoch};
    printf("%s: %lld Fashion-MNIST training images (%lld steps of %ld per epoch), %lld test\n", o->model,
           (long long)r.train_images, (long long)r.per_epoch, o->batch, (long long)lz_dataset_size(te));
    if (o->resume)
        printf("resuming %s at epoch %ld, step %ld of %lld (training step %ld)\n", o->resume, first_epoch + 1,
               skip + 1, (long long)r.per_epoch, step + 1);
    status = train_loop(&r, first_epoch, skip, step);
done:
    /* a run stopped at a NaN has the next step still executing: it must
       finish before its tensors are freed and before exit() runs oneDNN's
       destructors under it (a crash otherwise) */
    lz_wait();
    train_summary_free(&r.sum);
    lz_fn_free(r.step_fn);
    lz_fn_free(r.eval_fn);
    lz_optimizer_free(r.t.opt);
    lz_model_free(r.t.model);
    lz_loader_free(r.train);
    lz_loader_free(r.test);
    lz_dataset_free(tr);
    lz_dataset_free(te);
    train_dist_end(&r.t);
    return status;
}
