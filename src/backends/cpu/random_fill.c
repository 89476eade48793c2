/* The initialisers' draws at memory speed: drawn one by one with libm's
 * log and cos on the recording thread, a model's parameters (138 M values
 * for vgg16) took seconds before the first step. Here every element is
 * a pure function of (seed, i) and the loops are branch-free f32 (GCC
 * vectorises them; libm's calls would keep them scalar).
 *
 * Large tensors are cut into one range per thread of the OpenMP team's
 * size, drawn by plain threads that end with the fill; every element is
 * drawn by the same code whatever the cut, and the build keeps
 * -ffp-contract=off, so any number of threads gives the same bits
 * (tests/test_init_fill.c). Not an OpenMP parallel region: that would
 * leave a team behind on the recording thread, and while its threads live
 * libgomp makes the executor's workers sleep between kernels
 * (omp_quiet.c), which slows long steps. Nor a team led by a thread made
 * per fill: that cost more than it saved (the figures in docs/performance.md,
 * "Spinning workers in long programs"). */
#include "backends/cpu/random_fill.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>

#include "base/rng.h"

/* The draws themselves are base/rng.h's, which the CUDA backend's kernels
   compile too: the same bits on both devices. */
static void fill_range(float *dst, int64_t i0, int64_t i1, uint64_t key, int dist, float a, float b)
{
    if (dist == 0) {
        const float span = b - a;
        for (int64_t i = i0; i < i1; i++) dst[i] = lz_rng_fill_uniform(lz_rng_bits(key, 0, i), a, span);
        return;
    }
    /* the file is built with -fno-math-errno (CMakeLists.txt): with
       errno, sqrtf keeps a branch and the loop scalar */
    for (int64_t i = i0; i < i1; i++) dst[i] = lz_rng_fill_normal(lz_rng_bits(key, 0, i), a, b);
}

/* elements below which one thread draws: a thread's start costs about what
   drawing 10^4-10^5 elements does */
enum { PAR_MIN = 1 << 18, MAX_THREADS = 64 };

typedef struct share {
    float *dst;
    int64_t i0, i1;
    uint64_t key;
    int dist;
    float a, b;
} share;

static void *fill_share(void *arg)
{
    const share *s = arg;
    fill_range(s->dst, s->i0, s->i1, s->key, s->dist, s->a, s->b);
    return NULL;
}

void lz_cpu_fill_random(float *dst, int64_t n, uint64_t seed, int dist, float a, float b)
{
    int nt = n >= PAR_MIN ? omp_get_max_threads() : 1;
    if (nt < 1) nt = 1;
    if (nt > MAX_THREADS) nt = MAX_THREADS;
    const uint64_t key = lz_rng_key(seed);
    share s[MAX_THREADS];
    pthread_t t[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int k = 0; k < nt; k++) s[k] = (share){dst, n * k / nt, n * (k + 1) / nt, key, dist, a, b};
    for (int k = 1; k < nt; k++) started[k] = pthread_create(&t[k], NULL, fill_share, &s[k]) == 0;
    fill_share(&s[0]);
    /* a range whose thread did not start is drawn here */
    for (int k = 1; k < nt; k++) {
        if (started[k]) pthread_join(t[k], NULL);
        else fill_share(&s[k]);
    }
}
