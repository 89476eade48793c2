/* lz_shutdown: after a lazy loop and a captured loop whose handles are all
 * freed, the library holds nothing (no tensor, no cached executable, no
 * device memory, no cached free block, no queued work); handles the caller
 * still holds survive it; and the library works again afterwards, giving
 * the same numbers as a fresh process would. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "backends/cpu/buffer_pool.h"
#include "backend/memory.h"
#include "base/profile.h"
#include "engine/cache.h"
#include "engine/tensor.h"
#include "runtime/executor.h"

enum { B = 8, IN = 6, HID = 12, OUT = 3, STEPS = 6 };

typedef struct model {
    lz_tensor *w1, *w2, *x, *y;
    lz_sgd *opt;
} model;

static void model_init(model *m)
{
    const int64_t s1[2] = {IN, HID}, s2[2] = {HID, OUT}, sx[2] = {B, IN}, sy[1] = {B};
    m->w1 = lz_test_rand(1, -0.4f, 0.4f, 2, s1);
    m->w2 = lz_test_rand(2, -0.4f, 0.4f, 2, s2);
    m->x = lz_test_rand(3, -1.0f, 1.0f, 2, sx);
    int64_t labels[B];
    for (int i = 0; i < B; i++) labels[i] = i % OUT;
    m->y = lz_from_host(labels, LZ_I64, 1, sy);
    lz_requires_grad(m->w1, 1);
    lz_requires_grad(m->w2, 1);
    lz_tensor *ps[2] = {m->w1, m->w2};
    m->opt = lz_sgd_new(ps, 2, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
}

static void model_free(model *m)
{
    lz_sgd_free(m->opt);
    lz_free(m->w1); lz_free(m->w2); lz_free(m->x); lz_free(m->y);
}

/* Dropout reaches the random generator's state and layer norm the shared
   eps scalar: both are state the library itself holds. */
static int step_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    lz_tensor *h = lz_layer_norm(lz_relu(lz_matmul(in[0], m->w1)), 1, NULL, NULL, 1e-5f);
    h = lz_dropout(h, 0.25f, 1);
    lz_tensor *loss = lz_cross_entropy(lz_matmul(h, m->w2), in[1]);
    lz_sgd_zero_grad(m->opt);
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

/* STEPS lazy steps then STEPS captured calls of a fresh model; losses in
   loss[0 .. 2*STEPS). */
static void train(float *loss)
{
    model m;
    model_init(&m);
    lz_tensor *in[2] = {m.x, m.y};
    for (int i = 0; i < STEPS; i++) {
        lz_tensor *out[1] = {NULL};
        lz_scope_begin();
        CHECK_EQ_I(step_fn(&m, in, out), 0);
        lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
        loss[i] = lz_item(out[0]);
        lz_free(out[0]);
    }
    lz_fn *f = lz_capture(step_fn, &m, 2, 1);
    for (int i = 0; i < STEPS; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        loss[STEPS + i] = lz_item(out[0]);
        lz_free(out[0]);
    }
    CHECK(lz_metrics_get().capture_replays > 0);
    lz_fn_free(f);
    model_free(&m);
}

static int tensors_alive(void)
{
    int n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    return n;
}

#define check_released() check_released_at(__LINE__)
static void check_released_at(int line)
{
    int failed = lz_test_failed;
    CHECK_EQ_I(tensors_alive(), 0);
    CHECK_EQ_I(lz_live_count(), 0);
    CHECK_EQ_I(lz_cache_size(), 0);
    CHECK_EQ_I(lz_device_bytes_now(), 0);
    CHECK_EQ_I(lz_pool_cached_bytes(), 0);
    /* with LZ_HUGE_PAGES=1 blocks of 2 MiB and more are mappings of their
       own, which valgrind does not count as lost: the pool's counter does */
    CHECK_EQ_I(lz_pool_held_bytes(), 0);
    CHECK_EQ_I(lz_executor_in_flight(), 0);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.executions, 0);
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.peak_bytes, 0);
    CHECK_EQ_I(lz_profile_read(NULL, 0), 0);   /* the profile is empty, and off: */
    CHECK_EQ_I(lz_profile_on(), 0);
    CHECK(lz_last_error() == NULL);
    if (lz_test_failed != failed) fprintf(stderr, "  (released check at line %d)\n", line);
}

/* A lazy and a captured loop, everything freed, then lz_shutdown: nothing
   is left. Run again: the same losses as the first run (the generator is
   back at the default seed), and released again. */
static void test_loops_release_everything(void)
{
    float first[2 * STEPS], again[2 * STEPS];
    lz_profile_enable(1);
    train(first);
    CHECK(lz_profile_read(NULL, 0) > 0);
    /* the library's own holdings before shutdown: generator state (layer
       norm's eps is an attribute of its step, no scalar), cached
       executables, cached free blocks */
    CHECK_EQ_I(tensors_alive(), 2);
    CHECK(lz_cache_size() >= 2);
    if (!strcmp(lz_device_name(), "cpu")) CHECK(lz_pool_cached_bytes() > 0);   /* the CPU's pool */
    lz_set_error("a stale error");
    lz_shutdown();
    check_released();

    lz_metrics_reset();
    train(again);
    for (int i = 0; i < 2 * STEPS; i++) {
        CHECK(isfinite(first[i]));
        CHECK_EQ_I(memcmp(&first[i], &again[i], sizeof first[i]), 0);
    }
    /* a fresh cache: the loops compiled again */
    CHECK(lz_metrics_get().compiles >= 2);
    lz_shutdown();
    check_released();
    lz_shutdown();       /* twice in a row: nothing to do */
    check_released();
}

/* Handles the caller still holds stay valid across lz_shutdown: a data
   tensor, a pending one (computed after it), and a captured function,
   which traces again on its next call. */
static void test_held_handles_survive(void)
{
    const int64_t s[1] = {4};
    float v[4] = {1, 2, 3, 4};
    lz_tensor *a = lz_from_host(v, LZ_F32, 1, s);
    lz_tensor *p = lz_mul(a, a);
    lz_shutdown();
    CHECK(lz_is_pending(p));

    model m;
    model_init(&m);
    lz_tensor *in[2] = {m.x, m.y};
    lz_fn *f = lz_capture(step_fn, &m, 2, 1);
    float loss[3];
    for (int i = 0; i < 3; i++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(lz_call(f, in, out), 0);
        loss[i] = lz_item(out[0]);
        lz_free(out[0]);
        /* mid-run: a held capture (pinned executable, bound state) */
        if (i == 1) {
            CHECK_EQ_I(lz_metrics_get().capture_replays, 0);
            lz_shutdown();
            CHECK_EQ_I(lz_cache_size(), 0);
        }
    }
    /* the third call traced again (the library's scalars it had bound
       were dropped) and went on from the trained weights */
    CHECK(isfinite(loss[2]));
    CHECK(loss[2] < loss[0]);
    float got[4];
    CHECK_EQ_I(lz_to_host(p, got, sizeof got), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_I((int)got[i], (int)(v[i] * v[i]));
    lz_fn_free(f);
    model_free(&m);
    lz_free(a);
    lz_free(p);
    lz_shutdown();
    check_released();
}

/* lz_shutdown ends open scopes (their handles are dropped) and no-grad
   sections. */
static void test_open_scope_and_no_grad(void)
{
    const int64_t s[1] = {3};
    lz_scope_begin();
    lz_tensor *t = lz_zeros(LZ_F32, 1, s);
    lz_tensor *u = lz_add(t, t);
    (void)u;
    lz_no_grad_begin();
    CHECK_EQ_I(tensors_alive(), 2);
    lz_shutdown();
    check_released();
    lz_tensor *w = lz_zeros(LZ_F32, 1, s);
    lz_requires_grad(w, 1);
    lz_tensor *sq = lz_mul(w, w), *sum = lz_sum(sq);
    CHECK_EQ_I(lz_backward(sum), 0);
    CHECK(lz_grad(w) != NULL);               /* grad mode is on again */
    lz_free(sq);
    lz_free(sum);
    lz_free(w);
    lz_shutdown();
    check_released();
}

/* A convolution's backward pass leaves per-thread scratch memory in the
   CPU backend; lz_shutdown frees it too (test_leaks's valgrind run covers
   the MLP only, so run this program under valgrind to see it). */
static void test_conv_scratch(void)
{
    const int64_t sx[4] = {2, 3, 8, 8}, sw[4] = {4, 3, 3, 3};
    lz_tensor *x = lz_test_rand(5, -1.0f, 1.0f, 4, sx);
    lz_tensor *w = lz_test_rand(6, -0.5f, 0.5f, 4, sw);
    lz_requires_grad(w, 1);
    lz_scope_begin();
    lz_conv2d_opts o = {.padding = {1, 1}};
    CHECK_EQ_I(lz_backward(lz_sum(lz_conv2d(x, w, NULL, o))), 0);
    lz_scope_end();
    lz_mark_step();
    float g[4 * 3 * 3 * 3];
    CHECK_EQ_I(lz_to_host(lz_grad(w), g, sizeof g), 0);
    lz_free(w);
    lz_free(x);
    lz_shutdown();
    check_released();
}

/* Called from a step function being traced, lz_shutdown refuses. */
static int shutdown_in_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    lz_shutdown();
    out[0] = lz_add(in[0], in[0]);
    return lz_last_error() ? -1 : 0;
}

static void test_refused_while_tracing(void)
{
    const int64_t s[1] = {2};
    lz_tensor *x = lz_zeros(LZ_F32, 1, s);
    lz_fn *f = lz_capture(shutdown_in_step, NULL, 1, 1);
    lz_tensor *out[1] = {NULL};
    CHECK_EQ_I(lz_call(f, &x, out), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_shutdown"));
    CHECK(out[0] == NULL);
    lz_fn_free(f);
    lz_free(x);
    lz_shutdown();
    check_released();
}

int main(void)
{
    lz_shutdown();       /* before any other call: nothing to do */
    check_released();
    test_loops_release_everything();
    test_held_handles_survive();
    test_open_scope_and_no_grad();
    test_conv_scratch();
    test_refused_while_tracing();
    return lz_test_done();
}
