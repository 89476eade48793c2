/* Which products autocast runs in bf16 (backends/cpu/product_choice.c):
 * LZ_AUTOCAST_PRODUCTS=f32 and =bf16 force every product one way; the
 * rule keeps every product float32 where bf16's peak is below 0.8x
 * float32's, with one notice that counts the shapes and says why; the
 * measurement times each shape once, keeps the answer for the process (a
 * second use times nothing, a captured step never recompiles) and in a
 * file the next process reads instead of timing (a corrupt file: one
 * notice, timed again); LZ_DETERMINISTIC=1 times nothing. Without native
 * bf16 every product stays float32 untimed. The file cases run in child
 * processes (this program with "child"). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/product_choice.h"
#include "base/switches.h"
#include "testlib.h"

static int64_t bf16_products(void)
{
    return lz_cpu_bf16_matmul_count(0) + lz_cpu_bf16_matmul_count(1) +
           lz_cpu_bf16_conv_count(0) + lz_cpu_bf16_conv_count(1);
}

static int native(void) { return lz_cpu_bf16_way() == LZ_BF16_NATIVE; }

/* A training step of a linear layer and a convolution under autocast,
   recorded (where choices are made, and timed), then run: the bf16
   products the run made (each layer's two, forward and weight gradient,
   or none). */
static int64_t step(int seed)
{
    lz_scope_begin();
    const int64_t sx[2] = {8, 64}, sw[2] = {32, 64}, cx[4] = {2, 16, 8, 8}, cw[4] = {16, 16, 3, 3};
    lz_tensor *x = lz_test_rand(seed, -1, 1, 2, sx), *w = lz_test_rand(seed + 1, -1, 1, 2, sw);
    lz_tensor *c = lz_test_rand(seed + 2, -1, 1, 4, cx), *k = lz_test_rand(seed + 3, -1, 1, 4, cw);
    lz_requires_grad(w, 1);
    lz_requires_grad(k, 1);
    lz_mark_step();
    lz_wait();
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *y = lz_linear(x, w, NULL);
    lz_tensor *z = lz_conv2d(c, k, NULL, (lz_conv2d_opts){.padding = {1, 1}});
    lz_tensor *loss = lz_add(lz_sum(lz_mul(y, y)), lz_sum(lz_mul(z, z)));
    CHECK(lz_autocast_end() == 0);
    CHECK(loss && lz_backward(loss) == 0);
    const int64_t p0 = bf16_products();
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    const int64_t n = bf16_products() - p0;
    lz_scope_end();
    return n;
}

/* ---- the child: two steps in measure mode -------------------------------- */

static int child(void)
{
    const int64_t first = step(10);
    int64_t kept, shapes, measured;
    lz_cpu_product_counts(&kept, &shapes, &measured);
    const int64_t again = step(20);   /* the same shapes: timed once */
    int64_t kept2, shapes2, measured2;
    lz_cpu_product_counts(&kept2, &shapes2, &measured2);
    printf("measured %lld again %lld kept %lld shapes %lld bf16 %lld %lld error %s\n",
           (long long)measured, (long long)(measured2 - measured), (long long)kept,
           (long long)shapes, (long long)first, (long long)again,
           lz_last_error() ? "yes" : "none");
    return 0;
}

/* ---- the parent ---------------------------------------------------------- */

static char dir[256], out_path[300], err_path[300];

typedef struct run { int rc; long long measured, again, kept, shapes, first, second; char error[8]; char err[8192]; } run;

static run spawn(const char *const *env)
{
    run r = {.rc = -1};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", dir, 1);
        for (int i = 0; env && env[i]; i++) {
            char name[64];
            const char *eq = strchr(env[i], '=');
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            setenv(name, eq + 1, 1);
        }
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr)) _exit(3);
        execl("/proc/self/exe", "test_product_choice", "child", (char *)NULL);
        _exit(4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    FILE *f = fopen(out_path, "r");
    if (f) {
        if (fscanf(f, "measured %lld again %lld kept %lld shapes %lld bf16 %lld %lld error %7s",
                   &r.measured, &r.again, &r.kept, &r.shapes, &r.first, &r.second, r.error) != 7)
            r.rc = r.rc ? r.rc : 5;
        fclose(f);
    }
    f = fopen(err_path, "r");
    if (f) {
        size_t got = fread(r.err, 1, sizeof r.err - 1, f);
        r.err[got] = '\0';
        fclose(f);
    }
    printf("child: rc %d measured %lld again %lld kept %lld of %lld, bf16 products %lld %lld\n%s",
           r.rc, r.measured, r.again, r.kept, r.shapes, r.first, r.second, r.err);
    return r;
}

/* The product choices file in dir/lazyc (the first found), or "". */
static void choices_file(char *out, size_t n)
{
    char sub[300];
    snprintf(sub, sizeof sub, "%s/lazyc", dir);
    out[0] = '\0';
    DIR *d = opendir(sub);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "product-choices-", 16) && !strstr(e->d_name, ".tmp")) {
            snprintf(out, n, "%s/%s", sub, e->d_name);
            break;
        }
    if (d) closedir(d);
}

/* Runs one step, then the notice (else at exit), with stderr into a file;
   what they printed. */
static int64_t step_noting(int seed, char *text, size_t n)
{
    char path[300];
    snprintf(path, sizeof path, "%s/notice", dir);
    fflush(stderr);
    const int saved = dup(2);
    CHECK(freopen(path, "w", stderr) != NULL);
    const int64_t p = step(seed);
    lz_cpu_product_notice();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(text, 1, n - 1, f) : 0;
    text[got] = '\0';
    if (f) fclose(f);
    fprintf(stdout, "%s", text);
    return p;
}

static void forced_and_rule(void)
{
    const int64_t all = native() ? 4 : 0;   /* without native bf16: float32, untimed */
    lz_autocast_products_set(LZ_PRODUCTS_F32);
    CHECK_EQ_I(step(1), 0);
    lz_autocast_products_set(LZ_PRODUCTS_BF16);
    CHECK_EQ_I(step(1), 4);   /* widened where not native, but bf16 all the same */
    int64_t kept, shapes, measured;
    lz_cpu_product_counts(&kept, &shapes, &measured);
    CHECK_EQ_I(shapes, 0);   /* the backend was not asked */

    /* the rule: bf16 at half float32's peak keeps both float32, one notice */
    lz_autocast_products_set(LZ_PRODUCTS_RULE);
    lz_cpu_product_peaks_set(100, 50);
    char text[4096];
    CHECK_EQ_I(step_noting(2, text, sizeof text), 0);
    if (native())
        CHECK(strstr(text, "lazyc: notice: autocast kept 2 of 2 product shapes in float32") &&
              strstr(text, "2 by the rule, as bf16 products run at 0.50x float32's speed here") &&
              strstr(text, "LZ_AUTOCAST_PRODUCTS=bf16"));
    CHECK_EQ_I(step_noting(3, text, sizeof text), 0);
    CHECK(strstr(text, "autocast kept") == NULL);   /* once per process */
    lz_cpu_product_counts(&kept, &shapes, &measured);
    CHECK_EQ_I(shapes, 2);
    CHECK_EQ_I(kept, 2);
    CHECK_EQ_I(measured, 0);

    /* the answers stand for the process; forgotten (tests), bf16 at 3x
       float32's peak: both bf16 where native (the 8x8 plane is no
       Winograd one) */
    lz_cpu_product_peaks_set(100, 300);
    CHECK_EQ_I(step(4), 0);
    lz_cpu_product_choices_forget();
    CHECK_EQ_I(step(4), all);
    lz_cpu_product_peaks_set(0, 0);
    lz_cpu_product_choices_forget();
    lz_autocast_products_set(-1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child")) return child();
    setenv("LZ_EAGER", "0", 1);
    snprintf(dir, sizeof dir, "/tmp/lz_product_choice_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    setenv("XDG_CACHE_HOME", dir, 1);
    forced_and_rule();

    /* measured once per machine: the first process times both shapes
       (each once, however often used), the second reads them */
    const char *measure[] = {"LZ_AUTOCAST_PRODUCTS=measure", NULL};
    run a = spawn(measure);
    CHECK_EQ_I(a.rc, 0);
    CHECK(!strcmp(a.error, "none"));
    CHECK_EQ_I(a.shapes, 2);
    CHECK_EQ_I(a.measured, native() ? 2 : 0);
    CHECK_EQ_I(a.again, 0);
    CHECK_EQ_I(a.first, a.second);   /* the same answers for the same shapes */
    /* the notice at exit counts the shapes kept float32 */
    char want[128];
    snprintf(want, sizeof want, "autocast kept %lld of 2 product shapes in float32", a.kept);
    CHECK(a.kept == 0 || !native() || strstr(a.err, want));
    CHECK_EQ_I(a.first, 2 * (a.shapes - a.kept));
    char file[600];
    choices_file(file, sizeof file);
    CHECK(native() ? file[0] != '\0' : 1);
    run b = spawn(measure);
    CHECK_EQ_I(b.rc, 0);
    CHECK_EQ_I(b.measured, 0);
    CHECK_EQ_I(b.kept, a.kept);
    CHECK_EQ_I(b.first, a.first);
    CHECK(strstr(b.err, "notice: /") == NULL);   /* no file notice */

    if (native() && file[0]) {
        /* corrupt: one notice, timed again, no error */
        FILE *f = fopen(file, "w");
        CHECK(f != NULL);
        if (f) {
            fputs("lazyc product choices 1\nfor: garbage\x01\n", f);
            fclose(f);
        }
        run c = spawn(measure);
        CHECK_EQ_I(c.rc, 0);
        CHECK(!strcmp(c.error, "none"));
        CHECK_EQ_I(c.measured, 2);
        CHECK(strstr(c.err, "autocast's product choices") && strstr(c.err, "ignored"));
    }
    /* deterministic: nothing timed, the rule without the peaks (bf16 for
       both where native) */
    const char *det[] = {"LZ_AUTOCAST_PRODUCTS=measure", "LZ_DETERMINISTIC=1",
                         "XDG_CACHE_HOME=/nonexistent/lz", NULL};
    run d = spawn(det);
    CHECK_EQ_I(d.rc, 0);
    CHECK_EQ_I(d.measured, 0);
    CHECK_EQ_I(d.first, native() ? 4 : 0);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return lz_test_done();
}
