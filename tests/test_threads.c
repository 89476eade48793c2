/* Threads: lazyc records on one thread. Calls that touch tensors, scopes,
 * steps or counters from a second thread while the first is mid-recording
 * fail cleanly (NULL / -1 / NaN and "called from thread") and leave the
 * recording thread's IR, values, counters and error message as they were;
 * the per-thread error and lz_metrics_get work from any thread; the
 * loader's prefetch thread never trips the rule; lz_shutdown hands the
 * role to whichever thread calls next. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

static lz_tensor *a, *b, *y;            /* the main thread's */
static lz_fn *fn;
static lz_sgd *opt;
static atomic_int stop, failures, wrong;

/* A call made off the recording thread failed with the thread message. */
static void expect_refused(const char *what, int failed)
{
    const char *e = lz_last_error();
    if (failed && e && strstr(e, "called from thread") && strstr(e, "lazyc records on one thread")) return;
    atomic_fetch_add(&wrong, 1);
    fprintf(stderr, "second thread: %s: %s (error: %s)\n", what, failed ? "wrong message" : "succeeded",
            e ? e : "none");
}

#define REFUSED_PTR(call) do { lz_clear_error(); expect_refused(#call, (call) == NULL); } while (0)
#define REFUSED_INT(call) do { lz_clear_error(); expect_refused(#call, (call) == -1); } while (0)
#define REFUSED_VOID(call) do { lz_clear_error(); call; expect_refused(#call, 1); } while (0)

static int step_double(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_add(in[0], in[0]);
    return out[0] ? 0 : -1;
}

/* Every kind of call that reaches shared state, once. */
static void second_thread_calls(void)
{
    float buf[4];
    const int64_t s2[] = {2, 2};
    REFUSED_PTR(lz_add(a, b));
    REFUSED_PTR(lz_exp(y));
    REFUSED_PTR(lz_matmul(a, b));
    REFUSED_PTR(lz_reshape(y, 1, (const int64_t[]){4}));
    REFUSED_PTR(lz_from_host(buf, LZ_F32, 2, s2));
    REFUSED_PTR(lz_zeros(LZ_F32, 2, s2));
    REFUSED_PTR(lz_scalar(1.0f));
    REFUSED_PTR(lz_retain(y));
    REFUSED_PTR(lz_keep(y));
    REFUSED_INT(lz_to_host(y, buf, sizeof buf));
    lz_clear_error();
    expect_refused("lz_item(y)", isnan(lz_item(y)));
    REFUSED_INT(lz_copy_from_host(a, buf, sizeof buf));
    REFUSED_INT(lz_assign(a, b));
    REFUSED_INT(lz_sync(&y, 1, 1));
    REFUSED_INT(lz_wait());
    REFUSED_INT(lz_backward(y));
    REFUSED_INT(lz_ndim(y));
    REFUSED_INT(lz_numel(y));
    REFUSED_INT(lz_dim(y, 0));
    REFUSED_INT(lz_call(fn, &a, (lz_tensor *[]){NULL}));
    REFUSED_INT(lz_sgd_step(opt));
    /* named as the call made, not as the call it makes inside */
    REFUSED_VOID(lz_sgd_set_lr(opt, 0.5f));
    expect_refused("lz_sgd_set_lr's name", lz_last_error() && strstr(lz_last_error(), "lz_sgd_set_lr: called"));
    REFUSED_VOID(lz_sgd_zero_grad(opt));
    expect_refused("lz_sgd_zero_grad's name", lz_last_error() && strstr(lz_last_error(), "lz_sgd_zero_grad: called"));
    REFUSED_VOID(lz_mark_step());
    REFUSED_VOID(lz_free(y));            /* left alone, not freed */
    REFUSED_VOID(lz_scope_begin());
    REFUSED_VOID(lz_scope_end());
    REFUSED_VOID(lz_no_grad_begin());
    REFUSED_VOID(lz_requires_grad(a, 1));
    REFUSED_VOID(lz_zero_grad(a));
    REFUSED_VOID(lz_metrics_reset());
    REFUSED_VOID(lz_set_eager(1));
    REFUSED_VOID(lz_manual_seed(7));
    REFUSED_VOID(lz_shutdown());
    REFUSED_PTR(lz_metrics_report());
    lz_clear_error();
    lz_metrics m = lz_metrics_get();           /* zeros, not a racy read */
    expect_refused("lz_metrics_get", m.mark_steps == 0 && m.graphs == 0);
    /* these work from any thread */
    if (lz_dtype_size(LZ_I64) != 8 || isnan(lz_lr_step(0.1f, 1, 1, 0.5f))) atomic_fetch_add(&wrong, 1);
    lz_set_error("the second thread's own error");
    if (strcmp(lz_last_error(), "the second thread's own error") != 0) atomic_fetch_add(&wrong, 1);
}

/* ---- phase 1: one round of calls while the main thread is mid-recording -- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go, done;

static void *one_round(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    second_thread_calls();
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* ---- phase 2: a second thread hammering while the main thread steps ----- */

static void *hammer(void *arg)
{
    (void)arg;
    float buf[4];
    while (!atomic_load(&stop)) {
        lz_clear_error();
        lz_tensor *t = lz_add(a, b);
        expect_refused("lz_add", t == NULL);
        lz_clear_error();
        expect_refused("lz_to_host", lz_to_host(a, buf, sizeof buf) == -1);
        lz_clear_error();
        lz_mark_step();
        expect_refused("lz_mark_step", 1);
        lz_clear_error();
        lz_free(a);
        expect_refused("lz_free", 1);
        atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

/* ---- phase 4: the role moves at lz_shutdown or when its thread exits ---- */

static float other_thread_value;
static int refused_while_held, shut_down_at_end;

static void *record_elsewhere(void *arg)
{
    (void)arg;
    const float v[2] = {3, 4};
    const int64_t s[1] = {2};
    lz_tensor *t = lz_from_host(v, LZ_F32, 1, s);
    lz_tensor *sq = lz_mul(t, t);
    pthread_mutex_lock(&mu);                /* hold the role while main tries */
    go = 2;
    pthread_cond_broadcast(&cv);
    while (go != 3) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    lz_tensor *sum = lz_sum(sq);
    other_thread_value = sum ? lz_item(sum) : NAN;
    lz_free(sum);
    lz_free(sq);
    lz_free(t);
    if (shut_down_at_end) lz_shutdown();   /* else the role goes with the thread */
    return NULL;
}

static void run_elsewhere(int shut_down)
{
    shut_down_at_end = shut_down;
    other_thread_value = 0;
    pthread_t th;
    go = 0;
    pthread_create(&th, NULL, record_elsewhere, NULL);
    pthread_mutex_lock(&mu);
    while (go != 2) pthread_cond_wait(&cv, &mu);
    lz_clear_error();
    lz_tensor *t = lz_scalar(1.0f);       /* the other thread holds the role */
    const char *e = lz_last_error();
    refused_while_held = !t && e && strstr(e, "called from thread");
    go = 3;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(th, NULL);
}

static void write_idx(const char *path, int ndim, const unsigned *dims)
{
    FILE *f = fopen(path, "wb");
    unsigned char head[4] = {0, 0, 8, (unsigned char)ndim};
    fwrite(head, 1, 4, f);
    unsigned total = 1;
    for (int d = 0; d < ndim; d++) {
        unsigned char be[4] = {0, 0, dims[d] >> 8 & 255, dims[d] & 255};
        fwrite(be, 1, 4, f);
        total *= dims[d];
    }
    for (unsigned i = 0; i < total; i++) fputc((int)(i % 10), f);
    fclose(f);
}

int main(void)
{
    lz_set_eager(0);
    const float av[4] = {1, 2, 3, 4}, bv[4] = {10, 20, 30, 40};
    const int64_t s2[] = {2, 2};
    a = lz_from_host(av, LZ_F32, 2, s2);     /* the main thread records: it owns the role */
    b = lz_from_host(bv, LZ_F32, 2, s2);
    fn = lz_capture(step_double, NULL, 1, 1);
    lz_tensor *w = lz_zeros(LZ_F32, 2, s2);
    lz_requires_grad(w, 1);
    opt = lz_sgd_new(&w, 1, (lz_sgd_opts){.lr = 0.1f});
    CHECK(a && b && fn && w && opt);
    lz_metrics_reset();

    /* phase 1: pending IR on the main thread, the other thread calls */
    lz_clear_error();
    lz_scope_begin();
    lz_tensor *x = lz_add(a, b);
    y = lz_keep(lz_mul(x, x));
    pthread_t th;
    pthread_create(&th, NULL, one_round, NULL);
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    while (!done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_join(th, NULL);
    CHECK_EQ_I(atomic_load(&wrong), 0);
    CHECK(lz_last_error() == NULL);          /* the other thread's errors are its own */
    CHECK(lz_is_pending(y));
    lz_tensor *z = lz_sub(y, a);              /* recording goes on in the same scope */
    lz_keep(z);
    lz_scope_end();
    lz_mark_step();
    float out[4];
    CHECK(lz_to_host(z, out, sizeof out) == 0);
    for (int i = 0; i < 4; i++) CHECK_NEAR(out[i], (av[i] + bv[i]) * (av[i] + bv[i]) - av[i], 1e-3);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.mark_steps, 1);             /* the other thread's barrier did not count */
    CHECK_EQ_I(m.graphs, 1);
    CHECK_EQ_I(m.executions, 1);
    CHECK_EQ_I(m.transfers_from_device, 1);
    CHECK_EQ_I(m.transfers_to_device, 0);
    lz_free(y);
    lz_free(z);

    /* phase 2: steps while another thread keeps calling */
    lz_metrics_reset();
    atomic_store(&stop, 0);
    pthread_create(&th, NULL, hammer, NULL);
    const int steps = 40;
    for (int s = 0; s < steps; s++) {
        lz_scope_begin();
        lz_tensor *r = lz_mul(lz_add(a, b), lz_scalar((float)s));
        lz_mark_step();
        CHECK(r && lz_to_host(r, out, sizeof out) == 0);
        CHECK_NEAR(out[3], 44.0f * (float)s, 1e-3);
        lz_scope_end();
    }
    while (atomic_load(&failures) < 10) usleep(1000);   /* overlap for sure */
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ_I(atomic_load(&wrong), 0);
    m = lz_metrics_get();
    CHECK_EQ_I(m.mark_steps, steps);
    CHECK_EQ_I(m.graphs, steps);
    CHECK_EQ_I(m.executions, steps);
    CHECK_EQ_I(m.compiles, 1);                /* one structure, cached */
    CHECK(lz_to_host(a, out, sizeof out) == 0 && out[0] == 1.0f);   /* never freed */

    /* phase 3: the loader's prefetch thread fills host memory only */
    char img[64], lab[64];
    snprintf(img, sizeof img, "/tmp/lz_threads_%d.img", (int)getpid());
    snprintf(lab, sizeof lab, "/tmp/lz_threads_%d.lab", (int)getpid());
    write_idx(img, 3, (const unsigned[]){7, 2, 3});
    write_idx(lab, 1, (const unsigned[]){7});
    lz_dataset *ds = lz_dataset_idx(img, lab);
    lz_loader *l = ds ? lz_loader_new(ds, (lz_loader_opts){.batch = 2, .shuffle = 1, .seed = 3}) : NULL;
    CHECK(l != NULL);
    int batches = 0;
    lz_tensor *bx, *by;
    for (int rc; l && (rc = lz_loader_next(l, &bx, &by)) != 0; batches++) {
        CHECK_EQ_I(rc, 1);
        if (rc != 1) break;
        CHECK(lz_sum(bx) != NULL);             /* usable on the recording thread */
        lz_free(bx);
        lz_free(by);
    }
    CHECK_EQ_I(batches, 4);
    lz_loader_free(l);
    lz_dataset_free(ds);
    remove(img);
    remove(lab);

    /* phase 4: lz_shutdown gives the role up; another thread records,
       and the main thread is refused until that one shuts down too */
    lz_fn_free(fn);
    lz_sgd_free(opt);
    lz_free(w);
    lz_free(a);
    lz_free(b);
    lz_shutdown();
    for (int shut_down = 1; shut_down >= 0; shut_down--) {
        run_elsewhere(shut_down);
        CHECK(refused_while_held);
        CHECK_NEAR(other_thread_value, 25.0f, 0);
        lz_clear_error();
        lz_tensor *again = lz_scalar(2.0f);   /* released: the main thread records again */
        CHECK(again && lz_item(again) == 2.0f);
        lz_free(again);
        lz_shutdown();
    }
    return lz_test_done();
}
