/* Host values made inside a captured step are never frozen silently: the
 * trace names them in one warning, and LZ_CAPTURE_CHECK=N (here 2: every
 * second call) traces again and compares the graph and every constant's
 * bytes with the capture, failing that lz_call with the first difference. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

static float g_scale;

/* issue "Trust": the scale is a host value made inside the step */
static int scaled(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_mul(in[0], lz_scalar(g_scale));
    return out[0] ? 0 : -1;
}

/* Runs f on x = 2 with stderr in a file; returns the status, the value
   (NAN on failure) and what was printed (caller frees). */
static int call_logged(lz_fn *f, float *value, char **log)
{
    fflush(stderr);
    char path[] = "/tmp/lz_capture_check_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    dup2(fd, 2);
    lz_tensor *x = lz_scalar(2.0f), *out[1] = {NULL};
    int rc = lz_call(f, &x, out);
    *value = rc == 0 ? lz_item(out[0]) : NAN;
    lz_free(out[0]);
    lz_free(x);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    *log = calloc(1, (size_t)n + 1);
    if (*log && n > 0) CHECK_EQ_I(pread(fd, *log, (size_t)n, 0), n);
    close(fd);
    unlink(path);
    return rc;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

static void test_host_scalar(void)
{
    lz_fn *f = lz_capture(scaled, NULL, 1, 1);
    float v;
    char *log;
    g_scale = 2.0f;
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 1: traced */
    CHECK(v == 4.0f);
    CHECK_EQ_I(count(log, "warning:"), 1);
    CHECK(strstr(log, "lz_scalar [] f32 = 2") != NULL);
    CHECK(strstr(log, "input of lz_call") && strstr(log, "lz_assign"));
    printf("trace: %s", log);
    free(log);

    g_scale = 4.0f;
    CHECK_EQ_I(call_logged(f, &v, &log), -1);         /* call 2: checked */
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "LZ_CAPTURE_CHECK") && strstr(e, "constant input") &&
          strstr(e, "was 2, is now 4"));
    printf("check: %s\n", e ? e : "(none)");
    CHECK_EQ_I(count(log, "warning:"), 0);            /* named once */
    free(log);
    lz_fn_free(f);
}

static int g_square;

/* a host branch: the graph itself changes */
static int branch(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = g_square ? lz_mul(in[0], in[0]) : lz_add(in[0], in[0]);
    return out[0] ? 0 : -1;
}

static void test_graph_change(void)
{
    lz_fn *f = lz_capture(branch, NULL, 1, 1);
    float v;
    char *log;
    g_square = 0;
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 1: traced */
    free(log);
    CHECK(v == 4.0f);
    g_square = 1;
    CHECK_EQ_I(call_logged(f, &v, &log), -1);         /* call 2: checked */
    free(log);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "different graph") && strstr(e, "node 1 was add [] f32, is now mul [] f32"));
    printf("check: %s\n", e ? e : "(none)");
    g_square = 0;
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 3: replayed */
    free(log);
    CHECK(v == 4.0f);
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 4: checked, the same */
    free(log);
    CHECK(v == 4.0f);
    lz_fn_free(f);
}

/* the context's pointer swapped to another existing tensor (no
   requires-grad change the guard could see): the check finds it */
typedef struct holder { lz_tensor *w; } holder;

static int dot(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    holder *h = ctx;
    out[0] = lz_sum(lz_mul(h->w, in[0]));
    return out[0] ? 0 : -1;
}

static void test_swapped_tensor(void)
{
    lz_tensor *a = lz_scalar(3.0f), *b = lz_scalar(5.0f);
    holder h = {a};
    lz_fn *f = lz_capture(dot, &h, 1, 1);
    float v;
    char *log;
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 1: traced */
    free(log);
    CHECK(v == 6.0f);
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 2: checked, the same */
    free(log);
    CHECK(v == 6.0f);
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 3: replayed */
    free(log);
    h.w = b;
    CHECK_EQ_I(call_logged(f, &v, &log), -1);         /* call 4: checked */
    free(log);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "LZ_CAPTURE_CHECK") && strstr(e, "different tensor"));
    printf("check: %s\n", e ? e : "(none)");
    CHECK_EQ_I(call_logged(f, &v, &log), 0);          /* call 5: replays the new binding */
    free(log);
    CHECK(v == 10.0f);
    lz_fn_free(f);
    lz_free(a);
    lz_free(b);
}

/* a steady training step passes every check, bitwise equal to lazy */
typedef struct lin { lz_tensor *w; lz_sgd *opt; } lin;

static int train(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lin *m = ctx;
    lz_sgd_zero_grad(m->opt);
    lz_tensor *loss = lz_sum(lz_mul(lz_mul(m->w, m->w), in[0]));
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

static void run_train(int captured, float *losses)
{
    lin m = {lz_from_host((float[]){1, 2}, LZ_F32, 1, (int64_t[]){2}), NULL};
    lz_requires_grad(m.w, 1);
    m.opt = lz_sgd_new(&m.w, 1, (lz_sgd_opts){.lr = 0.05f, .momentum = 0.9f});
    lz_fn *f = lz_capture(train, &m, 1, 1);
    for (int k = 0; k < 8; k++) {
        lz_tensor *x = lz_from_host((float[]){1.0f + k, 0.5f}, LZ_F32, 1, (int64_t[]){2}), *out[1] = {NULL};
        if (captured) {
            CHECK_EQ_I(lz_call(f, &x, out), 0);
        } else {
            CHECK_EQ_I(train(&m, &x, out), 0);
            lz_mark_step();
        }
        losses[k] = lz_item(out[0]);
        lz_free(out[0]);
        lz_free(x);
    }
    lz_fn_free(f);
    lz_sgd_free(m.opt);
    lz_free(m.w);
}

static void test_steady(void)
{
    float l[8], c[8];
    run_train(0, l);
    lz_metrics_reset();
    run_train(1, c);
    CHECK(memcmp(l, c, sizeof l) == 0);
    CHECK(lz_metrics_get().capture_replays >= 2);
}

int main(void)
{
    setenv("LZ_CAPTURE_CHECK", "2", 1);
    test_host_scalar();
    test_graph_change();
    test_swapped_tensor();
    test_steady();
    lz_shutdown();
    return lz_test_done();
}
