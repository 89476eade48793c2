/* Out of host memory anywhere in lz_call (LZ_FAULT_HOST), on the paths
 * test_fault's training step does not take: a call inside the caller's
 * scope (its results are handed over to it), a step that makes a host
 * constant (the trace notes it), returns an alias of state it then updates
 * and keeps a result, with LZ_CAPTURE_CHECK=2 (every second call traces
 * again and compares). Each allocation of a 5-call run fails in turn: no
 * crash, each call either fails or returns what a direct call returns, a
 * good call afterwards leaves the state at a whole number of steps, and no
 * tensor handle or device byte is left over. Also, without faults: a
 * returned alias of state holds the value it had when the call began,
 * traced or replayed, as in a direct call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "testlib.h"
#include "backend/memory.h"
#include "base/fault.h"
#include "engine/cache.h"
#include "engine/tensor.h"

enum { N = 4, CALLS = 5 };

static const float x0[N] = {1, 2, 3, 4}, dx[N] = {0.5f, -1, 2, 0.25f};

typedef struct model {
    lz_tensor *w;            /* state, updated in place by the step */
    lz_tensor *scale;        /* state the step makes from host memory at its
                                first call; the caller changes it */
} model;

/* out[0]: w before the update (an alias, not computed); out[1]: kept,
   sum(w * x) * 0.5 * scale (0.5 is a host constant made in the step);
   then w += x. */
static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    if (!m->scale && !(m->scale = lz_keep(lz_scalar(1.0f)))) return -1;
    out[0] = lz_dropout(m->w, 0.5f, 0);
    out[1] = lz_keep(lz_mul(lz_mul(lz_sum(lz_mul(m->w, in[0])), lz_scalar(0.5f)), m->scale));
    if (!out[0] || !out[1]) return -1;
    return lz_assign(m->w, lz_add(m->w, in[0]));
}

static int tensors_alive(void)
{
    int n = 0;
    for (const lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    return n;
}

/* w's value, or NAN in v[0] when unreadable. */
static void read_w(const model *m, float *v)
{
    if (lz_to_host(m->w, v, sizeof(float) * N) != 0) v[0] = NAN;
}

/* The k with w == x0 + k * dx (exactly: the values are binary fractions),
   or -1. */
static int steps_applied(const float *v)
{
    for (int k = 0; k <= CALLS + 1; k++) {
        int same = 1;
        for (int i = 0; i < N; i++) same &= v[i] == x0[i] + (float)k * dx[i];
        if (same) return k;
    }
    return -1;
}

/* lz_call with stderr silenced: each capture warns once about the host
   constant, which is not this test's concern. */
static int quiet_call(lz_fn *f, lz_tensor *x, lz_tensor **out)
{
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    int rc = lz_call(f, &x, out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(null);
    return rc;
}

/* One call inside a scope, the scale set to `scale` first: 0 when it failed
   cleanly or returned what a direct call returns (given w before it); 1 on
   a wrong result. */
static int checked_call(lz_fn *f, model *m, lz_tensor *x, float scale, int *failed)
{
    float before[N], alias[N] = {0}, loss = NAN;
    read_w(m, before);
    /* the copy may meet the fault: the scale then keeps its value */
    if (m->scale && lz_copy_from_host(m->scale, &scale, sizeof scale) != 0 &&
        lz_to_host(m->scale, &scale, sizeof scale) != 0)
        scale = NAN;
    if (!m->scale) scale = 1.0f;
    lz_clear_error();
    lz_scope_begin();
    lz_tensor *out[2] = {NULL, NULL};
    int rc = quiet_call(f, x, out);
    int bad = 0;
    if (rc == 0) {
        bad |= !out[0] || !out[1];
        if (!bad && lz_to_host(out[0], alias, sizeof alias) == 0 && lz_to_host(out[1], &loss, sizeof loss) == 0) {
            float want = 0;
            for (int i = 0; i < N; i++) want += before[i] * dx[i];
            bad |= memcmp(alias, before, sizeof alias) != 0 || loss != want * 0.5f * scale;
        } else {
            rc = -1;   /* the execution failed: reported on the read */
        }
    } else {
        bad |= out[0] != NULL || out[1] != NULL || lz_last_error() == NULL;
    }
    lz_scope_end();
    lz_free(out[1]);   /* kept by the step: past the scope, the caller's */
    *failed = rc != 0;
    return bad;
}

static void test_alias_holds_old_value(void)
{
    model m = {lz_from_host(x0, LZ_F32, 1, (int64_t[]){N}), NULL};
    lz_tensor *x = lz_from_host(dx, LZ_F32, 1, (int64_t[]){N});
    lz_fn *f = lz_capture(step, &m, 1, 2);
    int64_t replays0 = lz_metrics_get().capture_replays;
    for (int c = 0; c < CALLS; c++) {
        int failed;
        CHECK_EQ_I(checked_call(f, &m, x, (float)(c + 1), &failed), 0);
        CHECK(!failed);
    }
    CHECK(lz_metrics_get().capture_replays - replays0 >= 2);
    float v[N];
    read_w(&m, v);
    CHECK_EQ_I(steps_applied(v), CALLS);
    lz_fn_free(f);
    lz_free(x);
    lz_free(m.w);
    lz_free(m.scale);
}

static void test_sweep(void)
{
    lz_cache_clear();
    const int tensors0 = tensors_alive();
    const int64_t bytes0 = lz_device_bytes_now();
    long swept = 0, reported = 0, n;
    for (n = 1;; n++) {
        model m = {lz_from_host(x0, LZ_F32, 1, (int64_t[]){N}), NULL};
        lz_tensor *x = lz_from_host(dx, LZ_F32, 1, (int64_t[]){N});
        lz_fn *f = lz_capture(step, &m, 1, 2);
        CHECK(lz_wait() == 0);
        lz_fault_reset();
        lz_fault_set(LZ_FAULT_HOST, n);
        int bad = 0, errors = 0;
        for (int c = 0; c < CALLS; c++) {
            int failed;
            bad += checked_call(f, &m, x, (float)(c + 2), &failed);
            errors += failed;
        }
        errors += lz_wait() != 0;
        long fired = lz_fault_fired(LZ_FAULT_HOST);
        lz_fault_reset();
        int failed;
        bad += checked_call(f, &m, x, 0.25f, &failed);
        CHECK(!failed);
        float v[N];
        read_w(&m, v);
        int k = steps_applied(v);
        if (bad || k < 1 || (!fired && (errors || k != CALLS + 1)))
            fprintf(stderr, "host fault %ld: fired %ld, errors %d, wrong results %d, steps %d\n", n, fired,
                    errors, bad, k);
        CHECK_EQ_I(bad, 0);
        CHECK(k >= 1);
        if (!fired) CHECK(errors == 0 && k == CALLS + 1);
        swept += fired > 0;
        reported += fired > 0 && errors > 0;
        lz_fn_free(f);
        lz_free(x);
        lz_free(m.w);
        lz_free(m.scale);
        lz_cache_clear();
        CHECK_EQ_I(tensors_alive(), tensors0);
        CHECK_EQ_I(lz_device_bytes_now(), bytes0);
        if (!fired) break;   /* past the run's last host allocation */
    }
    fprintf(stderr, "host faults: %ld allocations swept, %ld reported an error\n", swept, reported);
    CHECK(swept >= 100);
    CHECK(reported >= 1);
}

int main(void)
{
    setenv("LZ_CAPTURE_CHECK", "2", 1);
    test_alias_holds_old_value();
    test_sweep();
    lz_shutdown();
    return lz_test_done();
}
