/* Every compile can be explained (issue "Trust", item 3): with
 * LZ_EXPLAIN_COMPILES=1 one "lazyc: compile" line per compile names the
 * cause; without it, a process that keeps compiling gets one warning; the
 * metrics report counts the causes. Each case runs in a child process
 * (the switch is read once, the warning fires once per process) whose
 * stderr goes to a file the parent reads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

static char report[4096];   /* the child's lz_metrics_report, through a file too */

/* y = sum(x * 2 + 1) over an [n] ramp, read on the host */
static float ramp_sum(int64_t n, float exponent)
{
    float v[64];
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    lz_scope_begin();
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, &n);
    lz_tensor *y = lz_sum(lz_add(lz_mul(lz_pow(x, exponent), lz_scalar(2.0f)), lz_scalar(1.0f)));
    float r = lz_item(y);
    lz_scope_end();
    return r;
}

static void case_explain(void)
{
    CHECK_NEAR(ramp_sum(4, 1.0f), 16, 0);     /* first graph */
    CHECK_NEAR(ramp_sum(4, 1.0f), 16, 0);     /* a hit: no line */
    CHECK_NEAR(ramp_sum(5, 1.0f), 25, 0);     /* shape [5] where [4] is cached */
    CHECK_NEAR(ramp_sum(5, 2.0f), 65, 0);     /* the exponent is baked in */
}

/* The missing lz_mark_step: w is updated every iteration but only the
   loss is read, so w's history stays pending and every graph is bigger. */
static void growing_loop(int steps, int mark)
{
    int64_t n = 4;
    float v[4] = {1, 2, 3, 4};
    lz_tensor *w = lz_from_host(v, LZ_F32, 1, &n), *k = lz_scalar(0.5f);
    for (int s = 0; s < steps; s++) {
        lz_tensor *next = lz_add(lz_mul(w, k), k);
        lz_free(w);
        w = next;
        lz_tensor *loss = lz_sum(w);
        CHECK(isfinite(lz_item(loss)));
        lz_free(loss);
        if (mark) lz_mark_step();
    }
    lz_free(w);
    lz_free(k);
}

static void save_report(const char *path)
{
    char *r = lz_metrics_report();
    FILE *f = fopen(path, "w");
    if (r && f) fputs(r, f);
    if (f) fclose(f);
    free(r);
}

/* Runs fn in a child with LZ_EXPLAIN_COMPILES set to env (NULL: unset);
   *err gets its stderr, report its metrics report. */
static void run_child(void (*fn)(void), const char *env, char *err, size_t cap)
{
    char err_path[] = "/tmp/lz_explain_errXXXXXX", rep_path[] = "/tmp/lz_explain_repXXXXXX";
    int fd = mkstemp(err_path), rd = mkstemp(rep_path);
    CHECK(fd >= 0 && rd >= 0);
    close(rd);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        if (env) setenv("LZ_EXPLAIN_COMPILES", env, 1);
        else unsetenv("LZ_EXPLAIN_COMPILES");
        fn();
        save_report(rep_path);
        lz_shutdown();
        _exit(lz_test_done() == 0 ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    FILE *f = fopen(err_path, "r");
    size_t got = f ? fread(err, 1, cap - 1, f) : 0;
    err[got] = '\0';
    if (f) fclose(f);
    f = fopen(rep_path, "r");
    got = f ? fread(report, 1, sizeof report - 1, f) : 0;
    report[got] = '\0';
    if (f) fclose(f);
    close(fd);
    unlink(err_path);
    unlink(rep_path);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void expect(const char *text, const char *what)
{
    CHECK(strstr(text, what) != NULL);
    if (!strstr(text, what)) fprintf(stderr, "  expected \"%s\" in:\n%s\n", what, text);
}

static void grow_30(void) { growing_loop(30, 0); }

/* Eager mode: 24 distinct ops (shapes 1..24), each its own graph and its
   own compile, as a model's first eager step: no warning. */
static void eager_first_step(void)
{
    lz_set_eager(1);
    for (int64_t n = 1; n <= 24; n++) {
        lz_tensor *a = lz_zeros(LZ_F32, 1, &n), *s = lz_sum(lz_add(a, a));
        CHECK(lz_item(s) == 0.0f);
        lz_free(s);
        lz_free(a);
    }
    CHECK(lz_metrics_get().compiles >= 24);
}
static void marked_30(void) { growing_loop(30, 1); }

int main(void)
{
    static char err[1 << 16];

    run_child(case_explain, "1", err, sizeof err);
    CHECK_EQ_I(count(err, "lazyc: compile"), 3);
    expect(err, "lazyc: compile 1: ");
    expect(err, "cause first graph: no graph is cached yet");
    expect(err, "cause shape: node 0 (leaf) is f32 [5] where the nearest cached graph");
    expect(err, "has f32 [4]");
    expect(err, "cause baked constant: node 1 (pow) has the baked constant 2 where the nearest "
                "cached graph (");
    expect(err, "has 1 (a host value");
    expect(report, "compile causes        first graph 1, shape 1, baked constant 1\n");
    CHECK_EQ_I(count(err, "warning"), 0);

    /* no switch: the growing loop warns once, and prints no compile lines */
    run_child(grow_30, NULL, err, sizeof err);
    CHECK_EQ_I(count(err, "lazyc: warning: "), 1);
    CHECK_EQ_I(count(err, "lazyc: compile"), 0);
    expect(err, "of the last 10 graphs compiled anew");
    expect(err, "a loop without lz_mark_step");
    expect(err, "Most compiles here: \"graph grew\"");
    expect(err, "LZ_EXPLAIN_COMPILES=1");
    expect(report, "compile causes        graph grew 29, first graph 1\n");

    /* with the switch: a line per compile instead of the warning */
    run_child(grow_30, "1", err, sizeof err);
    CHECK_EQ_I(count(err, "lazyc: compile"), 30);
    CHECK_EQ_I(count(err, "cause graph grew"), 29);
    expect(err, "is lz_mark_step missing from a loop?");
    CHECK_EQ_I(count(err, "warning"), 0);

    /* the same loop with lz_mark_step: no warning */
    run_child(marked_30, NULL, err, sizeof err);
    CHECK_EQ_I(count(err, "lazyc:"), 0);

    /* eager mode's first step compiles an op at a time: no warning */
    run_child(eager_first_step, NULL, err, sizeof err);
    CHECK_EQ_I(count(err, "lazyc: warning: "), 0);
    CHECK(strstr(report, "compile causes") && !strstr(report, "graph grew"));
    if (strstr(report, "graph grew")) fprintf(stderr, "%s\n", report);
    return lz_test_done();
}
