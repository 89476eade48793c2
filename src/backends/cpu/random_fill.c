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

#include "backends/cpu/rng_bits.h"
#include "backends/cpu/vec_math.h"

/* log(u) for u in [2^-24, 1] (normal floats), FreeBSD's logf reduction
   and polynomial: about 1 ulp. */
static inline float vlog_f32(float u)
{
    uint32_t ix = f32_bits(u) + (0x3f800000u - 0x3f3504f3u);
    float k = (float)((int32_t)(ix >> 23) - 0x7f);
    float f = f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;  /* m - 1, m in [sqrt(.5), sqrt(2)) */
    float s = f / (2.0f + f), z = s * s, w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

/* cos(2 pi u) for u in [0, 1): reduced to x = 2 pi b with b in [0, 1/4]
   exactly (u - 1/2 and 1/2 - a are exact), then Taylor to x^12, whose
   error on [0, pi/2] is below 1e-8. */
static inline float vcos2pi_f32(float u)
{
    float a = fabsf(u - 0.5f);              /* cos(2 pi u) = -cos(2 pi a) */
    int flip = a > 0.25f;
    float x = 6.28318530718f * select_f32(flip, 0.5f - a, a);
    float z = x * x;
    float c = 1.0f + z * (-0.5f + z * (4.16666667e-2f + z * (-1.38888889e-3f +
              z * (2.48015873e-5f + z * (-2.75573192e-7f + z * 2.08767570e-9f)))));
    return select_f32(flip, c, -c);
}

static void fill_range(float *dst, int64_t i0, int64_t i1, uint64_t key, int dist, float a, float b)
{
    const float unit = 1.0f / 16777216.0f;
    if (dist == 0) {
        const float span = b - a;
        for (int64_t i = i0; i < i1; i++) {
            uint64_t r = lz_rng_bits(key, 0, i);
            dst[i] = a + span * ((float)(int32_t)(r >> 40) * unit);
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        uint64_t r = lz_rng_bits(key, 0, i);
        float u1 = (float)((int32_t)(r >> 40) + 1) * unit;               /* (0, 1] */
        float u2 = (float)(int32_t)((r >> 16) & 0xFFFFFFu) * unit;       /* [0, 1) */
        /* the file is built with -fno-math-errno (CMakeLists.txt): with
           errno, sqrtf keeps a branch and the loop scalar */
        dst[i] = a + b * (sqrtf(-2.0f * vlog_f32(u1)) * vcos2pi_f32(u2));
    }
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
