/* The machine's fp32 peak for `lazyc bench`'s "% peak" column: the best of
 * a few 2048^3 dnnl_sgemm calls, measured in the same run as the models so
 * that the percentage reflects this machine as it is now (turbo, other
 * load). oneDNN's sgemm is within a few percent of the cores' FMA limit
 * here (the design measured about 260-285 GFLOP/s on 2 cores; see
 * docs/design.md, "Dependencies"), and it is the kernel
 * lazyc's matmuls use, so "% peak" reads as "% of what our GEMM reaches".
 * The figure moves with other load: on the 2-core development machine its
 * best reading was 414 GFLOP/s (about the AVX-512 limit of 2 cores x 2 FMA
 * units x 16 lanes x 2 flops x 3.2 GHz), the design quotes 260-285, and
 * 60-200 came out while other jobs ran; hence the best of many calls, and
 * a second reading after the models (cmd_bench.c keeps the higher: on this
 * project's shared 2-core machine one run's first reading was 141.6 while
 * runs minutes apart read 185-243, and the table then put resnet50 at 85%
 * of the peak). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include <dnnl.h>

#include "bench.h"

/* Best of at least PEAK_MIN_REPS calls, more while under PEAK_BUDGET_S:
   one quiet call is enough on a shared machine, and on a quiet one the
   budget is about 25 calls (40 ms each at ~400 GFLOP/s). */
enum { PEAK_N = 2048, PEAK_MIN_REPS = 5, PEAK_MAX_REPS = 40 };
static const double PEAK_BUDGET_S = 1.0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct alone {
    double (*fn)(void);
    double value;
} alone;

static void *run_alone(void *arg)
{
    alone *a = arg;
    a->value = a->fn();
    return NULL;
}

double bench_alone(double (*fn)(void))
{
    alone a = {fn, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, run_alone, &a) != 0) return fn();
    pthread_join(t, NULL);
    return a.value;
}

static double peak_gflops(void)
{
    size_t n = (size_t)PEAK_N * PEAK_N;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(i % 7) * 0.25f - 0.75f;
            b[i] = (float)(i % 5) * 0.5f - 1.0f;
            c[i] = 0.0f;
        }
        /* the first call warms caches, page tables and oneDNN's dispatch */
        double start = now_s();
        for (int r = 0; r <= PEAK_MAX_REPS; r++) {
            if (r > PEAK_MIN_REPS && now_s() - start > PEAK_BUDGET_S)
                break;
            double t0 = now_s();
            if (dnnl_sgemm('N', 'N', PEAK_N, PEAK_N, PEAK_N, 1.0f, a, PEAK_N, b, PEAK_N, 0.0f,
                           c, PEAK_N) != dnnl_success) {
                best = 0;
                break;
            }
            double gf = 2.0 * PEAK_N * (double)PEAK_N * PEAK_N / (now_s() - t0) / 1e9;
            if (r > 0 && gf > best)
                best = gf;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

double bench_peak_gflops(void)
{
    return bench_alone(peak_gflops);
}
