/* Data-parallel scaling of the bench-size models, in one run:
 *
 *   bench_dist [--models resnet18,BERT_pytorch] [--steps N] [--json FILE]
 *
 * runs each model's captured SGD training step at its bench-size global
 * batch four ways (each a fresh process, started by this one):
 *   1 rank x 1 OpenMP thread, 1 rank x 2 threads,
 *   2 ranks x 1 thread (mpirun, each rank on half of every batch), and the
 *   same with LZ_DIST_OVERLAP=0 (every all-reduce where it was recorded);
 * and reports images (sequences) per second, the scaling efficiency of 2
 * ranks against 2 x the 1-rank-1-thread rate (same global batch: strong
 * scaling), the executions and compiles per timed step, and how much of the
 * all-reduce time ran under other kernels (1 - blocked / in flight).
 *
 *   bench_dist --worker MODEL STEPS   (what the runs above start) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"
#include "lazyc.h"
#include "zoo.h"

typedef struct worker {
    lz_model *m;
    lz_sgd *opt;
    lz_tensor **params;
    int n_params;
    int dist;
} worker;

static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    worker *w = ctx;
    lz_sgd_zero_grad(w->opt);
    lz_tensor *loss = lz_model_loss(w->m, in[0], in[1], 1);
    if (!loss || lz_backward(loss) != 0) return -1;
    if (w->dist && lz_dist_average_grads(w->params, w->n_params) != 0) return -1;
    if (lz_sgd_step(w->opt) != 0) return -1;
    out[0] = w->dist ? lz_dist_all_reduce(loss, 1) : loss;
    return out[0] ? 0 : -1;
}

/* Rows [lo, lo + rows) of a batch of the spec's shape, pseudo-random (the
   same global batch on every rank). */
static lz_tensor *batch(lz_dtype dtype, int ndim, const int64_t *shape, int64_t classes, uint64_t seed,
                        int64_t lo, int64_t rows)
{
    int64_t n = 1, shard[4];
    for (int d = 0; d < ndim; d++) n *= shape[d];
    const int64_t per_row = n / shape[0];
    const size_t es = lz_dtype_size(dtype);
    char *v = malloc((size_t)n * es);
    if (!v) return NULL;
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = s >> 11;
        if (dtype == LZ_F32) ((float *)(void *)v)[i] = (float)(2.0 * (double)r / 9007199254740992.0 - 1.0);
        else ((int64_t *)(void *)v)[i] = (int64_t)(r % (uint64_t)classes);
    }
    memcpy(shard, shape, sizeof(int64_t) * (size_t)ndim);
    shard[0] = rows;
    lz_tensor *t = lz_from_host(v + (size_t)(lo * per_row) * es, dtype, ndim, shard);
    free(v);
    return t;
}

static int run_worker(const char *name, int steps)
{
    if (lz_dist_init() != 0) {
        fprintf(stderr, "bench_dist: %s\n", lz_last_error());
        return 1;
    }
    const int rank = lz_dist_rank(), size = lz_dist_size();
    worker w = {.dist = size > 1};
    w.m = lz_model_new(name, "bench", 1);
    if (!w.m) {
        fprintf(stderr, "bench_dist: %s\n", lz_last_error());
        return 1;
    }
    const lz_model_spec *s = lz_model_get_spec(w.m);
    const int64_t global = s->input_shape[0];
    if (global % size) {
        fprintf(stderr, "bench_dist: %s's batch of %lld does not split over %d ranks\n", name,
                (long long)global, size);
        return 1;
    }
    const int64_t rows = global / size, lo = rows * rank;
    lz_params *p = lz_model_params(w.m);
    int n = lz_params_count(p);
    w.params = malloc(sizeof *w.params * (size_t)n);
    w.n_params = lz_params_trainable_list(p, w.params, n);
    w.opt = lz_sgd_new(w.params, w.n_params, (lz_sgd_opts){.lr = 0.01f, .momentum = 0.9f});
    lz_tensor *x = batch(s->input_dtype, s->input_ndim, s->input_shape, s->num_classes, 11, lo, rows);
    lz_tensor *y = batch(LZ_I64, s->target_ndim, s->target_shape, s->num_classes, 12, lo, rows);
    lz_fn *f = lz_capture(step, &w, 2, 1);
    if (!w.opt || !x || !y || !f) {
        fprintf(stderr, "bench_dist: %s\n", lz_last_error());
        return 1;
    }
    double t0 = 0;
    int rc = 0;
    for (int i = 0; i < 2 + steps && rc == 0; i++) {
        if (i == 2) {   /* warm-up (the optimizer's state, the trace) done */
            rc = lz_wait();
            lz_metrics_reset();
            lz_dist_stats_reset();
            t0 = now_ms();
        }
        lz_tensor *l = NULL;
        rc = lz_call(f, (lz_tensor *[]){x, y}, &l);
        lz_free(l);
    }
    if (rc == 0) rc = lz_wait();
    const double ms = now_ms() - t0;
    if (rc) {
        fprintf(stderr, "bench_dist: rank %d: %s\n", rank, lz_last_error());
        return 1;
    }
    lz_metrics mt = lz_metrics_get();
    lz_dist_stats ds = lz_dist_stats_get();
    if (rank == 0)
        printf("{\"model\": \"%s\", \"ranks\": %d, \"global_batch\": %lld, \"steps\": %d, "
               "\"step_ms\": %.2f, \"images_per_s\": %.3f, \"executions\": %lld, \"compiles\": %lld, "
               "\"all_reduces\": %lld, \"reduced_mib\": %.1f, \"comm_ms\": %.2f, \"blocked_ms\": %.2f, "
               "\"kernels\": %lld, \"overlapped_kernels\": %lld}\n",
               name, size, (long long)global, steps, ms / steps, 1000.0 * (double)(global * steps) / ms,
               (long long)mt.executions, (long long)mt.compiles, (long long)ds.all_reduces,
               (double)ds.bytes / (1 << 20), ds.comm_ms, ds.wait_ms, (long long)mt.kernels,
               (long long)ds.overlapped_kernels);
    fflush(stdout);
    lz_fn_free(f);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(w.opt);
    free(w.params);
    lz_model_free(w.m);
    lz_dist_finalize();
    return 0;
}

/* ---- the driver ---------------------------------------------------------- */

typedef struct result {
    int ok;
    double ips, step_ms, comm_ms, blocked_ms, reduced_mib;
    long long executions, compiles, all_reduces, kernels, overlapped;
    char json[1024];
} result;

static double field(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    return p ? atof(p + strlen(pat)) : 0;
}

/* Runs one configuration; its JSON line into r. */
static void run_config(const char *self, const char *model, int steps, int ranks, int threads, int overlap,
                       result *r)
{
    char cmd[6144];
    if (ranks == 1)
        snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d LZ_DIST_OVERLAP=%d '%s' --worker %s %d", threads, overlap,
                 self, model, steps);
    else
        snprintf(cmd, sizeof cmd,
                 "mpirun %s--oversubscribe -np %d -x OMP_NUM_THREADS=%d -x LZ_DIST_OVERLAP=%d '%s' --worker %s %d",
                 geteuid() == 0 ? "--allow-run-as-root " : "", ranks, threads, overlap, self, model, steps);
    memset(r, 0, sizeof *r);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (line[0] == '{') snprintf(r->json, sizeof r->json, "%s", line);
    r->ok = pclose(f) == 0 && r->json[0];
    if (!r->ok) {
        fprintf(stderr, "bench_dist: failed: %s\n", cmd);
        return;
    }
    r->ips = field(r->json, "images_per_s");
    r->step_ms = field(r->json, "step_ms");
    r->comm_ms = field(r->json, "comm_ms");
    r->blocked_ms = field(r->json, "blocked_ms");
    r->reduced_mib = field(r->json, "reduced_mib");
    r->executions = (long long)field(r->json, "executions");
    r->compiles = (long long)field(r->json, "compiles");
    r->all_reduces = (long long)field(r->json, "all_reduces");
    r->kernels = (long long)field(r->json, "kernels");
    r->overlapped = (long long)field(r->json, "overlapped_kernels");
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--worker")) return run_worker(argv[2], atoi(argv[3]));
    const char *models = "resnet18,BERT_pytorch", *json = NULL;
    int steps = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_dist [--models resnet18,BERT_pytorch] [--steps N] [--json FILE]\n");
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "bench_dist: cannot find its own program\n");
        return 1;
    }
    self[len] = 0;
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (json && !jf) {
        fprintf(stderr, "bench_dist: cannot write %s\n", json);
        return 1;
    }
    printf("bench size, captured SGD step, global batch split over the ranks; %d timed steps each\n", steps);
    printf("%-12s %-22s %9s %8s %6s %6s %8s %8s %7s %9s %6s\n", "model", "run", "img/s", "step ms", "execs",
           "compil", "comm ms", "blocked", "hidden", "overlap", "eff.");
    int failed = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", models);
    for (char *save = NULL, *m = strtok_r(list, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        static const struct { int ranks, threads, overlap; const char *what; } cfg[] = {
            {1, 1, 1, "1 rank x 1 thread"}, {1, 2, 1, "1 rank x 2 threads"},
            {2, 1, 1, "2 ranks x 1 thread"}, {2, 1, 0, "2 ranks, no overlap"},
        };
        result r[4];
        for (int c = 0; c < 4; c++) {
            run_config(self, m, steps, cfg[c].ranks, cfg[c].threads, cfg[c].overlap, &r[c]);
            failed |= !r[c].ok;
            if (!r[c].ok) continue;
            char hidden[16] = "-", eff[16] = "-", overlap[32] = "-";
            if (r[c].all_reduces)
                snprintf(overlap, sizeof overlap, "%lld/%lld", r[c].overlapped / steps, r[c].kernels / steps);
            if (r[c].comm_ms > 0)
                snprintf(hidden, sizeof hidden, "%.0f%%", 100.0 * (1 - r[c].blocked_ms / r[c].comm_ms));
            if (r[0].ok && r[0].ips > 0)
                snprintf(eff, sizeof eff, "%.0f%%", 100.0 * r[c].ips / (cfg[c].ranks * cfg[c].threads * r[0].ips));
            printf("%-12s %-22s %9.2f %8.1f %6.2f %6lld %8.1f %8.1f %7s %9s %6s\n", m, cfg[c].what, r[c].ips,
                   r[c].step_ms, (double)r[c].executions / steps, r[c].compiles, r[c].comm_ms / steps,
                   r[c].blocked_ms / steps, hidden, overlap, eff);
            fflush(stdout);
            if (jf) fprintf(jf, "%s", r[c].json);
        }
    }
    printf("eff.: img/s over (ranks x threads) x the 1-rank-1-thread img/s. Per step: comm ms, each all-reduce\n"
           "from its start to its completion (summed); blocked, the part the step waited for it; hidden, the rest\n"
           "(it ran under other kernels); overlap, the kernels of a step that ran while a sum was in flight, of all\n");
    if (jf) fclose(jf);
    return failed;
}
