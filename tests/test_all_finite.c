/* lz_all_finite: 1 for finite tensors, 0 for any NaN or +-Inf, read in the
 * same execution as the value it checks (lazy and captured), no gradient.
 * lz_write_file: durable replacement, stale temporary files of dead
 * processes removed, a live process's kept, write errors reported with
 * the old file untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

static float finite_of(const float *v, int64_t n)
{
    const int64_t shape[1] = {n};
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, shape), *f = lz_all_finite(x);
    float r = f ? lz_item(f) : -1.0f;
    lz_free(f);
    lz_free(x);
    return r;
}

static void values(void)
{
    enum { N = 1000 };
    float v[N];
    lz_test_fill_uniform(v, N, 7, -1e30f, 1e30f);
    CHECK(finite_of(v, N) == 1.0f);
    CHECK(finite_of(v, 0) == 1.0f);                 /* empty: nothing is non-finite */
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++)
        for (int at = 0; at < N; at += N - 1) {     /* first and last element */
            float w[N];
            memcpy(w, v, sizeof w);
            w[at] = bad[k];
            CHECK(finite_of(w, N) == 0.0f);
        }
    /* the largest finite float is finite; x - x must not overflow */
    float big[2] = {3.4028235e38f, -3.4028235e38f};
    CHECK(finite_of(big, 2) == 1.0f);
    const int64_t s[1] = {3};
    const int64_t iv[3] = {1, -5, 1LL << 62};
    lz_tensor *i = lz_from_host(iv, LZ_I64, 1, s), *fi = lz_all_finite(i);
    CHECK(fi && lz_tensor_dtype(fi) == LZ_F32 && lz_ndim(fi) == 0 && lz_item(fi) == 1.0f);
    lz_free(fi);
    lz_free(i);
    CHECK(lz_all_finite(NULL) == NULL && strstr(lz_last_error(), "lz_all_finite"));
    lz_clear_error();
}

/* The check of a loss is read with the loss: one execution for both, and
   no gradient flows into or through it. */
static void same_execution(void)
{
    const int64_t s[2] = {4, 3};
    lz_tensor *w = lz_test_rand(3, -1, 1, 2, s);
    lz_requires_grad(w, 1);
    lz_tensor *loss = lz_sum(lz_mul(w, w)), *ok = lz_all_finite(loss);
    lz_tensor *both[2] = {loss, ok};
    int64_t before = lz_metrics_get().executions;
    CHECK(lz_sync(both, 2, 1) == 0);
    CHECK_EQ_I(lz_metrics_get().executions - before, 1);
    CHECK(lz_item(ok) == 1.0f);
    CHECK_EQ_I(lz_metrics_get().executions - before, 1);
    CHECK(lz_backward(loss) == 0);
    float *g = lz_test_read(lz_grad(w)), *wv = lz_test_read(w);
    int exact = g && wv;
    for (int i = 0; exact && i < 12; i++) exact = g[i] == 2 * wv[i];   /* d(sum w^2) = 2w, nothing added */
    CHECK(exact);
    free(g);
    free(wv);
    lz_free(ok);
    lz_free(loss);
    lz_free(w);
}

/* in[0] -> out {sum(in * in), all_finite(that)} */
static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_sum(lz_mul(in[0], in[0]));
    out[1] = lz_all_finite(out[0]);
    return out[0] && out[1] ? 0 : -1;
}

static void captured(void)
{
    lz_fn *f = lz_capture(step, NULL, 1, 2);
    const int64_t s[1] = {4};
    float v[4] = {1, 2, 3, 4};
    lz_metrics m0 = lz_metrics_get();
    for (int call = 0; call < 4; call++) {
        if (call == 1) m0 = lz_metrics_get();      /* after the trace */
        if (call == 2) v[1] = NAN;
        if (call == 3) v[1] = 1e30f;                /* finite input, the square overflows to Inf */
        lz_tensor *x = lz_from_host(v, LZ_F32, 1, s), *out[2] = {NULL, NULL};
        CHECK(lz_call(f, &x, out) == 0);
        float loss = lz_item(out[0]), ok = lz_item(out[1]);
        CHECK(ok == (isfinite(loss) ? 1.0f : 0.0f));
        CHECK(ok == (call < 2 ? 1.0f : 0.0f));
        lz_free(out[0]); lz_free(out[1]); lz_free(x);
    }
    lz_metrics m1 = lz_metrics_get();
    CHECK_EQ_I(m1.executions - m0.executions, 3);   /* one per replay: the flag costs none */
    CHECK_EQ_I(m1.capture_replays - m0.capture_replays, 3);
    CHECK_EQ_I(m1.capture_fallbacks - m0.capture_fallbacks, 0);
    lz_fn_free(f);
}

static int read_all(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)n;
}

static void write_file(void)
{
    char dir[] = "/tmp/lz_write_file_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], stale[300], live[300], other[300], buf[64];
    snprintf(path, sizeof path, "%s/out.json", dir);
    CHECK(lz_write_file(path, "{\"a\": 1}", 8) == 0);
    CHECK(read_all(path, buf, sizeof buf) == 8 && !strcmp(buf, "{\"a\": 1}"));
    /* a dead child's pid names a stale temporary file, this process's
       parent (alive) a live one; only the stale one goes */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    snprintf(stale, sizeof stale, "%s.tmp%ld", path, (long)child);
    snprintf(live, sizeof live, "%s.tmp%ld", path, (long)getppid());
    snprintf(other, sizeof other, "%s/other.json.tmp%ld", dir, (long)child);
    const char *made[3] = {stale, live, other};
    for (int i = 0; i < 3; i++) { FILE *t = fopen(made[i], "w"); CHECK(t && fputs("x", t) >= 0); if (t) fclose(t); }
    CHECK(lz_write_file(path, "[]", 2) == 0);
    struct stat st;
    CHECK(stat(stale, &st) != 0);
    CHECK(stat(live, &st) == 0);                    /* a live process's */
    CHECK(stat(other, &st) == 0);                   /* another target's */
    CHECK(read_all(path, buf, sizeof buf) == 2 && !strcmp(buf, "[]"));
    /* no temporary file of this process is left behind */
    char mine[300];
    snprintf(mine, sizeof mine, "%s.tmp%ld", path, (long)getpid());
    CHECK(stat(mine, &st) != 0);
    /* a device is written in place and its error reported: /dev/full */
    if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
        CHECK(lz_write_file("/dev/full", "x", 1) == -1);
        CHECK(strstr(lz_last_error(), "/dev/full") && strstr(lz_last_error(), "No space left"));
        CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));   /* still the device */
        lz_clear_error();
    }
    /* a directory, and a parent that is a file */
    CHECK(lz_write_file(dir, "x", 1) == -1 && strstr(lz_last_error(), "is a directory"));
    char under[300];
    snprintf(under, sizeof under, "%s/sub/x", path);
    CHECK(lz_write_file(under, "x", 1) == -1 && strstr(lz_last_error(), "Not a directory"));
    CHECK(read_all(path, buf, sizeof buf) == 2);
    lz_clear_error();
    unlink(live);
    unlink(other);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    values();
    same_execution();
    captured();
    write_file();
    return lz_test_done();
}
