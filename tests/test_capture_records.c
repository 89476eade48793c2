/* Capture and autograd records: a replay computes what a direct call would,
 * or fails as it would.
 * - A step's output fed back as the next call's input (h = tanh(h W + x),
 *   W trained in the step): the backward reaches the graph an earlier
 *   backward freed, so the direct call fails, and so does every captured
 *   call, never a replay that treats h as plain data; with lz_detach(h) both
 *   train, to the same W.
 * - An input made by ops whose graph is alive runs as a direct call (a
 *   replay could not follow the backward into it), with one warning.
 * - A captured forward whose result has a record replays; a backward from a
 *   replayed result fails saying why.
 * - lz_fn_free from inside the function's own trace is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

typedef struct rnn { lz_tensor *w; lz_sgd *opt; int detach; } rnn;

static int rnn_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    rnn *m = ctx;
    lz_tensor *h0 = m->detach ? lz_detach(in[0]) : in[0];
    lz_tensor *h = lz_tanh(lz_add(lz_mul(h0, m->w), in[1]));
    if (lz_backward(lz_sum(h)) != 0 || lz_sgd_step(m->opt) != 0) return -1;
    lz_sgd_zero_grad(m->opt);
    out[0] = h;
    return 0;
}

/* 5 calls; W at the end in *w. The number of calls that succeeded. */
static int run_rnn(int captured, int detach, float w[2])
{
    lz_scope_begin();
    const int64_t s[] = {2};
    rnn m = {lz_from_host((const float[]){0.5f, -0.3f}, LZ_F32, 1, s), NULL, detach};
    lz_requires_grad(m.w, 1);
    m.opt = lz_sgd_new(&m.w, 1, (lz_sgd_opts){.lr = 0.1f});
    /* the step leaves W without a gradient, as it found it: the first
       trace is steady, so without the key on dead records the second call
       would replay, reading h as plain data */
    lz_fn *f = lz_capture(rnn_step, &m, 2, 1);
    lz_tensor *h = lz_from_host((const float[]){0.1f, 0.2f}, LZ_F32, 1, s);
    lz_tensor *x = lz_from_host((const float[]){0.3f, -0.1f}, LZ_F32, 1, s);
    int ok = 0;
    for (int k = 0; k < 5; k++) {
        lz_tensor *in[2] = {h, x}, *out = NULL;
        int rc;
        if (captured) {
            rc = lz_call(f, in, &out);
        } else {
            lz_scope_begin();
            rc = rnn_step(&m, in, &out);
            if (rc == 0) lz_keep(out);
            lz_scope_end();
            lz_mark_step();
        }
        if (rc != 0) {
            const char *e = lz_last_error();
            CHECK(e && strstr(e, "already freed by an earlier lz_backward"));
            break;
        }
        h = out;
        ok++;
    }
    CHECK(lz_to_host(m.w, w, 2 * sizeof(float)) == 0);
    lz_fn_free(f);
    lz_sgd_free(m.opt);
    lz_scope_end();
    return ok;
}

static void fed_back_output(void)
{
    float lazy[2], cap[2];
    int n_lazy = run_rnn(0, 0, lazy), n_cap = run_rnn(1, 0, cap);
    CHECK_EQ_I(n_lazy, 1);   /* the second call's backward reaches the first's freed graph */
    CHECK_EQ_I(n_cap, n_lazy);
    CHECK(lazy[0] == cap[0] && lazy[1] == cap[1]);
    lz_metrics_reset();
    n_lazy = run_rnn(0, 1, lazy);
    n_cap = run_rnn(1, 1, cap);
    CHECK_EQ_I(n_lazy, 5);
    CHECK_EQ_I(n_cap, 5);
    CHECK(lazy[0] == cap[0] && lazy[1] == cap[1]);
    CHECK(lz_metrics_get().capture_replays >= 2);   /* once each key has its trace */
}

typedef struct lin { lz_tensor *w; } lin;

/* sum((x w)^2): the record of the square saves x w, a pending value */
static int forward(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    lz_tensor *y = lz_mul(in[0], m->w);
    out[0] = lz_sum(lz_mul(y, y));
    return out[0] ? 0 : -1;
}

/* Runs fn with stderr sent to a file; the text it wrote. */
static void capture_stderr(void (*fn)(void *), void *arg, char *text, size_t cap)
{
    char path[] = "/tmp/lz_capture_records_XXXXXX";
    int fd = mkstemp(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, cap - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    close(fd);
    unlink(path);
}

static void call_with_live_record(void *arg)
{
    lin *m = arg;
    lz_fn *f = lz_capture(forward, m, 1, 1);
    const int64_t s[] = {2};
    lz_tensor *v = lz_from_host((const float[]){1, 2}, LZ_F32, 1, s);
    lz_requires_grad(v, 1);
    for (int k = 0; k < 3; k++) {
        lz_tensor *x = lz_mul(v, v), *o = NULL;   /* its graph is alive */
        CHECK(lz_call(f, &x, &o) == 0);
        lz_zero_grad(v);
        CHECK(lz_backward(o) == 0);   /* through the step into x's graph */
        float g[2];
        CHECK(lz_to_host(lz_grad(v), g, sizeof g) == 0);
        /* o = sum(9 x^2) with x = v^2: do/dv = 36 v^3 */
        CHECK(g[0] == 36.0f && g[1] == 288.0f);
    }
    lz_fn_free(f);
}

static void input_with_live_record(void)
{
    lz_scope_begin();
    lin m = {lz_full(LZ_F32, 1, (const int64_t[]){2}, 3.0)};
    lz_metrics_reset();
    char text[4096];
    capture_stderr(call_with_live_record, &m, text, sizeof text);
    CHECK(strstr(text, "input 0 of a captured step carries an autograd record") != NULL);
    CHECK(strstr(text, "lz_detach") != NULL);
    const char *second = strstr(text, "carries an autograd record");
    CHECK(second && !strstr(second + 1, "carries an autograd record"));   /* once */
    CHECK_EQ_I(lz_metrics_get().capture_replays, 0);
    CHECK_EQ_I(lz_metrics_get().capture_fallbacks, 3);
    lz_scope_end();
}

static void forward_with_record_replays(void)
{
    lz_scope_begin();
    lin m = {lz_full(LZ_F32, 1, (const int64_t[]){2}, 3.0)};
    lz_requires_grad(m.w, 1);
    lz_fn *f = lz_capture(forward, &m, 1, 1);
    const int64_t s[] = {2};
    lz_tensor *x1 = lz_from_host((const float[]){1, 2}, LZ_F32, 1, s);
    lz_tensor *x2 = lz_from_host((const float[]){5, 7}, LZ_F32, 1, s);
    lz_metrics_reset();
    lz_tensor *first = NULL, *o = NULL;
    CHECK(lz_call(f, &x1, &first) == 0);   /* traced: a real record */
    CHECK(lz_item(first) == 45.0f);
    for (int k = 0; k < 9; k++) {
        CHECK(lz_call(f, &x2, &o) == 0);
        CHECK(lz_item(o) == 666.0f);
        if (k < 8) lz_free(o);
    }
    lz_metrics m1 = lz_metrics_get();
    CHECK_EQ_I(m1.capture_replays, 9);
    CHECK_EQ_I(m1.graphs, 1);
    /* the traced call's record still differentiates its own forward: the
       replays did not write their values into what it saved */
    CHECK(lz_backward(first) == 0);
    float g[2];
    CHECK(lz_to_host(lz_grad(m.w), g, sizeof g) == 0);
    CHECK(g[0] == 6.0f && g[1] == 24.0f);   /* 2 x^2 w at x = (1, 2), w = 3 */
    /* a replay records no autograd: a backward from its result says so */
    lz_clear_error();
    CHECK(lz_backward(o) == -1);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "returned by a replay of a captured step"));
    lz_clear_error();
    CHECK(lz_backward(lz_sum(lz_scale(o, 2))) == -1);   /* and from what is made of it */
    e = lz_last_error();
    CHECK(e && strstr(e, "returned by a replay of a captured step"));
    lz_fn_free(f);
    lz_scope_end();
}

typedef struct self { lz_fn *f; int rc; } self;

static int frees_itself(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    self *s = ctx;
    lz_clear_error();
    lz_fn_free(s->f);
    const char *e = lz_last_error();
    s->rc = e && strstr(e, "lz_fn_free: the captured function is being called") ? 0 : -1;
    out[0] = lz_sum(in[0]);
    return 0;
}

static void free_inside_trace(void)
{
    lz_scope_begin();
    self s = {NULL, -1};
    s.f = lz_capture(frees_itself, &s, 1, 1);
    lz_tensor *x = lz_full(LZ_F32, 1, (const int64_t[]){2}, 1.0), *o = NULL;
    CHECK(lz_call(s.f, &x, &o) == 0);
    CHECK_EQ_I(s.rc, 0);
    CHECK(lz_item(o) == 2.0f);
    CHECK(lz_call(s.f, &x, &o) == 0);   /* still usable */
    lz_fn_free(s.f);
    lz_scope_end();
}

int main(void)
{
    fed_back_output();
    input_with_live_record();
    forward_with_record_replays();
    free_inside_trace();
    return lz_test_done();
}
