/* Data-parallel training under mpirun (tests/test_dist.sh runs it):
 *   dist_check parity    an MLP, each rank on its share of every global
 *                        batch, 10 SGD then 10 AdamW captured steps; rank 0
 *                        also trains alone on the whole batches and every
 *                        parameter must match within 1e-5 relative; every
 *                        rank holds rank 0's parameters bit for bit; after
 *                        the first call each step is one execution, no
 *                        compile, with its all-reduces inside.
 *   dist_check mismatch  rank 1 records a wider model: the first step fails
 *                        on every rank saying the graphs differ.
 *   dist_check stuck     rank 1 stops communicating (sleeps): rank 0's step
 *                        fails after LZ_DIST_TIMEOUT naming the timeout.
 *   dist_check die       rank 1 kills itself at step 3: mpirun ends the job.
 *   dist_check fail      trains until a step fails (the test injects a
 *                        kernel fault into one rank), then exits 1.
 * Exit status 0 when every check held. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

enum { IN = 12, B = 16, OUT = 5, STEPS = 10, N_PARAMS = 6 };

typedef struct model {
    int hid;
    lz_tensor *p[N_PARAMS];   /* w1 b1 w2 b2 w3 b3 */
    lz_sgd *sgd;
    lz_adamw *adamw;
    int dist;                 /* average the gradients over the ranks */
} model;

static lz_tensor *param(unsigned seed, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, -0.3f, 0.3f, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

static void model_init(model *m, int hid, unsigned seed, int dist)
{
    const int64_t s[N_PARAMS][2] = {{hid, IN}, {hid}, {hid, hid}, {hid}, {OUT, hid}, {OUT}};
    for (int i = 0; i < N_PARAMS; i++) m->p[i] = param(seed + (unsigned)i, i % 2 ? 1 : 2, s[i]);
    m->hid = hid;
    m->dist = dist;
    m->sgd = NULL;
    m->adamw = NULL;
}

static void model_free(model *m)
{
    lz_sgd_free(m->sgd);
    lz_adamw_free(m->adamw);
    for (int i = 0; i < N_PARAMS; i++) lz_free(m->p[i]);
}

/* in: x [b, IN], y [b]; out: the loss over the global batch */
static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    if (m->sgd) lz_sgd_zero_grad(m->sgd);
    else lz_adamw_zero_grad(m->adamw);
    lz_tensor *h = lz_relu(lz_linear(in[0], m->p[0], m->p[1]));
    h = lz_tanh(lz_linear(h, m->p[2], m->p[3]));
    lz_tensor *loss = lz_cross_entropy(lz_linear(h, m->p[4], m->p[5]), in[1]);
    if (!loss || lz_backward(loss)) return -1;
    if (m->dist && lz_dist_average_grads(m->p, N_PARAMS)) return -1;
    if (m->sgd ? lz_sgd_step(m->sgd) : lz_adamw_step(m->adamw)) return -1;
    out[0] = m->dist ? lz_dist_all_reduce(loss, 1) : loss;
    return out[0] ? 0 : -1;
}

/* Rows [lo, hi) of step s's global batch. */
static void batch(int s, int lo, int hi, lz_tensor **x, lz_tensor **y)
{
    float xs[B * IN];
    int64_t ys[B];
    lz_test_fill_uniform(xs, B * IN, 100u + (unsigned)s, -1, 1);
    for (int i = 0; i < B; i++) ys[i] = (s * 7 + i * 3) % OUT;
    *x = lz_from_host(xs + lo * IN, LZ_F32, 2, (int64_t[]){hi - lo, IN});
    *y = lz_from_host(ys + lo, LZ_I64, 1, (int64_t[]){hi - lo});
}

/* Trains m for STEPS captured steps on rows [lo, hi) of each batch; the
   losses into loss[]. Returns the metrics of the calls after the first. */
static lz_metrics train(model *m, int lo, int hi, float *loss)
{
    lz_fn *f = lz_capture(step, m, 2, 1);
    lz_metrics after_first = {0};
    for (int s = 0; s < STEPS; s++) {
        lz_tensor *x, *y, *l = NULL;
        batch(s, lo, hi, &x, &y);
        CHECK(lz_call(f, (lz_tensor *[]){x, y}, &l) == 0);
        loss[s] = l ? lz_item(l) : NAN;
        if (s == 0) lz_metrics_reset();
        lz_free(l);
        lz_free(x);
        lz_free(y);
    }
    CHECK(lz_wait() == 0);
    after_first = lz_metrics_get();
    lz_fn_free(f);
    return after_first;
}

static int parity(int rank, int size)
{
    const int lo = B / size * rank, hi = B / size * (rank + 1);
    for (int opt = 0; opt < 2; opt++) {
        model m;
        /* ranks start apart: the broadcast must make them equal */
        model_init(&m, 24, 1u + (unsigned)rank * 1000u, 1);
        CHECK(lz_dist_broadcast(m.p, N_PARAMS) == 0);
        if (opt == 0) m.sgd = lz_sgd_new(m.p, N_PARAMS, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
        else m.adamw = lz_adamw_new(m.p, N_PARAMS, (lz_adamw_opts){.lr = 0.01f, .weight_decay = 0.01f, .decoupled = 1});
        float loss[STEPS], ref_loss[STEPS];
        lz_dist_stats_reset();
        lz_metrics mt = train(&m, lo, hi, loss);
        lz_dist_stats st = lz_dist_stats_get();
        /* after the first call (a warm-up that makes the optimizer's
           state; the second traces and hits its executable): one execution
           per step, nothing compiled, every sum run inside them */
        CHECK_EQ_I(mt.executions, STEPS - 1);
        CHECK_EQ_I(mt.compiles, 0);
        CHECK_EQ_I(mt.capture_replays, STEPS - 2);
        const int buckets = (int)(st.all_reduces / STEPS) - 1;   /* - the loss's */
        CHECK(st.all_reduces % STEPS == 0 && buckets >= 1);
        /* several buckets: the first is summed while backward computes the
           earlier layers' gradients (compile/schedule_comm.c) */
        const char *ov = getenv("LZ_DIST_OVERLAP");
        if (buckets >= 2 && !(ov && !strcmp(ov, "0"))) CHECK(st.overlapped_kernels >= 10 * STEPS);
        /* every rank holds rank 0's parameters, bit for bit */
        for (int i = 0; i < N_PARAMS; i++) {
            float *mine = lz_test_read(m.p[i]);
            lz_tensor *copy = lz_from_host(mine, LZ_F32, lz_ndim(m.p[i]),
                                           (int64_t[]){lz_dim(m.p[i], 0), lz_ndim(m.p[i]) > 1 ? lz_dim(m.p[i], 1) : 0});
            CHECK(lz_dist_broadcast(&copy, 1) == 0);
            float *r0 = lz_test_read(copy);
            CHECK(r0 && mine && memcmp(r0, mine, sizeof(float) * (size_t)lz_numel(copy)) == 0);
            free(r0);
            free(mine);
            lz_free(copy);
        }
        if (rank == 0) {
            model ref;
            model_init(&ref, 24, 1, 0);
            if (opt == 0) ref.sgd = lz_sgd_new(ref.p, N_PARAMS, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
            else ref.adamw = lz_adamw_new(ref.p, N_PARAMS, (lz_adamw_opts){.lr = 0.01f, .weight_decay = 0.01f, .decoupled = 1});
            train(&ref, 0, B, ref_loss);
            double worst = 0;
            for (int i = 0; i < N_PARAMS; i++) {
                float *a = lz_test_read(m.p[i]), *b = lz_test_read(ref.p[i]);
                double e = a && b ? lz_test_rel_err(a, b, lz_numel(m.p[i])) : 1;
                worst = e > worst ? e : worst;
                free(a);
                free(b);
            }
            for (int s = 0; s < STEPS; s++) CHECK_NEAR(loss[s], ref_loss[s], 1e-5 * fabs(ref_loss[s]));
            printf("dist_check parity %s: %d ranks, %d bucket(s), params max rel err %.3g vs 1 "
                   "process, loss %.6f -> %.6f; comm %.3f ms, blocked %.3f ms, %lld kernels overlapped\n",
                   opt ? "adamw" : "sgd", size, buckets, worst, loss[0], loss[STEPS - 1],
                   st.comm_ms, st.wait_ms, (long long)st.overlapped_kernels);
            CHECK(worst <= 1e-5);
            model_free(&ref);
        }
        model_free(&m);
    }
    return 0;
}

/* The first step must fail on this rank with msg in the error. */
static void expect_failure(int rank, int hid, const char *msg, int die_at)
{
    model m;
    model_init(&m, hid, 1, 1);
    m.sgd = lz_sgd_new(m.p, N_PARAMS, (lz_sgd_opts){.lr = 0.1f});
    lz_fn *f = lz_capture(step, &m, 2, 1);
    int failed = 0;
    for (int s = 0; s < STEPS && !failed; s++) {
        if (s == die_at) raise(SIGKILL);
        lz_tensor *x, *y, *l = NULL;
        batch(s, 0, B / 2, &x, &y);
        failed = lz_call(f, (lz_tensor *[]){x, y}, &l) != 0 || isnan(lz_item(l));
        lz_free(l);
        lz_free(x);
        lz_free(y);
    }
    const char *e = lz_last_error();
    fprintf(stderr, "dist_check rank %d: %s\n", rank, e ? e : "no error");
    CHECK(failed && e && strstr(e, msg));
    lz_fn_free(f);
    model_free(&m);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "parity";
    if (lz_dist_init()) {
        fprintf(stderr, "dist_check: %s\n", lz_last_error());
        return 1;
    }
    const int rank = lz_dist_rank(), size = lz_dist_size();
    if (!strcmp(mode, "parity")) {
        CHECK(B % size == 0);
        parity(rank, size);
    } else if (!strcmp(mode, "mismatch")) {
        expect_failure(rank, rank == 1 ? 25 : 24, "the ranks recorded different graphs", -1);
    } else if (!strcmp(mode, "stuck")) {
        if (rank == 1) sleep(60);
        else expect_failure(rank, 24, "no answer from the other ranks within", -1);
        /* a real program stops here; mpirun ends the sleeping rank */
        return lz_test_done() ? 1 : 3;
    } else if (!strcmp(mode, "fail")) {
        expect_failure(rank, 24, "", -1);
        return 1;
    } else if (!strcmp(mode, "die")) {
        expect_failure(rank, 24, "", rank == 1 ? 3 : -1);
        return 1;
    } else {
        fprintf(stderr, "dist_check: unknown mode %s\n", mode);
        return 2;
    }
    int rc = lz_test_done();
    lz_dist_finalize();
    return rc;
}
