/* LZ_DNNL_CONV=tune's choices on disk (backends/cpu/conv_choices.c): a
 * process times each convolution step shape once and records the choice in
 * ${XDG_CACHE_HOME}/lazyc; a second process reads it at compile and times
 * nothing, with bitwise the first one's values. A corrupt or foreign file
 * is ignored with one notice (timed again, the file replaced), never an
 * error; LZ_CONV_CACHE=0 keeps choices for the process only;
 * LZ_DETERMINISTIC=1 never times nor reads the file; the key holds the ISA
 * oneDNN runs at, so DNNL_MAX_CPU_ISA=AVX2 gets its own choices. Each case
 * is a child process (this program run with "child"). */
#include <dirent.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "backends/cpu/conv_choices.h"
#include "backends/cpu/kernels.h"
#include "engine/cache.h"

/* ---- the child: one training step of a 3x3 convolution ------------------- */

static int child(void)
{
    const int64_t xs[4] = {2, 32, 24, 24}, ws[4] = {32, 32, 3, 3};
    lz_tensor *x = lz_test_rand(41, -1, 1, 4, xs), *w = lz_test_rand(42, -0.5f, 0.5f, 4, ws);
    lz_requires_grad(x, 1);
    lz_requires_grad(w, 1);
    lz_tensor *y = lz_conv2d(x, w, NULL, (lz_conv2d_opts){.padding = {1, 1}});
    lz_tensor *r = lz_test_rand(43, -1, 1, 4, xs);
    lz_tensor *loss = lz_sum(lz_mul(y, r));
    if (!loss || lz_backward(loss) != 0) return 1;
    lz_mark_step();
    float *v[3] = {lz_test_read(y), lz_test_read(lz_grad(x)), lz_test_read(lz_grad(w))};
    const int64_t n[3] = {2 * 32 * 24 * 24, 2 * 32 * 24 * 24, 32 * 32 * 9};
    uint64_t h = 1469598103934665603ull;   /* the values' bytes, hashed */
    for (int k = 0; k < 3; k++) {
        if (!v[k]) return 1;
        const unsigned char *b = (const unsigned char *)v[k];
        for (size_t i = 0; i < sizeof(float) * (size_t)n[k]; i++) h = (h ^ b[i]) * 1099511628211ull;
        free(v[k]);
    }
    printf("timed %lld loaded %lld values %016llx error %s\n", (long long)lz_dnnl_conv_timed(),
           (long long)lz_conv_choices_loaded(), (unsigned long long)h,
           lz_last_error() ? "yes" : "none");
    return 0;
}

/* ---- the parent ---------------------------------------------------------- */

static const char *self;
static char dir[256], out_path[300], err_path[300];

typedef struct run { int rc; long long timed, loaded; char values[32], error[8]; char *err; } run;

/* Runs the child with env ("NAME=value" or "NAME" to unset; NULL-ended). */
static run spawn(const char *const *env)
{
    run r = {.rc = -1};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", dir, 1);
        for (int i = 0; env && env[i]; i++) {
            char name[64];
            const char *eq = strchr(env[i], '=');
            snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - env[i]) : (int)strlen(env[i]), env[i]);
            if (eq) setenv(name, eq + 1, 1);
            else unsetenv(name);
        }
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr)) _exit(3);
        execl(self, self, "child", (char *)NULL);
        _exit(4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    FILE *f = fopen(out_path, "r");
    if (f) {
        if (fscanf(f, "timed %lld loaded %lld values %31s error %7s", &r.timed, &r.loaded, r.values,
                   r.error) != 4)
            r.rc = r.rc ? r.rc : 5;
        fclose(f);
    }
    f = fopen(err_path, "r");
    r.err = calloc(1, 8192);
    if (f) {
        size_t got = r.err ? fread(r.err, 1, 8191, f) : 0;
        (void)got;
        fclose(f);
    }
    return r;
}

/* The choice files in dir/lazyc: how many, and the first one's path. */
static int choice_files(char *first, size_t n)
{
    char sub[300];
    snprintf(sub, sizeof sub, "%s/lazyc", dir);
    DIR *d = opendir(sub);
    int count = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "conv-choices-", 13) && !strstr(e->d_name, ".tmp")) {
            if (!count && first) snprintf(first, n, "%s/%s", sub, e->d_name);
            count++;
        }
    closedir(d);
    return count;
}

static void remove_files(void)
{
    char p[600];
    while (choice_files(p, sizeof p)) CHECK(unlink(p) == 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int avx512(void)
{
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child")) return child();
    self = "/proc/self/exe";
    snprintf(dir, sizeof dir, "/tmp/lz_conv_choices_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    const char *tune[] = {"LZ_DNNL_CONV=tune", "DNNL_MAX_CPU_ISA", NULL};
    char file[600] = "";

    /* recorded once, then reused: the second process times nothing and
       computes the same bytes */
    run a = spawn(tune);
    CHECK_EQ_I(a.rc, 0);
    printf("first process: timed %lld, loaded %lld\n", a.timed, a.loaded);
    CHECK_EQ_I(a.timed, 3);   /* forward, grad input, grad weight */
    CHECK_EQ_I(a.loaded, 0);
    CHECK_EQ_I(choice_files(file, sizeof file), 1);
    run b = spawn(tune);
    printf("second process: timed %lld, loaded %lld\n", b.timed, b.loaded);
    CHECK_EQ_I(b.rc, 0);
    CHECK_EQ_I(b.timed, 0);
    CHECK_EQ_I(b.loaded, 3);
    CHECK(!strcmp(a.values, b.values));
    CHECK(!strcmp(b.error, "none") && !strstr(b.err, "notice"));

    /* the file names the machine; its lines are the choices */
    FILE *f = fopen(file, "r");
    char line[600] = "";
    CHECK(f && fgets(line, sizeof line, f) && !strcmp(line, "lazyc convolution choices 1\n"));
    CHECK(f && fgets(line, sizeof line, f) && !strncmp(line, "for: cpu ", 9) && strstr(line, "; isa ") &&
          strstr(line, "; oneDNN ") && strstr(line, "; lazyc "));
    if (f) fclose(f);
    printf("%s", line);

    /* corrupt: one notice, timed again, no error, the file replaced */
    write_text(file, "lazyc convolution choices 1\ngarbage\x01\xff\n");
    run c = spawn(tune);
    CHECK_EQ_I(c.rc, 0);
    CHECK_EQ_I(c.timed, 3);
    CHECK(!strcmp(c.error, "none"));
    CHECK(strstr(c.err, "lazyc: notice: ") && strstr(c.err, "not a file of convolution choices") &&
          strstr(c.err, "ignored"));
    printf("corrupt file: %s", c.err);
    run c2 = spawn(tune);
    CHECK_EQ_I(c2.timed, 0);   /* replaced by a good one */
    write_text(file, "not a choices file at all");
    run c3 = spawn(tune);
    CHECK_EQ_I(c3.rc, 0);
    CHECK_EQ_I(c3.timed, 3);
    CHECK(strstr(c3.err, "not a file of convolution choices") != NULL);
    /* a way out of range is corrupt too */
    f = fopen(file, "r");
    char head[2][600] = {"", ""};
    CHECK(f && fgets(head[0], 600, f) && fgets(head[1], 600, f));
    if (f) fclose(f);
    char bad[1400];
    snprintf(bad, sizeof bad, "%s%s1 2 32 24 24 32 32 3 3 2 32 24 24 1 1 1 1 1 1 1 0 0 1 9\n", head[0], head[1]);
    write_text(file, bad);
    run c4 = spawn(tune);
    CHECK_EQ_I(c4.timed, 3);
    CHECK(strstr(c4.err, "line 3 does not parse") != NULL);

    /* foreign: another identity on line 2 */
    snprintf(bad, sizeof bad, "%sfor: cpu Some Other CPU; isa avx2; oneDNN 9.9.9 (x); lazyc 0.0.0\n", head[0]);
    write_text(file, bad);
    run d = spawn(tune);
    CHECK_EQ_I(d.rc, 0);
    CHECK_EQ_I(d.timed, 3);
    CHECK(strstr(d.err, "written for another machine or version") && strstr(d.err, "Some Other CPU"));
    printf("foreign file: %s", d.err);

    /* switched off: timed every process, no file written */
    remove_files();
    const char *off[] = {"LZ_DNNL_CONV=tune", "LZ_CONV_CACHE=0", "DNNL_MAX_CPU_ISA", NULL};
    run e1 = spawn(off), e2 = spawn(off);
    CHECK_EQ_I(e1.timed, 3);
    CHECK_EQ_I(e2.timed, 3);
    CHECK_EQ_I(e2.loaded, 0);
    CHECK_EQ_I(choice_files(NULL, 0), 0);

    /* deterministic: never times, reads no file, the rules' values */
    run g = spawn(tune);   /* a file of choices to ignore */
    CHECK_EQ_I(g.timed, 3);
    const char *det[] = {"LZ_DNNL_CONV=tune", "LZ_DETERMINISTIC=1", "DNNL_MAX_CPU_ISA", NULL};
    const char *rule[] = {"LZ_DNNL_CONV", "DNNL_MAX_CPU_ISA", NULL};
    run h = spawn(det), k = spawn(rule);
    CHECK_EQ_I(h.rc, 0);
    CHECK_EQ_I(h.timed, 0);
    CHECK_EQ_I(h.loaded, 0);
    CHECK(!strcmp(h.values, k.values));

    /* the ISA cap: its own file, timed once there too */
    if (avx512()) {
        const char *avx2[] = {"LZ_DNNL_CONV=tune", "DNNL_MAX_CPU_ISA=AVX2", NULL};
        run i1 = spawn(avx2), i2 = spawn(avx2);
        CHECK_EQ_I(i1.timed, 3);
        CHECK_EQ_I(i2.timed, 0);
        CHECK_EQ_I(choice_files(NULL, 0), 2);
        run i3 = spawn(tune);   /* the AVX-512 file is still there */
        CHECK_EQ_I(i3.timed, 0);
        free(i1.err); free(i2.err); free(i3.err);
    } else {
        printf("test_conv_choices: NOT CHECKED: a second ISA (oneDNN runs below AVX-512 here)\n");
    }

    /* an unwritable cache directory: one notice, choices for the process */
    remove_files();
    char sub[300];
    snprintf(sub, sizeof sub, "%s/lazyc", dir);
    CHECK(rmdir(sub) == 0);
    write_text(sub, "a file where the directory should be");
    run m = spawn(tune);
    CHECK_EQ_I(m.rc, 0);
    CHECK_EQ_I(m.timed, 3);
    CHECK(!strcmp(m.error, "none"));
    CHECK(strstr(m.err, "kept for this process only") != NULL);
    printf("unwritable: %s", m.err);
    unlink(sub);

    run *all[] = {&a, &b, &c, &c2, &c3, &c4, &d, &e1, &e2, &g, &h, &k, &m};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->err);
    unlink(out_path);
    unlink(err_path);
    rmdir(dir);
    return lz_test_done();
}
