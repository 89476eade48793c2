/* lazyc train's parts: the checkpoint with the run's settings in its
 * header (train_checkpoint.c), the progress line (train_progress.c) and
 * the JSON summary (train_summary.c); cmd_train.c runs the loop. */
#ifndef LZ_TRAIN_H
#define LZ_TRAIN_H

#include <stdint.h>

#include "lazyc.h"
#include "lazyc_optim.h"
#include "zoo.h"

typedef struct trainer {
    lz_model *model;
    lz_optimizer *opt;       /* one of train_optimizers (cmd_train.c) */
    /* data-parallel (train_dist.c): this process's rank of size; each step
       trains on rows [batch/size * rank, batch/size * (rank + 1)) of the
       global batch and averages the gradients of params over the ranks */
    int rank, size;
    long batch;
    lz_tensor **params;
    int n_params;
    int bf16;                /* --dtype bf16: forward and loss under autocast */
} trainer;

/* ---- data-parallel (train_dist.c) ---- */

/* Joins the MPI job when started by mpirun (else rank 0 of 1); ranks other
   than 0 print nothing on stdout. -1 with a message printed on failure. */
int  train_dist_join(trainer *t);
/* Gives every rank rank 0's parameters and buffers (after a resume too). */
int  train_dist_start(trainer *t);
/* Replaces the global batch *x, *y by this rank's rows of it (new tensors;
   the old are freed). Copied on the host, not sliced in the step: every
   rank must record the same graph, and a slice's offset is part of it. */
int  train_dist_shard(const trainer *t, lz_tensor **x, lz_tensor **y);
void train_dist_end(trainer *t);

/* A checkpoint's __metadata__: where the run stands and what it ran with,
   so a resume continues it exactly or says what differs. */
typedef struct train_meta {
    char model[64], optimizer[16], schedule[16];
    long epoch;              /* epochs completed */
    long batch_in_epoch;     /* batches of the next epoch done (a --save-every save) */
    long step;               /* training steps done: the schedule's position */
    long steps_per_epoch, schedule_epochs, schedule_steps;
    long batch, seed, train_images;
    double lr, weight_decay;
    int complete;            /* 0: an older checkpoint with epoch, step and schedule_steps only */
} train_meta;

/* Writes the model's parameters and buffers, the optimizer's state and
   the generator's state to path with m in the header (durably, see
   lz_safetensors_save); batch norm's num_batches_tracked is set to
   m->step first, as PyTorch counts it. */
int train_save(trainer *t, const char *path, const train_meta *m);
/* Reads path's header into m (checking the model and optimizer match t)
   and loads its tensors into t. -1 with a message printed on failure. */
int train_load(trainer *t, const char *path, const char *model, const char *optimizer, train_meta *m);
/* 1 when every float of the parameters and optimizer state is finite, 0
   when not, -1 on an error: one execution (lz_all_finite). */
int train_state_finite(trainer *t);

/* ---- progress line ---- */

typedef struct train_progress {
    int tty, cols;           /* cols: the line's limit (a terminal's width, at most 80) */
    long epochs;
    int64_t per_epoch, batch;
    int64_t run_steps;       /* steps this run takes in all */
    int64_t finished;        /* steps whose loss was read: they have run */
    double finished_s;       /* training time (evaluation apart) when the last was read */
    double eval_s;           /* the last evaluation's time; 0 before the first */
    long evals_left;
} train_progress;
/* Formats the line for epoch (1-based) after b of per_epoch steps were
   enqueued into buf; no loss and no rate are shown until a loss was read
   (have_loss), the rate counts finished steps and the ETA covers the
   whole run. Returns its length (at most cols - 1). */
int  train_progress_format(const train_progress *p, long epoch, int64_t b, int have_loss, double loss,
                           char *buf, int cap);
void train_progress_show(const train_progress *p, long epoch, int64_t b, int have_loss, double loss);

/* ---- summary ---- */

typedef struct train_epoch {
    long epoch, steps;
    double train_loss, test_accuracy, lr_first, lr_last;
} train_epoch;

typedef struct train_summary {
    const char *model, *path;
    const char *status;      /* running, done, stopped (--max-steps), nonfinite, failed */
    int exit_code;
    char error[600];         /* empty when none */
    long fail_epoch, fail_step, fail_global_step;   /* where a non-finite value was found; 0: none */
    train_epoch *epochs;
    int n_epochs, cap_epochs;
    double test_accuracy, wall_s, images_per_s;
    int64_t steps, executions;
    int silent;              /* a rank other than 0 of a data-parallel run: writes nothing */
} train_summary;
int  train_summary_add(train_summary *s, train_epoch e);
/* Writes s as one JSON object to s->path (lz_write_file): non-finite
   numbers as null. -1 with the library's error on a write error. */
int  train_summary_write(const train_summary *s);
void train_summary_free(train_summary *s);

#endif
