/* Time to first step of zoo models, lazy mode: the model's build (parameter
 * initialisation), its first training step (trace, compile, first
 * execution) and the median of the steady steps after it, with the compile
 * time and the device memory held. Meant for before/after comparisons of
 * the startup path, and for profiles of it:
 *
 *   build/first_step --size bench --steps 3 vgg16 resnet50
 *   perf record -g build/first_step --size bench --steps 0 BERT_pytorch
 *
 * --steps -1 builds the models only. --no-shutdown keeps the library up
 * between models, as a program that trains several one after another
 * (the buffer pool and the executable cache then carry over).
 *
 * One line per model on stdout:
 *   model build_ms first_ms compile_ms steady_ms peak_mib */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "lazyc_nn.h"

/* A batch of zeros for the images, class 0 everywhere for the targets: the
   time of a step does not depend on the values. */
static int step(lz_model *m, lz_sgd *opt, lz_tensor *x, lz_tensor *y)
{
    lz_scope_begin();
    lz_sgd_zero_grad(opt);
    lz_tensor *loss = lz_model_loss(m, x, y, 1);
    int rc = !loss || lz_backward(loss) || lz_sgd_step(opt) ? -1 : 0;
    if (rc == 0) lz_keep(loss);
    lz_scope_end();
    lz_mark_step();
    rc |= lz_wait();
    if (rc == 0) (void)lz_item(loss);
    lz_free(loss);
    return rc;
}

/* With FIRST_STEP_DETAIL set: the kernel time by op of the step just run
   (the profile is on for every step then). */
static void print_profile(const char *name, const char *which)
{
    if (!getenv("FIRST_STEP_DETAIL")) return;
    lz_profile_entry e[64];
    int n = lz_profile_read(e, 64);
    double total = 0;
    for (int i = 0; i < n && i < 64; i++) total += e[i].ms;
    fprintf(stderr, "%s %s step: %.1f ms in kernels\n", name, which, total);
    for (int i = 0; i < n && i < 12; i++)
        fprintf(stderr, "    %-26s %-6s %6lld calls %9.2f ms\n", e[i].op, e[i].library ? "oneDNN" : "lazyc",
                (long long)e[i].calls, e[i].ms);
    lz_profile_reset();
}

static int run(const char *name, const char *size, long steps)
{
    lz_metrics_reset();
    double t0 = now_ms();
    lz_model *m = lz_model_new(name, size, 1);
    if (!m) return -1;
    lz_mark_step();
    lz_wait();
    double build = now_ms() - t0;
    if (steps < 0) {
        printf("%-16s build %8.1f ms\n", name, build);
        lz_model_free(m);
        return 0;
    }
    const lz_model_spec *s = lz_model_get_spec(m);
    lz_params *p = lz_model_params(m);
    int n = lz_params_count(p);
    lz_tensor **train = malloc(sizeof *train * (size_t)(n > 0 ? n : 1));
    if (!train) return -1;
    int nt = lz_params_trainable_list(p, train, n);
    lz_sgd *opt = lz_sgd_new(train, nt, (lz_sgd_opts){.lr = 0.01f, .momentum = 0.9f});
    free(train);
    lz_tensor *x = lz_zeros(s->input_dtype, s->input_ndim, s->input_shape);
    lz_tensor *y = lz_zeros(LZ_I64, s->target_ndim, s->target_shape);
    if (!opt || !x || !y) return -1;
    lz_metrics_reset();
    lz_profile_enable(getenv("FIRST_STEP_DETAIL") != NULL);
    lz_profile_reset();
    t0 = now_ms();
    if (step(m, opt, x, y)) return -1;
    double first = now_ms() - t0;
    print_profile(name, "first");
    lz_metrics mf = lz_metrics_get();
    double compile = mf.compile_ms;
    if (getenv("FIRST_STEP_DETAIL"))
        fprintf(stderr, "%s first: trace %.1f compile %.1f execute %.1f wait %.1f ms\n", name,
                mf.trace_ms, mf.compile_ms, mf.execute_ms, mf.wait_ms);
    if (steps < 1) steps = 0;
    double *ms = calloc((size_t)(steps > 0 ? steps : 1), sizeof *ms);
    if (!ms) return -1;
    for (long i = 0; i < steps; i++) {
        t0 = now_ms();
        if (step(m, opt, x, y)) return -1;
        ms[i] = now_ms() - t0;
        print_profile(name, "next");
        if (getenv("FIRST_STEP_DETAIL") && i == 0) {
            lz_metrics ms1 = lz_metrics_get();
            fprintf(stderr, "%s second: trace %.1f compile %.1f execute %.1f wait %.1f ms (cumulative)\n",
                    name, ms1.trace_ms, ms1.compile_ms, ms1.execute_ms, ms1.wait_ms);
        }
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    double steady = steps > 0 ? ms[steps / 2] : 0;
    printf("%-16s build %8.1f ms  first %8.1f ms  compile %6.1f ms  steady %8.1f ms  "
           "peak %7.1f MiB\n",
           name, build, first, compile, steady, lz_metrics_get().peak_bytes / 1048576.0);
    fflush(stdout);
    free(ms);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(opt);
    lz_model_free(m);
    lz_wait();
    return 0;
}

int main(int argc, char **argv)
{
    const char *size = "bench";
    long steps = 3;
    int named = 0, rc = 0, shutdown = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-shutdown")) shutdown = 0;
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: first_step [--size smoke|bench] [--steps N] [--no-shutdown] [model...]\n");
            return 2;
        } else {
            named = 1;
            if (run(argv[i], size, steps)) {
                fprintf(stderr, "first_step: %s: %s\n", argv[i], lz_last_error());
                rc = 1;
            }
            if (shutdown) lz_shutdown();   /* the next model as in a fresh process (see lazyc bench) */
        }
    }
    for (const char *const *n = lz_model_names(); !named && *n; n++) {
        if (run(*n, size, steps)) {
            fprintf(stderr, "first_step: %s: %s\n", *n, lz_last_error());
            rc = 1;
        }
        if (shutdown) lz_shutdown();
    }
    return rc;
}
