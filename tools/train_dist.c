/* lazyc train under mpirun: data-parallel training. Every rank builds the
 * same model and loader (same seed, so the same shuffled global batches),
 * starts from rank 0's values, and each step trains on its own rows of the
 * global batch (train_dist_shard) and averages the
 * gradients over the ranks before the optimizer (lz_dist_average_grads).
 * Rank 0 alone evaluates, prints and writes checkpoints and the summary. */
#include <stdio.h>
#include <stdlib.h>

#include "train.h"

/* Started by an MPI launcher (Open MPI's or a PMI one)? */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int train_dist_join(trainer *t)
{
    t->rank = 0;
    t->size = 1;
    if (!launched()) return 0;   /* alone: no MPI at all */
    if (lz_dist_init() != 0) {
        fprintf(stderr, "lazyc train: started by mpirun, but %s\n", lz_last_error());
        return -1;
    }
    t->rank = lz_dist_rank();
    t->size = lz_dist_size();
    /* one voice: the other ranks' progress and results would repeat rank 0's */
    if (t->rank != 0 && !freopen("/dev/null", "w", stdout)) return -1;
    return 0;
}

int train_dist_start(trainer *t)
{
    if (t->size == 1) return 0;
    lz_params *p = lz_model_params(t->model);
    int n = lz_params_count(p);
    lz_tensor **all = malloc(sizeof *all * (size_t)(n ? n : 1));
    if (!all) {
        lz_set_error("out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) all[i] = lz_params_at(p, i);
    int rc = lz_dist_broadcast(all, n);
    free(all);
    if (rc == 0)
        printf("data-parallel: %d ranks, each on %d of every %d images\n", t->size,
               (int)(t->batch / t->size), (int)t->batch);
    return rc;
}

/* Rows [lo, lo + rows) of t's first axis as a new tensor; t is freed. */
static lz_tensor *rows_of(lz_tensor *t, int64_t lo, int64_t rows)
{
    int nd = lz_ndim(t);
    int64_t shape[LZ_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = lz_dim(t, d);
    const size_t row = (size_t)(lz_numel(t) / shape[0]) * lz_dtype_size(lz_tensor_dtype(t));
    const size_t all = row * (size_t)shape[0];
    char *host = malloc(all ? all : 1);
    lz_tensor *r = NULL;
    if (!host) lz_set_error("out of memory sharding a batch of %zu bytes", all);
    else if (lz_to_host(t, host, all) == 0) {
        shape[0] = rows;
        r = lz_from_host(host + row * (size_t)lo, lz_tensor_dtype(t), nd, shape);
    }
    free(host);
    lz_free(t);
    return r;
}

int train_dist_shard(const trainer *t, lz_tensor **x, lz_tensor **y)
{
    const int64_t rows = lz_dim(*x, 0) / t->size, lo = rows * t->rank;
    *x = rows_of(*x, lo, rows);
    *y = rows_of(*y, lo, rows);
    return *x && *y ? 0 : -1;
}

void train_dist_end(trainer *t)
{
    if (t->size > 1 || lz_dist_size() > 1) lz_dist_finalize();
}
